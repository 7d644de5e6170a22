package serve

import (
	"bytes"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/firstboot/source"
)

// reportLimit bounds a POST /report/ body.
const reportLimit = 4 << 10

// Handler serves every endpoint; secure says the requests arrive over the
// HTTPS listener (POST /arm/ is served only there).
func (s *Server) Handler(secure bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /boot.ipxe", s.bootScript)
	mux.HandleFunc("GET /ipxe", s.nodeScript)
	mux.HandleFunc("GET /config/{file}", s.config)
	mux.HandleFunc("GET /image/{pin}/{file}", s.image)
	mux.HandleFunc("GET /status.json", s.statusJSON)
	mux.HandleFunc("GET /{$}", s.statusPage)
	mux.HandleFunc("POST "+netboot.ReportPath+"{name}", s.report)
	mux.HandleFunc("GET "+netboot.CAPath, s.caCert)
	if secure {
		mux.HandleFunc("POST /arm/{name}", s.arm)
	} else {
		mux.HandleFunc("POST /arm/{name}", func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "arming is served only on the HTTPS listener, with a client certificate of the site's CA", http.StatusForbidden)
		})
	}
	return mux
}

// remote is the request's source address.
func remote(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

func scheme(r *http.Request) string {
	if r.TLS != nil {
		return "https"
	}
	return "http"
}

// bootScript is what iPXE chains to first: it asks again with the
// machine's MAC and UUID.
func (s *Server) bootScript(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	fmt.Fprintf(w, `#!ipxe
# kiln serve, site %s: pick this machine's node by its MAC and UUID.
chain %s://%s/ipxe?mac=${mac:hexhyp}&uuid=${uuid}
`, s.site.Cluster.Name, scheme(r), r.Host)
}

// nodeScript boots the node the query's MAC or UUID names (see choose),
// or waits.
func (s *Server) nodeScript(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	q := r.URL.Query()
	mac, uuid := q.Get("mac"), requestUUID(q.Get("uuid"))
	from, siteName := remote(r), s.site.Cluster.Name
	c := s.choose(mac, uuid)
	switch {
	case c.refused != "":
		s.mu.Lock()
		for _, n := range c.named {
			n.record(Fetch{What: "ipxe", At: s.now(), From: from, Refused: c.refused})
		}
		s.mu.Unlock()
		s.log.Printf("refused a machine at %s: %s", from, c.refused)
		fmt.Fprint(w, refusedScript(siteName, c))
		return
	case c.node == nil:
		s.log.Printf("unknown machine: no node in site %s has MAC %s%s, asked from %s; it waits", siteName, printable(mac), orUUID(uuid), from)
		fmt.Fprint(w, unknownScript(siteName, mac, uuid))
		return
	}
	n := c.node
	s.mu.Lock()
	n.record(Fetch{What: "ipxe", At: s.now(), From: from})
	s.mu.Unlock()
	if !c.byUUID {
		key, _ := normalMAC(mac)
		sent := ""
		if uuid != "" {
			sent = ", UUID " + printable(uuid)
		}
		s.log.Printf("%s: iPXE script to %s (MAC %s%s)", n.Name, from, colonMAC(key), sent)
		fmt.Fprint(w, s.script(r, n))
		return
	}
	why := "the node's network config matches only its MACs in the site"
	if n.secret {
		why += ", and a control-plane config goes only to one of them"
	}
	s.log.Printf("%s: iPXE script to %s by UUID %s: no node has its MAC %s; add the MAC to nodes[%d].macs, run kiln gen and restart kiln serve (%s)", n.Name, from, uuid, printable(mac), n.index, why)
	fmt.Fprint(w, s.script(r, n, fmt.Sprintf("no node in site %s has MAC %s: booting node %s by its UUID %s", siteName, printable(mac), n.Name, uuid)))
}

// orUUID is " or UUID <uuid>" for a UUID sent, else "".
func orUUID(uuid string) string {
	if uuid == "" {
		return ""
	}
	return " or UUID " + printable(uuid)
}

// script boots n's image with its config, printing notes on the console
// first.
func (s *Server) script(r *http.Request, n *node, notes ...string) string {
	base := scheme(r) + "://" + r.Host
	img := base + "/image/" + n.image.pin
	args := append(netboot.PXECmdline(img), n.image.args...)
	args = append(args, "ignition.config.url="+s.configURL(r, n), source.HashArg+"="+n.hash, netboot.RootfsHashArg+"="+n.image.rootfs)
	if s.tls != nil {
		args = append(args, netboot.ServeCAArg+"="+s.tls.pin)
	}
	args = append(args, netboot.ServeURLArg+"="+s.plainURL(r))
	var echo strings.Builder
	for _, l := range notes {
		echo.WriteString("echo kiln: " + l + "\n")
	}
	return fmt.Sprintf(`#!ipxe
# kiln serve, site %s: node %s (%s), image %s
%skernel %s/%s %s
initrd %s/%s
boot
`, s.site.Cluster.Name, n.Name, n.Role, n.image.pin, echo.String(), img, netboot.Kernel, strings.Join(args, " "), img, netboot.Initrd)
}

// configURL is where n's agent fetches its config: over HTTPS when the
// server has it (the agent trusts the CA by kiln.serve.ca=), else plain.
func (s *Server) configURL(r *http.Request, n *node) string {
	path := "/config/" + n.Name + ".ign"
	if s.tls == nil || s.tlsLn == nil {
		return scheme(r) + "://" + r.Host + path
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	_, port, _ := net.SplitHostPort(s.tlsLn.Addr().String())
	return (&url.URL{Scheme: "https", Host: net.JoinHostPort(host, port), Path: path}).String()
}

// plainURL is the server's plain-HTTP base URL as the request reached
// it: where the agent fetches the CA and reports its phases.
func (s *Server) plainURL(r *http.Request) string {
	if r.TLS == nil || s.ln == nil {
		return "http://" + r.Host
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(r.Host); err == nil {
		host = h
	}
	_, port, _ := net.SplitHostPort(s.ln.Addr().String())
	return (&url.URL{Scheme: "http", Host: net.JoinHostPort(host, port)}).String()
}

// caCert serves the site CA certificate the HTTPS listener chains to
// (public): the agent checks it against kiln.serve.ca= and trusts it.
func (s *Server) caCert(w http.ResponseWriter, r *http.Request) {
	if s.tls == nil {
		http.Error(w, "kiln serve: no HTTPS (the PKI has no CA key), so no CA to serve", http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/x-pem-file")
	pem.Encode(w, &pem.Block{Type: "CERTIFICATE", Bytes: s.tls.ca.Raw})
}

// config serves a node's Ignition config: a worker's always, a genesis
// or master's only while armed, to its own MAC, once.
func (s *Server) config(w http.ResponseWriter, r *http.Request) {
	file := r.PathValue("file")
	name, ok := strings.CutSuffix(file, ".ign")
	n := s.byName[name]
	if !ok || n == nil {
		http.NotFound(w, r)
		return
	}
	from := remote(r)
	s.mu.Lock()
	now := s.now()
	if n.secret {
		if why := s.mayDeliver(n, from); why != "" {
			n.record(Fetch{What: file, At: now, From: from, Refused: why})
			s.mu.Unlock()
			s.log.Printf("refused %s to %s: %s", file, from, why)
			http.Error(w, fmt.Sprintf("kiln serve: refused %s to %s: %s", file, from, why), http.StatusForbidden)
			return
		}
		n.armed, n.deliveredAt, n.deliveredTo = false, now, from
	}
	n.record(Fetch{What: file, At: now, From: from})
	s.mu.Unlock()
	if n.secret {
		s.log.Printf("delivered %s to %s; %s is disarmed", file, from, n.Name)
	} else {
		s.log.Printf("served %s to %s", file, from)
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	http.ServeContent(w, r, file, time.Time{}, bytes.NewReader(n.config))
}

// mayDeliver says why n's secret config may not go to from now, or ""
// when it may; the caller holds s.mu.
func (s *Server) mayDeliver(n *node, from string) string {
	if !n.armed {
		if !n.deliveredAt.IsZero() {
			return fmt.Sprintf("already delivered at %s to %s; re-arm %s to deliver it again", n.deliveredAt.UTC().Format(time.RFC3339), n.deliveredTo, n.Name)
		}
		return fmt.Sprintf("%s is not armed (kiln serve --arm %s, or POST /arm/%s)", n.Name, n.Name, n.Name)
	}
	ip, err := netip.ParseAddr(from)
	if err != nil {
		return "no source address"
	}
	hw, err := s.cfg.Neighbours.MAC(ip)
	if err != nil {
		return fmt.Sprintf("its MAC is unknown: %v", err)
	}
	key, _ := normalMAC(hw.String())
	for _, m := range n.macs {
		if m == key {
			return ""
		}
	}
	return fmt.Sprintf("its MAC is %s, not one of %s's", hw, n.Name)
}

// arm arms a control-plane node for one delivery; only an operator's
// client certificate of the site's CA may.
func (s *Server) arm(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	who := armer(r.TLS)
	if who == "" {
		s.log.Printf("refused to arm %s for %s: no client certificate of the site's CA in group %s", name, remote(r), strings.Join(ArmGroups, " or "))
		http.Error(w, "kiln serve: arming needs a client certificate of the site's CA in group "+strings.Join(ArmGroups, " or ")+" (admin.crt)", http.StatusForbidden)
		return
	}
	n := s.byName[name]
	switch {
	case n == nil:
		http.Error(w, fmt.Sprintf("kiln serve: no node %q in site %s", name, s.site.Cluster.Name), http.StatusNotFound)
		return
	case !n.secret:
		http.Error(w, fmt.Sprintf("kiln serve: %s is a worker: its config is served whenever asked", name), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	n.armed, n.armedAt = true, s.now()
	s.mu.Unlock()
	s.log.Printf("%s armed by %s from %s: its config goes once to its MAC", name, who, remote(r))
	fmt.Fprintf(w, "armed %s\n", name)
}

// image serves a file of a pinned image, with Range support.
func (s *Server) image(w http.ResponseWriter, r *http.Request) {
	im := s.images[r.PathValue("pin")]
	file := r.PathValue("file")
	if im == nil || im.files[file] == "" {
		http.NotFound(w, r)
		return
	}
	f, err := os.Open(im.files[file])
	if err != nil {
		s.log.Printf("image %s: %v", im.dir, err)
		http.Error(w, "kiln serve: cannot read the image file", http.StatusInternalServerError)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		http.Error(w, "kiln serve: cannot read the image file", http.StatusInternalServerError)
		return
	}
	if r.Header.Get("Range") == "" {
		s.noteImageFetch(r, file)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, file, fi.ModTime(), f)
}

// noteImageFetch records an image fetch on the node at the requester's
// address, when one node's last fetch came from it.
func (s *Server) noteImageFetch(r *http.Request, file string) {
	from := remote(r)
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, n := range s.nodes {
		if len(n.fetches) > 0 && n.fetches[len(n.fetches)-1].From == from {
			n.record(Fetch{What: file, At: s.now(), From: from})
			return
		}
	}
}

func (s *Server) statusJSON(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(s.Status())
}

func (s *Server) statusPage(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := statusPage.Execute(w, s.Status()); err != nil {
		s.log.Printf("status page: %v", err)
	}
}

// report records the first-boot phase a node says it reached.
func (s *Server) report(w http.ResponseWriter, r *http.Request) {
	n := s.byName[r.PathValue("name")]
	if n == nil {
		http.NotFound(w, r)
		return
	}
	var rep Report
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, reportLimit))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rep); err != nil || rep.Phase == "" || len(rep.Phase) > 200 || len(rep.At) > 64 {
		http.Error(w, `kiln serve: want {"phase": "...", "at": "..."} (at most 4 KiB)`, http.StatusBadRequest)
		return
	}
	rep.From = remote(r)
	s.mu.Lock()
	rep.Got = s.now()
	n.report = &rep
	s.mu.Unlock()
	s.log.Printf("%s reports phase %q at %s from %s", n.Name, rep.Phase, rep.At, rep.From)
	w.WriteHeader(http.StatusNoContent)
}
