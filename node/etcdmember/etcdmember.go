// Package etcdmember owns the record of how this master's etcd member
// joined its cluster, kept on the state partition: the role writes it
// when the member is created (genesis: a new cluster of one; master: the
// member list its learner add returned), and the role and the etcd
// anchor render the etcd static pod from it. Once the cluster is
// bootstrapped the record says "existing", so nothing renders etcd with
// initial-cluster-state=new again: with a second master that would fork
// the cluster.
package etcdmember

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kiln-project/kiln/internal/atomicfile"
)

// Path is where the record lives on the node.
const Path = "/var/lib/kiln/etcd/membership.json"

// Cluster states, as etcd's --initial-cluster-state takes them.
const (
	StateNew      = "new"
	StateExisting = "existing"
)

// Peer is one member as the initial cluster names it.
type Peer struct {
	Name    string `json:"name"`
	PeerURL string `json:"peerURL"`
}

// Membership is the record.
type Membership struct {
	Name    string `json:"name"`
	PeerURL string `json:"peerURL"`
	// ID is the member's etcd ID in hex, once known (a learner add
	// returns it; a genesis member learns it from its own etcd).
	ID    string `json:"id,omitempty"`
	State string `json:"state"`
	Peers []Peer `json:"peers"`
}

// PeerURL is the peer URL of a member at address.
func PeerURL(address string) string { return "https://" + address + ":2380" }

// ClientURL is the client URL of a member at address.
func ClientURL(address string) string { return "https://" + address + ":2379" }

// Genesis is the record of a new cluster of one member.
func Genesis(name, address string) Membership {
	u := PeerURL(address)
	return Membership{Name: name, PeerURL: u, State: StateNew, Peers: []Peer{{name, u}}}
}

// InitialCluster renders the peers as etcd's --initial-cluster value,
// sorted so the same membership always gives the same manifest.
func (m Membership) InitialCluster() string {
	parts := make([]string, 0, len(m.Peers))
	for _, p := range m.Peers {
		parts = append(parts, p.Name+"="+p.PeerURL)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

// ErrNone is returned by Read when the node has no record: its member
// was never created.
var ErrNone = errors.New("no etcd membership recorded")

// Read loads the record under root.
func Read(root string) (Membership, error) {
	p := filepath.Join(root, Path)
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return Membership{}, fmt.Errorf("%s: %w", p, ErrNone)
	}
	if err != nil {
		return Membership{}, err
	}
	var m Membership
	if err := json.Unmarshal(data, &m); err != nil {
		return Membership{}, fmt.Errorf("%s: %w", p, err)
	}
	if m.Name == "" || len(m.Peers) == 0 || (m.State != StateNew && m.State != StateExisting) {
		return Membership{}, fmt.Errorf("%s: incomplete record (name %q, %d peers, state %q)", p, m.Name, len(m.Peers), m.State)
	}
	return m, nil
}

// Write stores the record under root (fsync, rename).
func Write(root string, m Membership) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(root, Path), append(data, '\n'), 0o600, nil)
}
