package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/ops/serve"
)

func newServeCmd() *cobra.Command {
	var (
		sitePath, siteDir, imageDir, listen, tlsListen, pkiDir string
		arm, pins, tlsHosts                                    []string
	)
	example := serve.DnsmasqLine(&site.Site{Nodes: []site.Node{
		{MACs: []string{"52:54:00:77:00:11"}}, {MACs: []string{"52:54:00:77:00:12"}}}},
		"192.0.2.10:8080", "192.0.2.0", "/usr/lib/ipxe")
	cmd := &cobra.Command{
		Use:   "serve -f SITE --site DIR --image DIR",
		Short: "Network-boot the site's machines: iPXE by MAC or UUID, images, configs (once for masters)",
		Long: `Serve everything a site's machines need to boot from the network, until
interrupted: an iPXE script that picks the node by the machine's MAC (or by its
SMBIOS UUID, where the site names one and no node has the MAC), the node image
kiln build wrote (kernel, initrd, root squashfs; Range requests), and each
node's Ignition config kiln gen wrote.

  GET  /boot.ipxe             chains to /ipxe?mac=${mac:hexhyp}&uuid=${uuid}
  GET  /ipxe?mac=...&uuid=... the node's script: its image, the builder's kernel
                              arguments, ignition.config.url=, kiln.config.hash=,
                              ` + netboot.RootfsHashArg + `= and (with HTTPS) ` + netboot.ServeCAArg + `=;
                              a machine the site does not know, or whose MAC and
                              UUID the site gives different nodes, gets a script
                              that says so and waits
  GET  /image/<pin>/<file>    vmlinuz, initrd.img, rootfs.squashfs
  GET  /config/<name>.ign     a worker's always; a genesis or master's (it holds
                              the CA keys) only while armed, only to a request
                              whose source IP has one of the node's MACs in this
                              machine's ARP table, once per arming (then 403)
  POST /arm/<name>            HTTPS only, with the admin client certificate
  POST /report/<name>         {"phase": "...", "at": "..."} from a node's agent
  GET  /status.json, GET /    every node: armed, fetches, reported phase

Arm a control-plane node at start (--arm m1,m2) or later:
  curl --cacert pki/ca.crt --cert pki/admin.crt --key pki/admin.key \
    -X POST https://192.0.2.10:8443/arm/m1

HTTPS serves the same endpoints with a certificate issued at start (never
written) from the site's CA in --pki; without the CA key only plain HTTP is
served. The site, every config and every image (against its node.manifest.json)
are checked at start: a problem refuses to start (exit status 2), naming the
file. A node may boot another image: --pin w1=out-v2/.

kiln serve answers no DHCP. Put dnsmasq in front, as a proxy DHCP server beside
the network's own, answering PXE for the site's MACs only: firmware PXE loads
iPXE over TFTP (undionly.kpxe, ipxe.efi from the ipxe package), iPXE chains to
kiln serve. kiln serve prints this line for the site at start; for two nodes:

  ` + example + `

See docs/serve.md.`,
		Example: `  kiln serve -f site.yaml --site out/site/ --image out/ --pki pki/ --arm m1,m2`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := loadSite(sitePath)
			if err != nil {
				return err
			}
			pinned := map[string]string{}
			for _, p := range pins {
				name, dir, ok := strings.Cut(p, "=")
				if !ok || name == "" || dir == "" {
					return usageError{fmt.Errorf("--pin %q: want NODE=IMAGE-DIR, such as w1=out-v2/", p)}
				}
				pinned[name] = dir
			}
			if pkiDir != "" {
				if fi, err := os.Stat(pkiDir); err != nil || !fi.IsDir() {
					return usageError{fmt.Errorf("--pki %s: not a directory: give the PKI directory kiln gen keeps for this site", pkiDir)}
				}
			}
			w := cmd.OutOrStdout()
			srv, err := serve.New(serve.Config{Site: s, SiteDir: siteDir, Image: imageDir, Pins: pinned, Arm: arm,
				PKI: pkiDir, Listen: listen, TLSListen: tlsListen, TLSHosts: tlsHosts, Log: cmd.ErrOrStderr()})
			if err != nil {
				return serveError(err)
			}
			if err := srv.Listen(); err != nil {
				return serveError(err)
			}
			fmt.Fprintf(w, "kiln serve: site %s, %d nodes, on http://%s\n", s.Cluster.Name, len(s.Nodes), srv.Addr())
			if ok, why := srv.TLS(); ok {
				fmt.Fprintf(w, "kiln serve: HTTPS on %s, serving certificate from %s/ca.crt, %s=%s\n", srv.TLSAddr(), pkiDir, netboot.ServeCAArg, srv.CAPin())
			} else {
				fmt.Fprintf(w, "kiln serve: plain HTTP only (%s): configs travel in the clear, pinned by kiln.config.hash=\n", why)
			}
			if a := srv.Armed(); len(a) > 0 {
				fmt.Fprintf(w, "kiln serve: armed: %s (each config goes once, to its node's MAC)\n", strings.Join(a, ", "))
			}
			fmt.Fprintf(w, "kiln serve: put dnsmasq in front (replace the subnet and the address by yours):\n  %s\n",
				serve.DnsmasqLine(s, advertised(srv.Addr()), "192.0.2.0", "/usr/lib/ipxe"))
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return srv.Serve(ctx)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&sitePath, "file", "f", "", "the site file (required)")
	f.StringVar(&siteDir, "site", "out/site", "kiln gen's output directory: the node configs")
	f.StringVar(&imageDir, "image", "out", "kiln build's output directory: the default image")
	f.StringVar(&listen, "listen", ":8080", "plain HTTP address")
	f.StringVar(&tlsListen, "tls-listen", ":8443", "HTTPS address (empty: none)")
	f.StringSliceVar(&arm, "arm", nil, "genesis or master nodes whose config may go out once, from the start")
	f.StringVar(&pkiDir, "pki", "pki", "the site's PKI directory: its CA issues the serving certificate (empty: plain HTTP only)")
	f.StringArrayVar(&pins, "pin", nil, "NODE=IMAGE-DIR: boot NODE from another kiln build (repeatable)")
	f.StringSliceVar(&tlsHosts, "tls-host", nil, "names and addresses in the serving certificate (default: this machine's name and addresses)")
	cmd.MarkFlagRequired("file")
	return cmd
}

// serveError makes kiln serve's refusal of its input a usage error.
func serveError(err error) error {
	var r *serve.Refusal
	if errors.As(err, &r) {
		return usageError{err}
	}
	return err
}

// advertised is the listener's address, or a placeholder where it
// listens on every address.
func advertised(a net.Addr) string {
	host, port, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		host = "SERVER-IP"
	}
	return net.JoinHostPort(host, port)
}
