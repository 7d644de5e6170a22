// Package kilnnet is kiln's CNI add-on (kiln-net, a DaemonSet of the kiln
// image on the host network). On each node it keeps:
//
//   - the node's CNI configuration for the reference plugins baked into the
//     image (bridge kiln0, host-local IPAM on the pod CIDR the
//     controller-manager gave the Node, portmap), once that CIDR exists;
//   - one route per other node's pod CIDR via that node's InternalIP (kiln's
//     nodes share an L2 segment: pod traffic is routed, not tunnelled),
//     marked with kiln-net's own route protocol so that it removes only the
//     routes it added;
//   - iptables rules for the cluster pod CIDR: forwarding to and from it
//     accepted first in FORWARD (Docker on a node sets the FORWARD policy to
//     DROP and inserts its own chains), and masquerading only of pod traffic
//     that leaves the cluster pod CIDR, so pods on different nodes see each
//     other's addresses.
//
// It re-checks all of it periodically and whenever a Node changes. When it
// stops it leaves the routes and rules in place, for the pods that run on.
package kilnnet

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// ConfName is the conflist kiln-net owns in the CNI configuration directory.
const ConfName = "10-kiln.conflist"

// Conflist renders the node's CNI configuration for its pod CIDR. The
// bridge plugin does not masquerade: kiln-net's KILN-POSTROUTING chain
// does, only for traffic leaving the cluster pod CIDR.
func Conflist(podCIDR string) ([]byte, error) {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "kiln",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": "kiln0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
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

// Route is a route to a node's pod CIDR via the node's address.
type Route struct {
	Dst  netip.Prefix
	Via  netip.Addr
	Node string // the Node whose pod CIDR Dst is; empty for routes read from the host
}

func (r Route) String() string { return r.Dst.String() + " via " + r.Via.String() }

// Routes is the host's routing table as kiln-net sees it: only the routes
// it added (the real one marks them with kiln-net's route protocol).
type Routes interface {
	// List returns kiln-net's routes.
	List(ctx context.Context) ([]Route, error)
	// Add adds r; it fails when a route kiln-net did not add has r.Dst.
	Add(ctx context.Context, r Route) error
	// Replace changes kiln-net's route to r.Dst to go via r.Via.
	Replace(ctx context.Context, r Route) error
	// Delete removes kiln-net's route r, and never another.
	Delete(ctx context.Context, r Route) error
}

// Firewall is the host's packet filter as kiln-net sees it.
type Firewall interface {
	// Ensure makes kiln-net's rules for the cluster pod CIDR what they
	// should be and returns what it changed, as sentences for the log.
	Ensure(ctx context.Context, clusterCIDR netip.Prefix) ([]string, error)
}

// Config is what Run keeps and where.
type Config struct {
	Kube        kubernetes.Interface
	Node        string       // this node's name
	ConfDir     string       // the CNI configuration directory
	ClusterCIDR netip.Prefix // the cluster pod CIDR (the site's podCIDR)
	Interval    time.Duration
	Routes      Routes
	Firewall    Firewall
	Log         func(string, ...any)
}

// Run keeps the node's conflist, routes and rules until ctx ends: every
// Interval, and on every Node event. It returns an error only when it
// cannot write the CNI configuration; the rest it logs and retries.
func Run(ctx context.Context, c Config) error {
	if !c.ClusterCIDR.IsValid() {
		return fmt.Errorf("no cluster pod CIDR (--cluster-cidr)")
	}
	c.ClusterCIDR = c.ClusterCIDR.Masked()
	poke := make(chan struct{}, 1)
	go watchNodes(ctx, c.Kube, poke, c.Log)
	s := &syncer{Config: c, notes: map[string]bool{}, owners: map[netip.Prefix]string{}}
	for {
		if err := s.sync(ctx); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second): // at most one pass a second, however busy the Nodes
		}
		select {
		case <-ctx.Done():
			return nil
		case <-poke:
		case <-time.After(c.Interval):
		}
	}
}

