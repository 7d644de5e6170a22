package upgrade

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/internal/retry"
)

// Artifacts serves a build's three PXE artifacts (vmlinuz, initrd.img,
// rootfs.squashfs) over plain HTTP for the length of a rollout: the ask
// carries each one's sha256 and a node stages nothing that differs, so
// the transport needs no trust of its own. Nothing else is served.
type Artifacts struct {
	URL string // the ask's url: http://addr
	srv *http.Server
}

// ServeArtifacts listens on addr (host:port; the nodes must reach it)
// and serves build's artifacts until Close.
func ServeArtifacts(build *imagemanifest.Build, addr string, log retry.Logf) (*Artifacts, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("serving the build's artifacts on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	for _, name := range []string{netboot.Kernel, netboot.Initrd, netboot.Rootfs} {
		file := filepath.Join(build.Dir, netboot.PXEDir, name)
		mux.HandleFunc("GET /"+name, func(w http.ResponseWriter, r *http.Request) {
			start := time.Now()
			http.ServeFile(w, r, file)
			log("served %s to %s in %s", name, r.RemoteAddr, time.Since(start).Round(time.Millisecond))
		})
	}
	a := &Artifacts{URL: "http://" + ln.Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}}
	go func() {
		if err := a.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log("the artifact server on %s stopped: %v", addr, err)
		}
	}()
	return a, nil
}

// Close stops serving, letting transfers in flight end for a while.
func (a *Artifacts) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return a.srv.Shutdown(ctx)
}
