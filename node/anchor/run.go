package anchor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// Interval is how often Run looks at a component: the zone every 10 s
// (a master that goes down leaves the kubernetes Endpoints within its
// endpoint lease, 15 s, so it leaves every node's answer well within a
// minute), a static pod every 30 s.
func Interval(component string) time.Duration {
	if component == Discovery {
		return 10 * time.Second
	}
	return 30 * time.Second
}

// CheckComponents refuses an empty list, a name that is neither an
// anchored component nor Discovery, and a name given twice.
func CheckComponents(components []string) error {
	if len(components) == 0 {
		return errors.New("no component (want one or more of: " + fmt.Sprint(append(slices.Clone(Components), Discovery)) + ")")
	}
	for i, c := range components {
		if c != Discovery && !slices.Contains(Components, c) {
			return fmt.Errorf("unknown component %q (the components: %v and %s)", c, Components, Discovery)
		}
		if slices.Contains(components[:i], c) {
			return fmt.Errorf("component %q given twice", c)
		}
	}
	return nil
}

// RunAll runs every component side by side, each at its Interval, until
// ctx ends: the one pod of the masters' anchor keeps them all.
func (h Host) RunAll(ctx context.Context, components []string, kube kubernetes.Interface) {
	var wg sync.WaitGroup
	for _, c := range components {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.Run(ctx, c, kube, Interval(c))
		}()
	}
	wg.Wait()
}

// CleanupAll runs each component's Cleanup in order, within ctx: the
// masters' anchor lists etcd last, whose cleanup may wait for the
// member's removal until ctx ends. Every component is tried; the errors
// are joined.
func (h Host) CleanupAll(ctx context.Context, components []string, now time.Time) error {
	var errs []error
	for _, c := range components {
		if c == Discovery {
			continue // the zone stays: a node without it cannot find the apiservers
		}
		if err := h.Cleanup(ctx, c, now); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
		}
	}
	return errors.Join(errs...)
}

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