// watchNodes pokes on every Node event; the pass that follows lists the
// Nodes again, so a missed event costs at most one Interval.
func watchNodes(ctx context.Context, kube kubernetes.Interface, poke chan<- struct{}, log func(string, ...any)) {
	for ctx.Err() == nil {
		w, err := kube.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
		if err == nil {
			events(ctx, w, poke)
			w.Stop()
		} else if ctx.Err() == nil {
			log("watching nodes: %v (the periodic check goes on)", err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
}

// events pokes for each event of w until it ends, fails or ctx ends.
func events(ctx context.Context, w watch.Interface, poke chan<- struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.ResultChan():
			if !ok || ev.Type == watch.Error {
				return
			}
			select {
			case poke <- struct{}{}:
			default:
			}
		}
	}
}

type syncer struct {
	Config
	written []byte
	notes   map[string]bool         // the last pass's failures and routes not made, logged when they change
	owners  map[netip.Prefix]string // the node each route was made for, to name it when it goes
}

// sync is one pass: the rules (which need no apiserver), then the
// conflist and the routes, from the Nodes.
func (s *syncer) sync(ctx context.Context) error {
	var notes []string
	changed, err := s.Firewall.Ensure(ctx, s.ClusterCIDR)
	for _, c := range changed {
		s.Log("%s", c)
	}
	if err != nil {
		notes = append(notes, err.Error())
	}

	// From the apiserver's watch cache (resourceVersion 0), not a quorum
	// read of etcd: every node's kiln-net lists on every Node event, and
	// after a whole-cluster power cut those consistent reads queue
	// behind the control plane's own start on one-vCPU masters. A list
	// a moment old is corrected by the pass the next event or Interval
	// brings.
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	nodes, err := s.Kube.CoreV1().Nodes().List(lctx, metav1.ListOptions{ResourceVersion: "0"})
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			s.logNotes(append(notes, fmt.Sprintf("listing nodes: %v (routes unchanged until the apiserver answers)", err)))
		}
		return nil
	}
	if i := slices.IndexFunc(nodes.Items, func(n corev1.Node) bool { return n.Name == s.Node }); i < 0 {
		notes = append(notes, fmt.Sprintf("node %s (this node) is not registered yet", s.Node))
	} else if cidr := nodes.Items[i].Spec.PodCIDR; cidr == "" {
		notes = append(notes, fmt.Sprintf("node %s (this node) has no pod CIDR yet (the controller-manager allocates it)", s.Node))
	} else if err := s.writeConflist(cidr); err != nil {
		return err
	}

	want, why := DesiredRoutes(nodes.Items, s.Node, s.ClusterCIDR)
	notes = append(notes, why...)
	notes = append(notes, s.syncRoutes(ctx, want)...)
	s.logNotes(notes)
	return nil
}

func (s *syncer) writeConflist(podCIDR string) error {
	conf, err := Conflist(podCIDR)
	if err != nil {
		return err
	}
	if bytes.Equal(conf, s.written) {
		return nil
	}
	p := filepath.Join(s.ConfDir, ConfName)
	if err := atomicfile.WriteFile(p, conf, 0o644, nil); err != nil {
		return fmt.Errorf("writing the CNI configuration %s: %w", p, err)
	}
	s.written = conf
	s.Log("wrote %s for pod CIDR %s", p, podCIDR)
	return nil
}

func (s *syncer) logNotes(notes []string) {
	now := map[string]bool{}
	for _, n := range notes {
		now[n] = true
		if !s.notes[n] {
			s.Log("%s", n)
		}
	}
	s.notes = now
}

// syncRoutes makes kiln-net's routes the wanted ones: it adds the missing,
// changes those whose node moved, and removes those no node claims now.
// It logs the changes and returns the failures.
func (s *syncer) syncRoutes(ctx context.Context, want []Route) (failed []string) {
	have, err := s.Routes.List(ctx)
	if err != nil {
		return []string{err.Error()}
	}
	cur := map[netip.Prefix]Route{}
	for _, r := range have {
		cur[r.Dst] = r
	}
	wanted := map[netip.Prefix]bool{}
	for _, r := range want {
		wanted[r.Dst] = true
		old, ok := cur[r.Dst]
		switch {
		case !ok:
			if err := s.Routes.Add(ctx, r); err != nil {
				failed = append(failed, fmt.Sprintf("route %s (node %s): %v", r, r.Node, err))
				continue
			}
			s.Log("route %s (node %s) added", r, r.Node)
		case old.Via != r.Via:
			if err := s.Routes.Replace(ctx, r); err != nil {
				failed = append(failed, fmt.Sprintf("route %s (node %s): %v", r, r.Node, err))
				continue
			}
			s.Log("route %s (node %s) changed (it went via %s)", r, r.Node, old.Via)
		}
		s.owners[r.Dst] = r.Node
	}
	for _, r := range have {
		if wanted[r.Dst] {
			continue
		}
		why := "no node has that pod CIDR now"
		if n, ok := s.owners[r.Dst]; ok {
			why = "node " + n + " is gone or has another pod CIDR"
		}
		if err := s.Routes.Delete(ctx, r); err != nil {
			failed = append(failed, fmt.Sprintf("route %s: %v", r, err))
			continue
		}
		delete(s.owners, r.Dst)
		s.Log("route %s removed (%s)", r, why)
	}
	return failed
}
