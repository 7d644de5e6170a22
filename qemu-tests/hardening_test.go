package qemutests

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
)

// checkHardening: an anonymous request reaches /readyz and nothing else,
// and a Secret written through the apiserver is encrypted in etcd, read
// raw through etcdPort with the apiserver's etcd client certificate.
func checkHardening(t *testing.T, kube kubernetes.Interface, cfg []byte, apiPort, etcdPort int) {
	t.Helper()
	ctx := context.Background()
	anon, err := cluster.AnonymousClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("https://127.0.0.1:%d", apiPort)
	if err := clustercheck.AnonymousLimited(ctx, anon, base); err != nil {
		t.Error(err)
	}
	plain := fmt.Sprintf("kiln-plaintext-%d", time.Now().UnixNano())
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "encrypted-at-rest"}, StringData: map[string]string{"value": plain}}
	if _, err := kube.CoreV1().Secrets("default").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Secret: %v", err)
	}
	var d net.Dialer
	raw, err := cluster.EtcdValue(ctx, cfg, fmt.Sprintf("https://127.0.0.1:%d", etcdPort), "/registry/secrets/default/"+secret.Name, d.DialContext)
	if err != nil {
		t.Fatal(err)
	}
	if err := clustercheck.EncryptedAtRest(raw, plain); err != nil {
		t.Error(err)
	}
}
