package role

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/nodelabels"
	"github.com/kiln-project/kiln/internal/retry"
)

// asKubelet owns what this node does through its kubelet's credentials
// (every node, a worker only so): its wait for its own Ready, the labels
// it asks a master for, the kiln it runs and the end of its role on its Node.
type asKubelet struct {
	env   nodeEnv
	api   clients
	local nodeLocal
	cni   *podNetwork
	wait  time.Duration
	// version is Node.Version: "" publishes nothing.
	version string
	// deferRoleDone is Node.DeferRoleDone.
	deferRoleDone bool
}

// waitReadyAsKubelet waits until the node's own Node is Ready, asked as
// its kubelet, seeing meanwhile to its CNI file and node-local address.
func (k asKubelet) waitReadyAsKubelet(ctx context.Context) error {
	kube, err := k.api.kubelet()
	if err != nil {
		return err
	}
	keep := k.local.keep()
	return retry.Wait(ctx, "node "+k.env.file.Name+" Ready", k.wait, k.env.log, func(ctx context.Context) error {
		err := rejected(k.cni.selfReady(ctx, kube))
		if err != nil {
			keep(ctx) // this client and the kubelet reach the apiservers through it
		}
		return err
	})
}

// requestLabels annotates the Node with the site's labels NodeRestriction
// keeps a kubelet from setting (node-role.kubernetes.io/worker, ...); a
// master's controller-manager anchor applies them.
func (k asKubelet) requestLabels(ctx context.Context) error {
	r := restrictedLabels(k.env.file)
	if len(r) == 0 {
		return nil
	}
	kube, err := k.api.kubelet()
	if err != nil {
		return err
	}
	err = retry.Wait(ctx, "labels requested on node "+k.env.file.Name, k.wait, k.env.log, func(ctx context.Context) error {
		return rejected(nodelabels.Request(ctx, kube, k.env.file.Name, r))
	})
	if err == nil {
		k.env.log("labels %v requested; a master applies them (NodeRestriction forbids a kubelet setting them)", r)
	}
	return err
}

// rejected makes an answer that no retry changes final: the cluster
// refuses this node's client certificate, or the apiserver's certificate
// is not from this node's CA (the node belongs to another site's PKI).
func rejected(err error) error {
	var unknownCA x509.UnknownAuthorityError
	switch {
	case apierrors.IsUnauthorized(err):
		return retry.Final(fmt.Errorf("%w: %w", errCertRejected, err))
	case errors.As(err, &unknownCA):
		return retry.Final(fmt.Errorf("the apiserver's certificate is not from this site's CA: %w", err))
	}
	return err
}

// publishBound bounds each annotation the node publishes on its Node:
// kiln node list's column is not worth holding a boot for, and a
// rollout that does not see the role done stops by itself.
const publishBound = 2 * time.Minute

// publishVersion annotates the node's own Node with the kiln it runs:
// the version (nodefile.VersionAnnotation) and the binary's digest
// (nodefile.KilnDigestAnnotation), on every boot, so a re-imaged machine
// shows its new image. A failure is said and does not fail the role.
func (k asKubelet) publishVersion(ctx context.Context) error {
	if k.version == "" {
		return nil
	}
	ann := map[string]string{nodefile.VersionAnnotation: k.version}
	if sum, err := fileSHA256(k.env.path(nodefile.KilnBinary)); err == nil {
		ann[nodefile.KilnDigestAnnotation] = sum
	} else {
		k.env.log("the kiln binary's digest is not published (kiln upgrade cannot tell this node's image): %v", err)
	}
	if err := k.annotate(ctx, "kiln version", ann); err != nil {
		k.env.log("the kiln version is not on Node %s (kiln node list shows none): %v", k.env.file.Name, err)
	}
	return nil
}

// publishRoleDone is the role's last phase: the boot ID on the Node
// (nodefile.RoleDoneAnnotation) tells kiln upgrade's health gate the role
// finished on this boot. A failure is said; the gate then waits, and a
// rollout stops at this node rather than pass it unseen.
func (k asKubelet) publishRoleDone(ctx context.Context) error {
	if k.deferRoleDone {
		return nil // published after the trying boot's verdict (Node.PublishRoleDone)
	}
	return k.roleDone(ctx)
}

func (k asKubelet) roleDone(ctx context.Context) error {
	id, err := os.ReadFile(k.env.path(bootIDPath))
	if err == nil {
		err = k.annotate(ctx, "role done", map[string]string{nodefile.RoleDoneAnnotation: strings.TrimSpace(string(id))})
	}
	if err != nil {
		k.env.log("the role's end is not on Node %s (kiln upgrade's health gate will not see it): %v", k.env.file.Name, err)
	}
	return nil
}

// bootIDPath is the kernel's ID of this boot, the one the kubelet reports
// as the Node's status.nodeInfo.bootID.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// annotate merges ann into the node's own Node's annotations as its
// kubelet (NodeRestriction lets a kubelet annotate its own Node).
func (k asKubelet) annotate(ctx context.Context, what string, ann map[string]string) error {
	kube, err := k.api.kubelet()
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	return retry.Wait(ctx, what+" published on node "+k.env.file.Name, publishBound, k.env.log, func(ctx context.Context) error {
		_, err := kube.CoreV1().Nodes().Patch(ctx, k.env.file.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsForbidden(err) {
			return retry.Final(err) // no retry changes a refusal
		}
		return rejected(err)
	})
}

// fileSHA256 is the hex SHA-256 of the file at path.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
