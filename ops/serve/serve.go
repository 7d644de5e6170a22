// Package serve is kiln serve: the network boot server of one site. It
// owns the HTTP endpoints a machine boots through (the iPXE scripts that
// pick a node by its MAC, or its SMBIOS UUID where the site names one, the
// node images, the per-node Ignition configs),
// the rule that a genesis or master config (it holds CA keys) leaves only
// once per arming and only to the node's own MAC, the HTTPS listener and
// its serving certificate issued from the site's CA, the status of every
// node (fetches and reported first-boot phases, as JSON and as a page),
// and the checks that refuse to start on a bad site, image or config.
// docs/serve.md describes it.
package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/kiln-project/kiln/contract/smbios"
	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/ignition"
)

// Config is what kiln serve is started with.
type Config struct {
	Site    *site.Site
	SiteDir string // kiln gen's output: SiteDir/nodes/<name>.ign
	// Image is the default image directory (kiln build's output); Pins
	// maps a node's name to another.
	Image string
	Pins  map[string]string
	// Arm lists the control-plane nodes armed at start.
	Arm []string
	// PKI is the site's PKI directory; without its CA key (or with PKI
	// empty) only plain HTTP is served.
	PKI string
	// Listen and TLSListen are the listeners' addresses; TLSListen empty:
	// no HTTPS.
	Listen, TLSListen string
	// TLSHosts are the serving certificate's names and addresses; nil:
	// this machine's name, its interfaces' addresses and localhost.
	TLSHosts []string
	// Neighbours finds a requester's MAC; nil: the kernel's ARP table.
	Neighbours Neighbours
	// Log gets a line per fetch, refusal and report; nil: standard error.
	Log io.Writer
	// Now is the clock; nil: time.Now.
	Now func() time.Time
}

// Refusal is a bad input found at start: nothing is served. File is the
// file or flag at fault, Field the field within it, if any.
type Refusal struct {
	File, Field, What string
}

func (r *Refusal) Error() string {
	if r.Field == "" {
		return r.File + ": " + r.What
	}
	return r.File + ": " + r.Field + ": " + r.What
}

func refuse(file, field, format string, a ...any) *Refusal {
	return &Refusal{File: file, Field: field, What: fmt.Sprintf(format, a...)}
}

// Server is one site's boot server.
type Server struct {
	cfg    Config
	site   *site.Site
	log    *log.Logger
	nodes  []*node          // in site order
	byName map[string]*node //
	byMAC  map[string]*node // by normalised MAC
	byUUID map[string]*node // by lower-case UUID, for the nodes that name one
	images map[string]*image
	tls    *serving // nil: plain HTTP only
	now    func() time.Time

	mu sync.Mutex // guards every node's mutable state

	ln, tlsLn net.Listener
}

// node is a site node with what the server knows of it.
type node struct {
	site.Node
	index  int      // in the site's nodes
	macs   []string // normalised
	config []byte
	hash   string // sha512-<hex> of config
	image  *image
	secret bool // the config holds CA keys: genesis or master

	// under Server.mu
	armed       bool
	armedAt     time.Time
	deliveredAt time.Time
	deliveredTo string
	fetches     []Fetch
	report      *Report
}

// New checks everything kiln serve needs before it serves anything: the
// site's MACs, every node's config, every image against its manifest,
// the arm list and the PKI. A bad input is a *Refusal naming its file.
func New(cfg Config) (*Server, error) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Neighbours == nil {
		cfg.Neighbours = ARPTable{Path: "/proc/net/arp"}
	}
	s := &Server{cfg: cfg, site: cfg.Site, log: log.New(cfg.Log, "kiln serve: ", log.LstdFlags),
		byName: map[string]*node{}, byMAC: map[string]*node{}, byUUID: map[string]*node{}, images: map[string]*image{}, now: cfg.Now}
	if err := s.loadNodes(); err != nil {
		return nil, err
	}
	if err := s.loadImages(); err != nil {
		return nil, err
	}
	for _, name := range cfg.Arm {
		n, ok := s.byName[name]
		switch {
		case !ok:
			return nil, refuse("--arm", name, "no node %q in %s", name, s.site.File)
		case !n.secret:
			return nil, refuse("--arm", name, "%s is a %s: a worker's config is served whenever asked, there is nothing to arm", name, n.Role)
		}
		n.armed, n.armedAt = true, s.now()
	}
	if cfg.PKI != "" && cfg.TLSListen != "" {
		sv, err := newServing(cfg.PKI, s.site, cfg.TLSHosts, s.now())
		if err != nil {
			return nil, err
		}
		s.tls = sv
	}
	return s, nil
}

