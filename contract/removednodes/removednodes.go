// Package removednodes owns the list of the nodes kiln node remove took
// out, which the cluster's admission policy (manifests' removed-nodes
// ValidatingAdmissionPolicy) reads to refuse their credentials: the
// ConfigMap kube-system/kiln-removed-nodes, one entry per node name,
// "removed=<RFC3339 time>" then the credential IDs admitted back
// ("X509SHA256=<hex>", as the apiserver names an x509 client in its
// user's extra). A node listed here may not request a certificate or
// create or update its Node unless it authenticates with an admitted
// credential. The package writes entries (MarkRemoved, Admit) and keeps
// the lineage of an admitted node's renewed certificates (Reconciler).
package removednodes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// The list's ConfigMap.
const (
	Name      = "kiln-removed-nodes"
	Namespace = "kube-system"
)

// CredentialIDKey is the user extra in which the apiserver names the
// credential a request authenticated with (user.CredentialIDKey), and
// CSRs record it in spec.extra.
const CredentialIDKey = "authentication.kubernetes.io/credential-id"

// x509Prefix starts the credential ID of an x509 client certificate.
const x509Prefix = "X509SHA256="

// removedPrefix starts an entry's removal time.
const removedPrefix = "removed="

// ErrNotRemoved is Admit's answer for a node the list does not hold.
var ErrNotRemoved = errors.New("not removed")

// CredentialID is the ID the apiserver gives a client certificate (its
// DER bytes): the SHA-256 of the certificate, in lowercase hex.
func CredentialID(certDER []byte) string {
	sum := sha256.Sum256(certDER)
	return x509Prefix + hex.EncodeToString(sum[:])
}

// Entry is one removed node: when it was removed and the credentials
// admitted back since.
type Entry struct {
	Removed     time.Time
	Credentials []string
}

// ParseEntry reads an entry's value.
func ParseEntry(value string) (Entry, error) {
	var e Entry
	seen := false
	for _, tok := range strings.Fields(value) {
		switch {
		case strings.HasPrefix(tok, removedPrefix):
			if seen {
				return Entry{}, fmt.Errorf("%q: two removal times", value)
			}
			t, err := time.Parse(time.RFC3339, strings.TrimPrefix(tok, removedPrefix))
			if err != nil {
				return Entry{}, fmt.Errorf("%q: removal time: %w", value, err)
			}
			e.Removed, seen = t, true
		case strings.HasPrefix(tok, x509Prefix) && len(tok) > len(x509Prefix):
			e.Credentials = append(e.Credentials, tok)
		default:
			return Entry{}, fmt.Errorf("%q: %q is neither %s<time> nor %s<hex>", value, tok, removedPrefix, x509Prefix)
		}
	}
	if !seen {
		return Entry{}, fmt.Errorf("%q: no %s<time>", value, removedPrefix)
	}
	return e, nil
}

// String is the entry's value, as the admission policy reads it.
func (e Entry) String() string {
	return strings.Join(append([]string{removedPrefix + e.Removed.UTC().Format(time.RFC3339)}, e.Credentials...), " ")
}

// Admits reports whether the entry admits the credential id.
func (e Entry) Admits(id string) bool { return slices.Contains(e.Credentials, id) }

// List is the ConfigMap's entries by node name.
type List map[string]Entry

// Read is the list; no ConfigMap is an empty list.
func Read(ctx context.Context, kube kubernetes.Interface) (List, error) {
	cm, err := kube.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return List{}, nil
	case err != nil:
		return nil, fmt.Errorf("reading ConfigMap %s/%s: %w", Namespace, Name, err)
	}
	return parse(cm)
}

func parse(cm *corev1.ConfigMap) (List, error) {
	l := List{}
	for node, value := range cm.Data {
		e, err := ParseEntry(value)
		if err != nil {
			return nil, fmt.Errorf("ConfigMap %s/%s, node %s: %w", Namespace, Name, node, err)
		}
		l[node] = e
	}
	return l, nil
}

// MarkRemoved lists node as removed at now, creating the ConfigMap when
// there is none. An entry that admits nothing is kept as it is, with its
// first removal time: a resumed removal, or another removal of a node
// never admitted back. An entry that admits credentials (the node came
// back) starts again from now, admitting none. It returns the entry now
// listed and whether it was written.
func MarkRemoved(ctx context.Context, kube kubernetes.Interface, node string, now time.Time) (Entry, bool, error) {
	var out Entry
	var wrote bool
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cms := kube.CoreV1().ConfigMaps(Namespace)
		cm, err := cms.Get(ctx, Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			out = Entry{Removed: now.UTC().Truncate(time.Second)}
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "kiln"}},
				Data: map[string]string{node: out.String()}}
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				return apierrors.NewConflict(corev1.Resource("configmaps"), Name, err) // created meanwhile: read it again
			}
			wrote = err == nil
			return err
		}
		if err != nil {
			return err
		}
		if value, ok := cm.Data[node]; ok {
			if e, err := ParseEntry(value); err == nil && len(e.Credentials) == 0 {
				out, wrote = e, false
				return nil
			}
		}
		out = Entry{Removed: now.UTC().Truncate(time.Second)}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[node] = out.String()
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		wrote = err == nil
		return err
	})
	if err != nil {
		return Entry{}, false, fmt.Errorf("listing %s as removed in ConfigMap %s/%s: %w", node, Namespace, Name, err)
	}
	return out, wrote, nil
}

// Admit adds the credential id to node's entry (nothing when it is
// there already) and returns the entry. A node without an entry is
// ErrNotRemoved, and nothing is written. check, when not nil, sees the
// entry first and may refuse.
func Admit(ctx context.Context, kube kubernetes.Interface, node, id string, check func(Entry) error) (Entry, error) {
	var out Entry
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cm, err := kube.CoreV1().ConfigMaps(Namespace).Get(ctx, Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return fmt.Errorf("%w: no ConfigMap %s/%s lists removed nodes", ErrNotRemoved, Namespace, Name)
		}
		if err != nil {
			return fmt.Errorf("reading ConfigMap %s/%s: %w", Namespace, Name, err)
		}
		value, ok := cm.Data[node]
		if !ok {
			return fmt.Errorf("%w: ConfigMap %s/%s has no entry for %s", ErrNotRemoved, Namespace, Name, node)
		}
		e, err := ParseEntry(value)
		if err != nil {
			return fmt.Errorf("ConfigMap %s/%s, node %s: %w", Namespace, Name, node, err)
		}
		if check != nil {
			if err := check(e); err != nil {
				return err
			}
		}
		out = e
		if e.Admits(id) {
			return nil
		}
		out.Credentials = append(slices.Clone(e.Credentials), id)
		cm.Data[node] = out.String()
		if _, err := kube.CoreV1().ConfigMaps(Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("admitting %s for %s in ConfigMap %s/%s: %w", id, node, Namespace, Name, err)
		}
		return nil
	})
	return out, err
}
