// Package kilnnet is kiln's CNI add-on (kiln-net, a DaemonSet of the kiln
// image): it waits for the pod CIDR the controller-manager gives its Node
// and writes the node's CNI configuration for the reference plugins baked
// into the image (bridge, host-local IPAM, portmap). Pod traffic between
// nodes is routed, not tunnelled: kiln's nodes share an L2 segment.
package kilnnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// ConfName is the conflist kiln-net owns in the CNI configuration directory.
const ConfName = "10-kiln.conflist"

// Conflist renders the node's CNI configuration for its pod CIDR.
func Conflist(podCIDR string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "kiln",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "kiln0", "isGateway": true, "ipMasq": true, "hairpinMode": true,
				"ipam": map[string]any{
					"type":   "host-local",
					"ranges": []any{[]any{map[string]any{"subnet": podCIDR}}},
					"routes": []any{map[string]any{"dst": "0.0.0.0/0"}},
				},
			},
			map[string]any{"type": "portmap", "capabilities": map[string]any{"portMappings": true}},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	return append(data, '\n'), err
}

// Run keeps the node's conflist in dir matching its Node's pod CIDR,
// checking every interval until ctx ends.
func Run(ctx context.Context, kube kubernetes.Interface, node, dir string, interval time.Duration, log func(string, ...any)) error {
	var written []byte
	for {
		n, err := kube.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
		switch {
		case err != nil:
			log("reading node %s: %v", node, err)
		case n.Spec.PodCIDR == "":
			log("node %s has no pod CIDR yet (the controller-manager allocates it)", node)
		default:
			conf, err := Conflist(n.Spec.PodCIDR)
			if err != nil {
				return err
			}
			if !bytes.Equal(conf, written) {
				if err := atomicfile.WriteFile(filepath.Join(dir, ConfName), conf, 0o644, nil); err != nil {
					return fmt.Errorf("writing the CNI configuration: %w", err)
				}
				written = conf
				log("wrote %s for pod CIDR %s", filepath.Join(dir, ConfName), n.Spec.PodCIDR)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}
