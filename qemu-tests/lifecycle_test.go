package qemutests

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// A master whose config comes from another kiln gen run of the same site
// (the same names and addresses, another PKI) is refused: the site's
// etcd (real, on the host, reached as 10.0.2.2) serves a certificate its
// CA did not sign. Its console says why at once, and etcd has no new
// member.
func TestForeignMasterIsRefused(t *testing.T) {
	t.Parallel() // a one-vCPU boot: two run side by side (make qemu-test -parallel 2)
	out := outDir(t)
	dir := logDir(t, out)
	ours := configs(t, cluster.HostGenesisSite())
	foreign := configs(t, cluster.HostGenesisSite()) // another run of kiln gen: another PKI
	hostEtcd(t, dir, "h1", ours["h1"])
	disk := filepath.Join(dir, "state.qcow2")
	qemuImg(t, "create", "-q", "-f", "qcow2", disk, "2G")
	v := startVM(t, vm.Config{CPUs: 1, Name: "foreign", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, MAC: cluster.GenesisMAC,
		ISO: filepath.Join(out, "node.iso"), Disks: []vm.Disk{{Path: disk, Format: "qcow2"}}, Ignition: foreign["m3"]})
	line := waitLine(t, v, `kiln-firstboot: (done role=|error: role|etcd: added learner)`)
	if !strings.Contains(line, "error: role master: master/wait-cluster: ") || !strings.Contains(line, "not from this site's etcd CA") {
		t.Fatalf("got %q, want the master refused on the cluster's certificate", line)
	}
	members, err := cluster.EtcdMembers(context.Background(), ours["h1"], "https://127.0.0.1:2379", (&net.Dialer{}).DialContext)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 || members[0].Name != "h1" {
		t.Errorf("etcd members after the foreign master's boot: %+v, want h1 alone", members)
	}
}
