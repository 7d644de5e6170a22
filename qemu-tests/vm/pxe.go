package vm

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
)

// PXEServer serves a kiln PXE set for one VM: the set and extra files over
// HTTP on the host's loopback (10.0.2.2 inside QEMU's user network), and a
// TFTP directory whose boot file sets base-url and kiln-args, then chains
// the image's own boot.ipxe.
type PXEServer struct {
	TFTPDir  string
	BootFile string
	Port     int
	srv      *http.Server
}

// GuestURL is the address of path on this server as the guest sees it.
func (p *PXEServer) GuestURL(path string) string {
	return fmt.Sprintf("http://10.0.2.2:%d/%s", p.Port, path)
}

// ServePXE serves pxeDir under /pxe/ and extra files (path -> content),
// writing the TFTP directory under dir. kernelArgs(p) gives the kernel
// arguments the wrapper passes in kiln-args; it may use p.GuestURL.
func ServePXE(pxeDir, dir string, extra map[string][]byte, kernelArgs func(*PXEServer) string) (*PXEServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &PXEServer{TFTPDir: filepath.Join(dir, "tftp"), BootFile: "kiln.ipxe", Port: ln.Addr().(*net.TCPAddr).Port}
	mux := http.NewServeMux()
	mux.Handle("/pxe/", http.StripPrefix("/pxe/", http.FileServer(http.Dir(pxeDir))))
	for path, content := range extra {
		mux.HandleFunc("/"+path, func(w http.ResponseWriter, _ *http.Request) { w.Write(content) })
	}
	p.srv = &http.Server{Handler: mux}
	go p.srv.Serve(ln)
	if err := os.MkdirAll(p.TFTPDir, 0o755); err != nil {
		p.Close()
		return nil, err
	}
	script, err := os.ReadFile(filepath.Join(pxeDir, "boot.ipxe"))
	if err != nil {
		p.Close()
		return nil, err
	}
	wrapper := fmt.Sprintf("#!ipxe\nset base-url %s\nset kiln-args %s\nchain boot.ipxe\n", p.GuestURL("pxe"), kernelArgs(p))
	for name, data := range map[string][]byte{"boot.ipxe": script, p.BootFile: []byte(wrapper)} {
		if err := os.WriteFile(filepath.Join(p.TFTPDir, name), data, 0o644); err != nil {
			p.Close()
			return nil, err
		}
	}
	return p, nil
}

// Close stops the HTTP server.
func (p *PXEServer) Close() { p.srv.Close() }
