package role

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kiln-project/kiln/kilnnet"
	"github.com/kiln-project/kiln/nodefile"
)

// While a node waits for its own Ready, the agent writes kiln-net's
// conflist as soon as the Node has a pod CIDR, and never replaces a file
// that is there.
func TestReadyWaitSeedsTheCNIConfiguration(t *testing.T) {
	want, err := kilnnet.Conflist("10.244.3.0/24")
	if err != nil {
		t.Fatal(err)
	}
	node := func(cidr string, ready corev1.ConditionStatus) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1"}, Spec: corev1.NodeSpec{PodCIDR: cidr},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: ready,
				LastHeartbeatTime: metav1.Now(), Message: "NetworkPluginNotReady"}}}}
	}
	for _, tc := range []struct {
		name     string
		objects  []*corev1.Node
		existing string // a file already at the conflist's path
		want     []byte // the file afterwards; nil: none
		ready    bool
	}{
		{"pod CIDR given, no file", []*corev1.Node{node("10.244.3.0/24", corev1.ConditionFalse)}, "", want, false},
		{"no pod CIDR yet", []*corev1.Node{node("", corev1.ConditionFalse)}, "", nil, false},
		{"not registered yet", nil, "", nil, false},
		{"a file already there", []*corev1.Node{node("10.244.3.0/24", corev1.ConditionFalse)}, "operator's\n", []byte("operator's\n"), false},
		{"already Ready", []*corev1.Node{node("10.244.3.0/24", corev1.ConditionTrue)}, "", nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			path := filepath.Join(root, "etc/cni/net.d", kilnnet.ConfName)
			if tc.existing != "" {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(tc.existing), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			kube := fake.NewClientset()
			for _, o := range tc.objects {
				if _, err := kube.CoreV1().Nodes().Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			n := &Node{Root: root, Log: t.Logf, file: &nodefile.NodeFile{Name: "w1"}, started: time.Now().Add(-time.Minute)}
			err := n.selfReady(context.Background(), kube)
			if tc.ready != (err == nil) {
				t.Errorf("selfReady: %v, want ready=%t", err, tc.ready)
			}
			got, err := os.ReadFile(path)
			if tc.want == nil {
				if err == nil {
					t.Errorf("a conflist was written: %s", got)
				}
				return
			}
			if string(got) != string(tc.want) {
				t.Errorf("conflist %q, want %q (%v)", got, tc.want, err)
			}
		})
	}
}
