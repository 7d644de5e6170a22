package removednodes

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

var (
	t0   = time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	idA  = "X509SHA256=" + strings.Repeat("a", 64)
	idB  = "X509SHA256=" + strings.Repeat("b", 64)
	at0  = "removed=2026-03-01T10:00:00Z"
	late = t0.Add(time.Hour)
)

func TestParseEntry(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        Entry
		wantErr     string
	}{
		{name: "removed only", value: at0, want: Entry{Removed: t0}},
		{name: "with credentials", value: at0 + " " + idA + "  " + idB, want: Entry{Removed: t0, Credentials: []string{idA, idB}}},
		{name: "credentials first", value: idA + " " + at0, want: Entry{Removed: t0, Credentials: []string{idA}}},
		{name: "no removal time", value: idA, wantErr: "no removed="},
		{name: "empty", value: "", wantErr: "no removed="},
		{name: "bad time", value: "removed=yesterday", wantErr: "removal time"},
		{name: "two times", value: at0 + " " + at0, wantErr: "two removal times"},
		{name: "unknown token", value: at0 + " SHA1=ff", wantErr: `"SHA1=ff" is neither`},
		{name: "empty credential", value: at0 + " X509SHA256=", wantErr: "is neither"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseEntry(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParseEntry(%q) = %v, %v; want an error with %q", tc.value, got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !got.Removed.Equal(tc.want.Removed) || !slices.Equal(got.Credentials, tc.want.Credentials) {
				t.Fatalf("ParseEntry(%q) = %v, %v; want %v", tc.value, got, err, tc.want)
			}
			if again, err := ParseEntry(got.String()); err != nil || again.String() != got.String() {
				t.Errorf("String %q does not parse back: %v, %v", got.String(), again, err)
			}
		})
	}
}

func TestEntryString(t *testing.T) {
	e := Entry{Removed: t0.In(time.FixedZone("x", 3600)), Credentials: []string{idA}}
	if got, want := e.String(), at0+" "+idA; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

// The ID is the apiserver's: X509SHA256= and the certificate's SHA-256
// in lowercase hex.
func TestCredentialID(t *testing.T) {
	der := []byte("not really DER")
	sum := sha256.Sum256(der)
	if got, want := CredentialID(der), "X509SHA256="+hex.EncodeToString(sum[:]); got != want {
		t.Errorf("CredentialID = %s, want %s", got, want)
	}
}

func listCM(data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: Name, Namespace: Namespace}, Data: data}
}

