package leave

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kiln-project/kiln/nodefile"
)

type recorder struct{ cmds []string }

func (r *recorder) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.cmds = append(r.cmds, name+" "+strings.Join(args, " "))
	return nil, nil
}

func TestWatcher(t *testing.T) {
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		noNode      bool
		wantLeave   bool
	}{
		{name: "marked removed", annotations: map[string]string{nodefile.RemovedAnnotation: "2026-11-25T03:00:00Z"}, wantLeave: true},
		{name: "not marked", annotations: map[string]string{"other": "x"}},
		{name: "no Node (not registered yet, or deleted without the mark)", noNode: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := fake.NewClientset()
			if !tc.noNode {
				cs = fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: tc.annotations}})
			}
			root, sys := t.TempDir(), &recorder{}
			var console []string
			w := &Watcher{Kube: cs, Node: "w1", Root: root, Sys: sys, Interval: 10 * time.Millisecond,
				Console: func(f string, a ...any) { console = append(console, fmt.Sprintf(f, a...)) },
				Now:     func() time.Time { return time.Date(2026, 11, 25, 3, 1, 0, 0, time.UTC) }}
			ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer cancel()
			err := w.Run(ctx)
			stamp, removed := Removed(root)
			if !tc.wantLeave {
				if err != context.DeadlineExceeded || removed || len(sys.cmds) > 0 {
					t.Fatalf("left without the mark: err %v, stamp %q, commands %v", err, stamp, sys.cmds)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !removed || !strings.Contains(stamp, "2026-11-25T03:00:00Z") {
				t.Errorf("stamp %q, %v", stamp, removed)
			}
			if want := "systemctl stop kubelet.service kubepods.slice"; len(sys.cmds) != 1 || sys.cmds[0] != want {
				t.Errorf("commands %v, want %q", sys.cmds, want)
			}
			n, _ := cs.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
			if n.Annotations[nodefile.LeftAnnotation] != "2026-11-25T03:01:00Z" {
				t.Errorf("annotations %v, want %s", n.Annotations, nodefile.LeftAnnotation)
			}
			if len(console) != 2 || !strings.Contains(console[0], "stays out until it is re-imaged") || console[1] != "left the cluster" {
				t.Errorf("console %q", console)
			}
		})
	}
}
