package anchor

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/nodefile"
)

// Run keeps the component anchored until ctx ends: a static pod
// component's manifest, or (for Discovery) the zone, checked every
// interval. A failed check is logged and retried: an anchor never
// removes what it keeps.
func (h Host) Run(ctx context.Context, component string, kube kubernetes.Interface, interval time.Duration) error {
	serial := uint32(time.Now().Unix())
	for {
		if component == Discovery {
			h.keepZoneOnce(ctx, kube, &serial)
		} else if wrote, err := h.Keep(component); err != nil {
			h.Log("%s: %v", component, err)
		} else if wrote {
			h.Log("%s: wrote its static pod", component)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(interval):
		}
	}
}

func (h Host) keepZoneOnce(ctx context.Context, kube kubernetes.Interface, serial *uint32) {
	f, err := nodefile.Read(h.path(nodefile.Path))
	if err != nil {
		h.Log("discovery: %v", err)
		return
	}
	ep, err := kube.CoreV1().Endpoints("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	if err != nil {
		h.Log("discovery: reading the kubernetes endpoints: %v (the zone is kept)", err)
		return
	}
	z, ok := ZoneFrom(ep, f.Cluster.DiscoveryName, *serial+1)
	if !ok {
		h.Log("discovery: no ready apiserver in the endpoints; the zone is kept")
		return
	}
	wrote, err := h.KeepZone(z)
	if err != nil {
		h.Log("discovery: %v", err)
		return
	}
	if wrote {
		*serial = z.Serial
		h.Log("discovery: zone now lists %v", z.APIServers)
	}
}