func entries(t *testing.T, kube *fake.Clientset) map[string]string {
	t.Helper()
	cm, err := kube.CoreV1().ConfigMaps(Namespace).Get(context.Background(), Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

func TestMarkRemoved(t *testing.T) {
	for _, tc := range []struct {
		name      string
		objs      []runtime.Object
		want      map[string]string
		wantWrote bool
	}{
		{name: "no list yet", want: map[string]string{"w1": "removed=2026-03-01T11:00:00Z"}, wantWrote: true},
		{name: "another node listed", objs: []runtime.Object{listCM(map[string]string{"w2": at0})},
			want: map[string]string{"w1": "removed=2026-03-01T11:00:00Z", "w2": at0}, wantWrote: true},
		{name: "an empty list", objs: []runtime.Object{listCM(nil)},
			want: map[string]string{"w1": "removed=2026-03-01T11:00:00Z"}, wantWrote: true},
		{name: "resumed removal keeps the first time", objs: []runtime.Object{listCM(map[string]string{"w1": at0})},
			want: map[string]string{"w1": at0}},
		{name: "a node admitted back is removed anew", objs: []runtime.Object{listCM(map[string]string{"w1": at0 + " " + idA})},
			want: map[string]string{"w1": "removed=2026-03-01T11:00:00Z"}, wantWrote: true},
		{name: "an unreadable entry is replaced", objs: []runtime.Object{listCM(map[string]string{"w1": "garbage"})},
			want: map[string]string{"w1": "removed=2026-03-01T11:00:00Z"}, wantWrote: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.objs...)
			e, wrote, err := MarkRemoved(context.Background(), kube, "w1", late)
			if err != nil {
				t.Fatal(err)
			}
			if wrote != tc.wantWrote {
				t.Errorf("wrote = %v, want %v", wrote, tc.wantWrote)
			}
			got := entries(t, kube)
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("list %v, want %v", got, tc.want)
			}
			if e.String() != got["w1"] {
				t.Errorf("returned %q, listed %q", e, got["w1"])
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	refuse := errors.New("refused")
	for _, tc := range []struct {
		name    string
		objs    []runtime.Object
		check   func(Entry) error
		want    map[string]string // nil: no list
		wantErr error
	}{
		{name: "admitted", objs: []runtime.Object{listCM(map[string]string{"w1": at0, "w2": at0})},
			want: map[string]string{"w1": at0 + " " + idB, "w2": at0}},
		{name: "beside another credential", objs: []runtime.Object{listCM(map[string]string{"w1": at0 + " " + idA})},
			want: map[string]string{"w1": at0 + " " + idA + " " + idB}},
		{name: "admitted already", objs: []runtime.Object{listCM(map[string]string{"w1": at0 + " " + idB})},
			want: map[string]string{"w1": at0 + " " + idB}},
		{name: "not listed", objs: []runtime.Object{listCM(map[string]string{"w2": at0})},
			want: map[string]string{"w2": at0}, wantErr: ErrNotRemoved},
		{name: "no list", wantErr: ErrNotRemoved},
		{name: "check refuses", objs: []runtime.Object{listCM(map[string]string{"w1": at0})},
			check: func(Entry) error { return refuse }, want: map[string]string{"w1": at0}, wantErr: refuse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := fake.NewClientset(tc.objs...)
			_, err := Admit(context.Background(), kube, "w1", idB, tc.check)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Admit: %v, want %v", err, tc.wantErr)
			}
			if tc.want == nil {
				return
			}
			if got := entries(t, kube); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("list %v, want %v", got, tc.want)
			}
		})
	}
}

// issued is a certificate for cn, PEM, and its credential ID.
func issued(t *testing.T, cn string) ([]byte, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn, Organization: []string{"system:nodes"}},
		NotBefore: t0, NotAfter: t0.Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), CredentialID(der)
}

func csr(name, user, by string, cert []byte) *certificatesv1.CertificateSigningRequest {
	c := &certificatesv1.CertificateSigningRequest{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:   certificatesv1.CertificateSigningRequestSpec{SignerName: KubeletClientSigner, Username: user},
		Status: certificatesv1.CertificateSigningRequestStatus{Certificate: cert}}
	if by != "" {
		c.Spec.Extra = map[string]certificatesv1.ExtraValue{CredentialIDKey: {by}}
	}
	return c
}

