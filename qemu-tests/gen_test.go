package qemutests

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

var genSite = cluster.SiteHead(`  sshAuthorizedKeys: ["ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFm2Vh0bT0kLnaaQ4s6Ukq2nNQ4Xg7Jt0pH8YFZ9qY0c ops@test"]
`) + `  - {name: g1, role: genesis, macs: ["52:54:00:00:00:01"], installDisk: /dev/vda, network: {address: 10.0.2.50/24, gateway: 10.0.2.2}}
  - {name: w1, role: worker, macs: ["52:54:00:12:34:56"], network: {dhcp: true}}
`

// genProbe reports what a kiln gen config put on the node.
const genProbe = `echo "probe: host=$(hostname)` +
	` role=$(grep -o "role.: .[a-z]*" /etc/kiln/node.json | cut -c9-)` +
	` keymode=$(stat -c %%a /etc/kiln/pki/kubelet-client.key)` +
	` kubeconfig=$(stat -c %%a /etc/kiln/kubeconfig/kubelet.conf)` +
	` cakey=$(test -e /etc/kiln/pki/ca.key && echo present || echo absent)` +
	` zone=$(grep -c 10.0.2.50 /etc/kiln/discovery.zone)` +
	` keys=$(wc -l < /root/.ssh/authorized_keys)" > /dev/ttyS0`

// Scenario 5: a worker config from kiln gen, booted from the ISO under
// SeaBIOS, is applied by the agent as it is.
func TestGeneratedWorkerConfigApplies(t *testing.T) {
	parallelBoot(t)
	out := outDir(t)
	dir := logDir(t, out)
	s, err := site.Parse("qemu-site.yaml", []byte(genSite))
	if err != nil {
		t.Fatal(err)
	}
	st := pki.Store{Dir: filepath.Join(t.TempDir(), "pki")}
	if _, err := st.Ensure(s); err != nil {
		t.Fatal(err)
	}
	data, err := nodeconfig.Render(s, st, s.Nodes[1])
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	unit := "[Unit]\nAfter=kiln-firstboot.service\n[Service]\nType=oneshot\nExecStart=/bin/sh -c '" + genProbe + "'\n[Install]\nWantedBy=multi-user.target\n"
	cfg["systemd"] = map[string]any{"units": []any{map[string]any{"name": "kiln-test-probe.service", "enabled": true, "contents": unit}}}

	v := startVM(t, vm.Config{CPUs: 1, Name: "gen-worker", Dir: dir, Firmware: vm.BIOS, Boot: vm.BootISO, Direct: true,
		ISO: filepath.Join(out, "node.iso"), Ignition: mustJSON(t, cfg)})
	waitLine(t, v, doneLine+"fw_cfg")
	expectFields(t, waitLine(t, v, `probe: host=`), map[string]string{
		"host": "w1", "role": "worker", "keymode": "600", "kubeconfig": "600", "cakey": "absent", "zone": "1", "keys": "1",
	})
}
