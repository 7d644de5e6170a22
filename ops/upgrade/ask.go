package upgrade

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/contract/upgradeask"
)

// AskFor is the ask a rollout onto build writes, but its request ID:
// the build's releases, its PXE artifacts' digests from its manifest,
// url, the base they are served under (kiln serve's, for one), and the
// build's extra kernel arguments (specArgs).
func AskFor(build *imagemanifest.Build, url string) (upgradeask.Ask, error) {
	a := upgradeask.Ask{KilnSHA256: build.Versions.KilnSHA256, Kubernetes: build.Versions.Kubernetes, URL: url}
	for _, f := range []struct {
		name string
		to   *string
	}{{netboot.Kernel, &a.Artifacts.Kernel}, {netboot.Initrd, &a.Artifacts.Initrd}, {netboot.Rootfs, &a.Artifacts.Rootfs}} {
		rel := path.Join(netboot.PXEDir, f.name)
		if *f.to = artifactSHA256(build, rel); *f.to == "" {
			return upgradeask.Ask{}, fmt.Errorf("%s: artifacts: no %s (the build was made without the pxe output): a node stages the PXE artifacts",
				imagemanifest.Path(build.Dir), rel)
		}
	}
	args, err := specArgs(build)
	if err != nil {
		return upgradeask.Ask{}, err
	}
	a.Args = args
	return a, nil
}

// specArgs are the build's extra kernel arguments, read from its iPXE
// script (the one artifact that records them), once the script is the
// one its manifest lists.
func specArgs(build *imagemanifest.Build) ([]string, error) {
	rel := path.Join(netboot.PXEDir, netboot.Script)
	file := filepath.Join(build.Dir, filepath.FromSlash(rel))
	want := artifactSHA256(build, rel)
	if want == "" {
		return nil, fmt.Errorf("%s: artifacts: no %s (the build was made without the pxe output): it holds the build's kernel arguments",
			imagemanifest.Path(build.Dir), rel)
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("the build's kernel arguments: %w", err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != want {
		return nil, fmt.Errorf("%s has sha256 %x, %s lists %s: not the build's", file, sum, imagemanifest.Path(build.Dir), want)
	}
	args, ok := netboot.SpecArgs(string(data))
	if !ok {
		return nil, fmt.Errorf("%s: no kernel line as kiln build writes it, so the build's kernel arguments are unknown", file)
	}
	return args, nil
}

// artifactSHA256 is the sha256 the build's manifest lists for the
// artifact at rel, or "".
func artifactSHA256(build *imagemanifest.Build, rel string) string {
	for _, d := range build.Manifest.Artifacts {
		if d.Path == rel {
			return d.SHA256
		}
	}
	return ""
}

// requestID names the ask to node, on the boot bootBefore, for the
// build of ask: asked again on the same boot (a re-run), the node is
// asked the same, and an answer it gave stands; on a later boot (after
// a rollback) the ask is a new one.
func requestID(node, bootBefore string, ask upgradeask.Ask) string {
	h := sha256.New()
	for _, s := range []string{node, bootBefore, ask.KilnSHA256, ask.Artifacts.Kernel, ask.Artifacts.Initrd, ask.Artifacts.Rootfs, ask.URL, strings.Join(ask.Args, " ")} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// writeAsk writes the ask's value on Node name.
func writeAsk(ctx context.Context, kube kubernetes.Interface, name, value string) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{upgradeask.AskAnnotation: value}}})
	if err != nil {
		return err
	}
	if _, err := kube.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("writing %s on Node %s: %w", upgradeask.AskAnnotation, name, err)
	}
	return nil
}

// answers are what a node published in answer to one request.
type answers struct {
	staged     bool
	failed     *upgradeask.Failed
	rolledBack *upgradeask.RolledBack
}

// answersTo reads the Node's answers to request; answers to other
// requests are not its. A malformed answer is an error naming the
// annotation.
func answersTo(n *corev1.Node, request string) (answers, error) {
	var a answers
	if v, ok := n.Annotations[upgradeask.StagedAnnotation]; ok {
		id, err := upgradeask.DecodeStaged(v)
		if err != nil {
			return a, err
		}
		a.staged = id == request
	}
	if v, ok := n.Annotations[upgradeask.FailedAnnotation]; ok {
		f, err := upgradeask.DecodeFailed(v)
		if err != nil {
			return a, err
		}
		if f.Request == request {
			a.failed = &f
		}
	}
	if v, ok := n.Annotations[upgradeask.RolledBackAnnotation]; ok {
		r, err := upgradeask.DecodeRolledBack(v)
		if err != nil {
			return a, err
		}
		if r.Request == request {
			a.rolledBack = &r
		}
	}
	return a, nil
}

// refusal is the answer that ends the node's step: a failed stage or a
// rollback; nil while there is none.
func (a answers) refusal() error {
	switch {
	case a.rolledBack != nil:
		return a.rolledBack
	case a.failed != nil:
		return a.failed
	}
	return nil
}