// loadNodes indexes the site's nodes by MAC and UUID and reads every
// config.
func (s *Server) loadNodes() error {
	file := s.site.File
	for i, sn := range s.site.Nodes {
		n := &node{Node: sn, index: i, secret: sn.Role != site.RoleWorker}
		field := fmt.Sprintf("nodes[%d].macs", i)
		if len(sn.MACs) == 0 {
			return refuse(file, field, "node %s has no MAC: kiln serve picks a machine's node by its MAC first, and gives a master's config only to one of its MACs", sn.Name)
		}
		for j, m := range sn.MACs {
			key, ok := normalMAC(m)
			if !ok {
				return refuse(file, fmt.Sprintf("%s[%d]", field, j), "not a MAC address: %q", m)
			}
			if prev, dup := s.byMAC[key]; dup {
				return refuse(file, fmt.Sprintf("%s[%d]", field, j), "MAC %s is also node %s's: a machine must pick one node", colonMAC(key), prev.Name)
			}
			s.byMAC[key] = n
			n.macs = append(n.macs, key)
		}
		if sn.UUID != "" {
			if err := s.indexUUID(n); err != nil {
				return err
			}
		}
		path := configPath(s.cfg.SiteDir, sn.Name)
		data, err := os.ReadFile(path)
		if err != nil {
			return refuse(path, "", "the config of node %s (nodes[%d]) is unreadable: %v (run kiln gen -f %s -o %s)", sn.Name, i, unwrapPath(err), file, s.cfg.SiteDir)
		}
		if _, _, err := ignition.Parse(data); err != nil {
			return refuse(path, "", "not a config kiln would apply: %v", err)
		}
		n.config, n.hash = data, ignition.Hash(data)
		s.nodes = append(s.nodes, n)
		s.byName[sn.Name] = n
	}
	return nil
}

// indexUUID checks n's UUID again, as loadNodes does its MACs, since a
// Config's site need not come from Load, and indexes n by it.
func (s *Server) indexUUID(n *node) error {
	field := fmt.Sprintf("nodes[%d].uuid", n.index)
	u, ok := smbios.ParseUUID(n.UUID)
	switch {
	case !ok:
		return refuse(s.site.File, field, "not a UUID: %q", n.UUID)
	case smbios.Placeholder(u):
		return refuse(s.site.File, field, "%s is a placeholder firmware reports when a machine has no UUID of its own: it names no one machine", u)
	}
	if prev, dup := s.byUUID[u]; dup {
		return refuse(s.site.File, field, "UUID %s is also node %s's: a machine must pick one node", u, prev.Name)
	}
	s.byUUID[u] = n
	n.UUID = u
	return nil
}

func configPath(dir, name string) string {
	return filepath.Join(dir, nodeconfig.NodesDir, name+".ign")
}

func unwrapPath(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// Listen opens both listeners; an address in use is a *Refusal naming
// its flag.
func (s *Server) Listen() error {
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return refuse("--listen", s.cfg.Listen, "%v", unwrapOp(err))
	}
	s.ln = ln
	if s.tls != nil {
		tl, err := net.Listen("tcp", s.cfg.TLSListen)
		if err != nil {
			ln.Close()
			return refuse("--tls-listen", s.cfg.TLSListen, "%v", unwrapOp(err))
		}
		s.tlsLn = tl
	}
	return nil
}

func unwrapOp(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Err
	}
	return err
}

// Addr is the plain HTTP listener's address (after Listen).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// TLSAddr is the HTTPS listener's address, nil without one.
func (s *Server) TLSAddr() net.Addr {
	if s.tlsLn == nil {
		return nil
	}
	return s.tlsLn.Addr()
}

// TLS reports whether HTTPS is served, and why not.
func (s *Server) TLS() (bool, string) {
	switch {
	case s.cfg.TLSListen == "":
		return false, "no --tls-listen"
	case s.cfg.PKI == "":
		return false, "no --pki"
	case s.tls == nil:
		return false, "no CA key"
	}
	return true, ""
}

// CAPin is the serving CA's pin (kiln.serve.ca=), empty without HTTPS.
func (s *Server) CAPin() string {
	if s.tls == nil {
		return ""
	}
	return s.tls.pin
}

// Serve serves on the listeners Listen opened until ctx is done, then
// shuts down, giving requests in flight five seconds.
func (s *Server) Serve(ctx context.Context) error {
	servers := []*http.Server{{Handler: s.Handler(false), ReadHeaderTimeout: 10 * time.Second, ErrorLog: s.log}}
	lns := []net.Listener{s.ln}
	if s.tlsLn != nil {
		servers = append(servers, &http.Server{Handler: s.Handler(true), ReadHeaderTimeout: 10 * time.Second, ErrorLog: s.log,
			TLSConfig: s.tls.config()})
		lns = append(lns, tls.NewListener(s.tlsLn, s.tls.config()))
	}
	errc := make(chan error, len(servers))
	for i, hs := range servers {
		go func() { errc <- hs.Serve(lns[i]) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, hs := range servers {
		hs.Shutdown(sctx)
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Nodes lists the site's node names in site order.
func (s *Server) Nodes() []string {
	var out []string
	for _, n := range s.nodes {
		out = append(out, n.Name)
	}
	return out
}

// Armed lists the nodes armed now.
func (s *Server) Armed() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range s.nodes {
		if n.armed {
			out = append(out, n.Name)
		}
	}
	return slices.Clip(out)
}
