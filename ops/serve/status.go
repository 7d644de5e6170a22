package serve

import (
	_ "embed"
	"html/template"
	"time"
)

// Fetch is one thing a node fetched.
type Fetch struct {
	What string    `json:"what"`
	At   time.Time `json:"at"`
	From string    `json:"from"`
	// Refused says why it was not served; empty when it was.
	Refused string `json:"refused,omitempty"`
}

// Report is the last first-boot phase a node reported.
type Report struct {
	Phase string    `json:"phase"`
	At    string    `json:"at"`
	From  string    `json:"from"`
	Got   time.Time `json:"received"`
}

// NodeStatus is one node's line of /status.json.
type NodeStatus struct {
	Name        string     `json:"name"`
	Role        string     `json:"role"`
	MACs        []string   `json:"macs"`
	UUID        string     `json:"uuid,omitempty"`
	Image       string     `json:"image"`
	Secret      bool       `json:"secret"`
	Armed       bool       `json:"armed"`
	ArmedAt     *time.Time `json:"armedAt,omitempty"`
	DeliveredAt *time.Time `json:"deliveredAt,omitempty"`
	DeliveredTo string     `json:"deliveredTo,omitempty"`
	Fetches     []Fetch    `json:"fetches"`
	Phase       *Report    `json:"phase,omitempty"`
}

// Status is the document /status.json serves.
type Status struct {
	Site  string       `json:"site"`
	TLS   bool         `json:"tls"`
	CA    string       `json:"caPin,omitempty"`
	Nodes []NodeStatus `json:"nodes"`
}

// keepFetches is how many fetches a node's status keeps, newest last.
const keepFetches = 20

// Status is a copy of every node's state now.
func (s *Server) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Site: s.site.Cluster.Name, TLS: s.tls != nil, CA: s.CAPin(), Nodes: []NodeStatus{}}
	for _, n := range s.nodes {
		ns := NodeStatus{Name: n.Name, Role: n.Role, UUID: n.UUID, Image: n.image.dir, Secret: n.secret, Armed: n.armed,
			DeliveredTo: n.deliveredTo, Fetches: append([]Fetch{}, n.fetches...)}
		for _, m := range n.macs {
			ns.MACs = append(ns.MACs, colonMAC(m))
		}
		if !n.armedAt.IsZero() {
			t := n.armedAt
			ns.ArmedAt = &t
		}
		if !n.deliveredAt.IsZero() {
			t := n.deliveredAt
			ns.DeliveredAt = &t
		}
		if n.report != nil {
			r := *n.report
			ns.Phase = &r
		}
		st.Nodes = append(st.Nodes, ns)
	}
	return st
}

// record adds a fetch to n's status; the caller holds s.mu.
func (n *node) record(f Fetch) {
	n.fetches = append(n.fetches, f)
	if len(n.fetches) > keepFetches {
		n.fetches = append([]Fetch{}, n.fetches[len(n.fetches)-keepFetches:]...)
	}
}

//go:embed status.html
var statusHTML string

var statusPage = template.Must(template.New("status").Funcs(template.FuncMap{
	"when": func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05Z") },
	"last": func(fs []Fetch) *Fetch {
		if len(fs) == 0 {
			return nil
		}
		return &fs[len(fs)-1]
	},
}).Parse(statusHTML))