// The reconciler admits what an admitted credential's requests were
// issued, down the whole lineage, and nothing else.
func TestReconcilerFollowsTheLineage(t *testing.T) {
	second, idSecond := issued(t, "system:node:w1")
	third, idThird := issued(t, "system:node:w1")
	other, _ := issued(t, "system:node:w1")
	w2cert, _ := issued(t, "system:node:w2")
	w3cert, idW3 := issued(t, "system:node:w3")
	wrongCN, _ := issued(t, "system:node:w9")
	for _, tc := range []struct {
		name    string
		list    map[string]string // nil: no ConfigMap
		csrs    []*certificatesv1.CertificateSigningRequest
		want    map[string]string
		wantErr string
		wantLog int
	}{
		{name: "nothing removed", csrs: []*certificatesv1.CertificateSigningRequest{csr("a", "system:node:w1", idA, second)}},
		{name: "rotations of an admitted node, listed out of order",
			list: map[string]string{"w1": at0 + " " + idA},
			csrs: []*certificatesv1.CertificateSigningRequest{
				csr("rotation-2", "system:node:w1", idSecond, third), // made with the certificate rotation-1 gave
				csr("rotation-1", "system:node:w1", idA, second),
			},
			want: map[string]string{"w1": at0 + " " + idA + " " + idSecond + " " + idThird}, wantLog: 2},
		{name: "a request made with a credential not admitted",
			list: map[string]string{"w1": at0 + " " + idA},
			csrs: []*certificatesv1.CertificateSigningRequest{csr("stolen", "system:node:w1", idB, other)},
			want: map[string]string{"w1": at0 + " " + idA}},
		{name: "a request without a credential ID",
			list: map[string]string{"w1": at0 + " " + idA},
			csrs: []*certificatesv1.CertificateSigningRequest{csr("bare", "system:node:w1", "", other)},
			want: map[string]string{"w1": at0 + " " + idA}},
		{name: "a node removed and not admitted",
			list: map[string]string{"w1": at0},
			csrs: []*certificatesv1.CertificateSigningRequest{csr("a", "system:node:w1", idA, other)},
			want: map[string]string{"w1": at0}},
		{name: "a node not listed", list: map[string]string{"w1": at0 + " " + idA},
			csrs: []*certificatesv1.CertificateSigningRequest{csr("w2", "system:node:w2", idA, w2cert)},
			want: map[string]string{"w1": at0 + " " + idA}},
		{name: "not issued yet", list: map[string]string{"w1": at0 + " " + idA},
			csrs: []*certificatesv1.CertificateSigningRequest{csr("pending", "system:node:w1", idA, nil)},
			want: map[string]string{"w1": at0 + " " + idA}},
		{name: "another signer", list: map[string]string{"w1": at0 + " " + idA},
			csrs: []*certificatesv1.CertificateSigningRequest{func() *certificatesv1.CertificateSigningRequest {
				c := csr("serving", "system:node:w1", idA, other)
				c.Spec.SignerName = certificatesv1.KubeletServingSignerName
				return c
			}()},
			want: map[string]string{"w1": at0 + " " + idA}},
		{name: "an unreadable certificate is named, the others done",
			list: map[string]string{"w1": at0 + " " + idA, "w3": at0 + " " + idB},
			csrs: []*certificatesv1.CertificateSigningRequest{
				csr("garbage", "system:node:w1", idA, []byte("nope")),
				csr("mismatch", "system:node:w1", idA, wrongCN),
				csr("w3", "system:node:w3", idB, w3cert),
			},
			want:    map[string]string{"w1": at0 + " " + idA, "w3": at0 + " " + idB + " " + idW3},
			wantErr: "request garbage: status.certificate holds no PEM certificate\nrequest mismatch by system:node:w1: issued certificate names \"system:node:w9\"",
			wantLog: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var objs []runtime.Object
			if tc.list != nil {
				objs = append(objs, listCM(tc.list))
			}
			for _, c := range tc.csrs {
				objs = append(objs, c)
			}
			kube := fake.NewClientset(objs...)
			var log []string
			r := &Reconciler{Kube: kube, Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }}
			err := r.Reconcile(context.Background())
			if got := fmt.Sprint(err); (tc.wantErr == "" && err != nil) || (tc.wantErr != "" && got != tc.wantErr) {
				t.Fatalf("Reconcile: %v, want %q", err, tc.wantErr)
			}
			if len(log) != tc.wantLog {
				t.Errorf("log %q, want %d lines", log, tc.wantLog)
			}
			if tc.list == nil {
				if _, err := kube.CoreV1().ConfigMaps(Namespace).Get(context.Background(), Name, metav1.GetOptions{}); err == nil {
					t.Error("the reconciler created the list")
				}
				return
			}
			if got := entries(t, kube); fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("list %v, want %v", got, tc.want)
			}
		})
	}
}
