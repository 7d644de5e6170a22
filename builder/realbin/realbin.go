// Package realbin gives host integration tests (KILN_INTEGRATION=1) the
// real component binaries the default image bakes, from the component
// cache make image fills, and starts them as processes that end with
// the test.
package realbin

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/kiln-project/kiln/builder/gobuild"
	"github.com/kiln-project/kiln/images"
)

// Etcd is the path of the default image's etcd.
func Etcd(t *testing.T) string {
	t.Helper()
	spec := spec(t)
	bins, err := builder().Build(context.Background(), gobuild.EtcdTarget(spec.Components.Etcd.Version))
	if err != nil {
		t.Fatal(err)
	}
	return bins["etcd"]
}

// ControlPlane is the paths of the default image's etcd, kube-apiserver
// and kube-controller-manager, by name.
func ControlPlane(t *testing.T) map[string]string {
	t.Helper()
	spec := spec(t)
	ctx := context.Background()
	kt, err := gobuild.ResolveKubernetesTarget(ctx, spec.Components.Kubernetes.Version, time.Unix(spec.SourceDateEpoch, 0).UTC().Format(time.RFC3339))
	if err != nil {
		t.Fatal(err)
	}
	kube, err := builder().Build(ctx, kt)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"etcd": Etcd(t), "kube-apiserver": kube["kube-apiserver"], "kube-controller-manager": kube["kube-controller-manager"]}
}

// Start runs bin with args until the test ends, its output in a log
// whose tail the test prints when it fails.
func Start(t *testing.T, name, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	logf, err := os.Create(filepath.Join(t.TempDir(), name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logf.Name())
			t.Logf("%s log tail:\n%s", name, data[max(0, len(data)-3000):])
		}
	})
}

func spec(t *testing.T) *images.Spec {
	t.Helper()
	s, err := images.Load("")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func builder() gobuild.Builder { return gobuild.Builder{CacheDir: gobuild.DefaultCacheDir()} }
