package role

import (
	"context"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/removednodes"
	"github.com/kiln-project/kiln/internal/certtest"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Against a real kube-apiserver with the add-ons applied: a node listed
// removed may not request a kubelet client certificate or create or
// update its Node, unless it authenticates with a credential its entry
// admits; a node not listed is never refused. The credential ID kiln
// computes from a certificate is the one the apiserver sees.
func TestRemovedNodeIsDeniedOnARealAPIServer(t *testing.T) {
	cp := startRealControlPlane(t)
	ctx, admin := context.Background(), cp.cluster.kube
	if err := cp.cluster.applyAddOns(ctx, cp.node.units().env.params(etcdmember.Membership{})); err != nil {
		t.Fatal(err)
	}
	idA := "X509SHA256=" + strings.Repeat("a", 64)
	w9, w8 := impersonateNode(t, cp, "w9", idA), impersonateNode(t, cp, "w8", idA)
	if _, _, err := removednodes.MarkRemoved(ctx, admin, "w9", time.Now()); err != nil {
		t.Fatal(err)
	}

	// The policy, its binding and the list take a moment to be loaded.
	refusedEventually(t, "w9's certificate request", func() error { return requestClientCert(ctx, t, w9, "w9") })
	refusedEventually(t, "w9's Node", func() error { return createNode(ctx, w9, "w9") })
	for what, err := range map[string]error{
		"w8's certificate request": requestClientCert(ctx, t, w8, "w8"),
		"w8's Node":                createNode(ctx, w8, "w8"),
	} {
		if err != nil {
			t.Errorf("%s, not listed: %v", what, err)
		}
	}

	if _, err := removednodes.Admit(ctx, admin, "w9", idA, nil); err != nil {
		t.Fatal(err)
	}
	allowedEventually(t, "w9's certificate request, admitted", func() error { return requestClientCert(ctx, t, w9, "w9") })
	allowedEventually(t, "w9's Node, admitted", func() error { return createNode(ctx, w9, "w9") })

	// Removed again: the admitted credential no longer is, and an
	// update of the Node it created is refused too.
	if _, _, err := removednodes.MarkRemoved(ctx, admin, "w9", time.Now()); err != nil {
		t.Fatal(err)
	}
	refusedEventually(t, "w9's Node update, removed again", func() error { return labelNode(ctx, w9, "w9") })
	refusedEventually(t, "w9's Node status update, removed again", func() error { return nodeStatus(ctx, w9, "w9") })
	if err := labelNode(ctx, w8, "w8"); err != nil {
		t.Errorf("w8's Node update, not listed: %v", err)
	}

	// With g1's own kubelet client certificate: the ID kiln computes
	// is the one the apiserver puts in the request.
	g1, id := kubeletClient(t, cp)
	if err := requestClientCert(ctx, t, g1, "g1"); err != nil {
		t.Fatalf("g1's certificate request, not listed: %v", err)
	}
	setEntry(ctx, t, admin, "g1", removednodes.Entry{Removed: time.Now(), Credentials: []string{idA}})
	refusedEventually(t, "g1's certificate request, another ID admitted", func() error { return requestClientCert(ctx, t, g1, "g1") })
	if _, err := removednodes.Admit(ctx, admin, "g1", id, nil); err != nil {
		t.Fatal(err)
	}
	allowedEventually(t, "g1's certificate request, its certificate admitted", func() error { return requestClientCert(ctx, t, g1, "g1") })
}

// impersonateNode is node's kubelet, as the apiserver would know it
// with a client certificate whose credential ID is id.
func impersonateNode(t *testing.T, cp *realControlPlane, node, id string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(cp.config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:node:" + node, Groups: []string{"system:nodes", "system:authenticated"},
		Extra: map[string][]string{removednodes.CredentialIDKey: {id}}}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

// kubeletClient is a client with g1's kubelet.conf (its kubelet client
// certificate) and that certificate's credential ID.
func kubeletClient(t *testing.T, cp *realControlPlane) (kubernetes.Interface, string) {
	t.Helper()
	rc, err := clientcmd.BuildConfigFromFlags("", localKubeconfig(t, cp.root, nodefile.KubeconfigDir+"/kubelet.conf", cp.apiPort))
	if err != nil {
		t.Fatal(err)
	}
	data := rc.TLSClientConfig.CertData
	if len(data) == 0 {
		if data, err = os.ReadFile(rc.TLSClientConfig.CertFile); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := pem.Decode(data)
	if b == nil {
		t.Fatalf("g1's kubelet client certificate: no PEM")
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	return kube, removednodes.CredentialID(b.Bytes)
}

// requestClientCert creates a kubelet client certificate request for
// node, as its kubelet's rotation does.
func requestClientCert(ctx context.Context, t *testing.T, kube kubernetes.Interface, node string) error {
	csr, err := certtest.NodeRequest(node)
	if err != nil {
		t.Fatal(err)
	}
	_, err = kube.CertificatesV1().CertificateSigningRequests().Create(ctx, csr, metav1.CreateOptions{})
	return err
}

func createNode(ctx context.Context, kube kubernetes.Interface, node string) error {
	_, err := kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
	return err
}

func labelNode(ctx context.Context, kube kubernetes.Interface, node string) error {
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels["kiln.dev/test"] = fmt.Sprint(time.Now().UnixNano())
	_, err = kube.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err
}

func nodeStatus(ctx context.Context, kube kubernetes.Interface, node string) error {
	n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, Reason: "Test",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	_, err = kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

// isRemovedDenial reports whether err is the policy's refusal.
func isRemovedDenial(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), manifests.RemovedNodesDenial)
}

// refusedEventually waits, bounded, until try is refused by the policy;
// any other error fails at once.
func refusedEventually(t *testing.T, what string, try func() error) {
	t.Helper()
	err := retry.Wait(context.Background(), what+" refused", time.Minute, nil, func(context.Context) error {
		switch err := try(); {
		case isRemovedDenial(err):
			return nil
		case err == nil:
			return errors.New("allowed")
		default:
			return retry.Final(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// allowedEventually waits, bounded, until try is no longer refused by
// the policy; any other error fails at once.
func allowedEventually(t *testing.T, what string, try func() error) {
	t.Helper()
	err := retry.Wait(context.Background(), what+" allowed", time.Minute, nil, func(context.Context) error {
		switch err := try(); {
		case err == nil:
			return nil
		case isRemovedDenial(err):
			return err
		default:
			return retry.Final(err)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// setEntry writes node's entry in one update: the policy sees it whole.
func setEntry(ctx context.Context, t *testing.T, admin kubernetes.Interface, node string, e removednodes.Entry) {
	t.Helper()
	cms := admin.CoreV1().ConfigMaps(removednodes.Namespace)
	cm, err := cms.Get(ctx, removednodes.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[node] = e.String()
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
