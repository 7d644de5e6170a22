package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/netns"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// serveBoot is a PXE boot through kiln serve as an operator runs it: a
// segment (a bridge in a network namespace) with dnsmasq as its DHCP
// server pointing iPXE at kiln serve, which picks the node by its MAC,
// serves the image, and the config over HTTPS from the site's CA, pinned
// on the command line. The node is w1 of a two-node site whose configs
// are the bench config. Its floor is the plain PXE boot (QEMU's TFTP
// and a plain file server), agent masked.
func serveBoot(o options, dir string, plain bool) (vm.Config, func(), error) {
	if plain {
		return pxeBoot(vm.BIOS)(o, dir, true)
	}
	tp := cluster.TwoNodes()
	w1 := tp.Machines[1]
	ign, err := json.Marshal(benchConfig)
	if err != nil {
		return vm.Config{}, nil, err
	}
	siteFile, siteDir := filepath.Join(dir, "site.yaml"), filepath.Join(dir, "site")
	if err := os.MkdirAll(filepath.Join(siteDir, nodeconfig.NodesDir), 0o755); err != nil {
		return vm.Config{}, nil, err
	}
	if err := os.WriteFile(siteFile, []byte(tp.Site()), 0o644); err != nil {
		return vm.Config{}, nil, err
	}
	for _, m := range tp.Machines {
		if err := os.WriteFile(filepath.Join(siteDir, nodeconfig.NodesDir, m.Name+".ign"), ign, 0o600); err != nil {
			return vm.Config{}, nil, err
		}
	}
	pki := filepath.Join(dir, "pki")
	if out, err := exec.Command(abs(o.kiln), "gen", "-f", siteFile, "--pki", pki, "-o", filepath.Join(dir, "gen")).CombinedOutput(); err != nil {
		return vm.Config{}, nil, fmt.Errorf("kiln gen for the serve boot's PKI: %v: %s", err, out)
	}
	seg, err := netns.New(fmt.Sprintf("bs%d", os.Getpid()%100000), cluster.BridgeCIDR)
	if err != nil {
		return vm.Config{}, nil, err
	}
	var stops []func()
	cleanup := func() {
		for i := len(stops) - 1; i >= 0; i-- {
			stops[i]()
		}
		seg.Close()
	}
	fail := func(err error) (vm.Config, func(), error) { cleanup(); return vm.Config{}, nil, err }
	if err := seg.AddTap("tap-w1"); err != nil {
		return fail(err)
	}
	base := "http://" + cluster.Gateway + ":8080"
	log, err := os.Create(filepath.Join(dir, "kiln-serve.log"))
	if err != nil {
		return fail(err)
	}
	srv := seg.Command(context.Background(), abs(o.kiln), "serve", "-f", siteFile, "--site", siteDir, "--image", abs(o.out), "--pki", pki,
		"--listen", cluster.Gateway+":8080", "--tls-listen", cluster.Gateway+":8443", "--tls-host", cluster.Gateway)
	srv.Stdout, srv.Stderr = log, log
	if err := srv.Start(); err != nil {
		log.Close()
		return fail(fmt.Errorf("starting kiln serve: %w", err))
	}
	stops = append(stops, func() { srv.Process.Kill(); srv.Wait(); log.Close() })
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: seg.DialContext}}
	err = retry.Wait(context.Background(), "kiln serve answering on "+base, time.Minute, nil, func(ctx context.Context) error {
		resp, err := client.Get(base + "/status.json")
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
	if err != nil {
		return fail(fmt.Errorf("%w (its log: %s)", err, log.Name()))
	}
	dhcp, err := seg.ServeDHCP(filepath.Join(dir, "dhcp"), base+"/boot.ipxe", map[string]netip.Addr{w1.MAC: netip.MustParseAddr(w1.IP())})
	if err != nil {
		return fail(err)
	}
	stops = append(stops, func() { dhcp.Stop() })
	return vm.Config{Firmware: vm.BIOS, Boot: vm.BootPXE, Netns: seg.Name, Tap: "tap-w1", MAC: w1.MAC, MemoryMiB: 2048}, cleanup, nil
}
