package qemutests

import (
	"strings"
	"testing"

	"github.com/kiln-project/kiln/firstboot/ignite/conformance"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// The test configs. The probe unit runs after the agent and prints, on the
// serial console, what a test needs to know about the node; the once unit
// may run only on the boot that created the state partition.

// probeScript reports, then leaves traces for the next boot: a marker on
// the persistent /var/lib/kiln and a drift file on the immutable /etc,
// synced, and says so, so a power cut after that line cannot lose them.
const probeScript = `echo "probe: boot=$(cat /proc/sys/kernel/random/boot_id)` +
	` marker=$(test -e /var/lib/kiln/marker && echo present || echo absent)` +
	` drift=$(test -e /etc/drift && echo present || echo absent)` +
	` once=$(cat /var/lib/kiln/once-count 2>/dev/null | wc -l)` +
	` user=$(id -un ops 2>/dev/null || echo none)` +
	` keys=$(cat /home/ops/.ssh/authorized_keys 2>/dev/null | wc -l)` +
	` hello=$(cat /etc/kiln-test/hello 2>/dev/null || echo none)` +
	` host=$(hostname)` +
	` state=$(findmnt -no SOURCE /var/lib/kiln-state 2>/dev/null || echo ram)" > /dev/ttyS0; ` +
	`touch /var/lib/kiln/marker /etc/drift; sync; echo "probe-synced" > /dev/ttyS0`

const probeUnit = "[Unit]\nDescription=kiln test probe\nAfter=kiln-firstboot.service kiln-test-once.service\n\n" +
	"[Service]\nType=oneshot\nExecStart=/bin/sh -c '" + probeScript + "'\n\n[Install]\nWantedBy=multi-user.target\n"

const onceUnit = "[Unit]\nDescription=kiln test one-time step\nConditionPathExists=/run/kiln/first-boot\nAfter=kiln-firstboot.service\n\n" +
	"[Service]\nType=oneshot\nExecStart=/bin/sh -c 'echo once >> /var/lib/kiln/once-count'\n\n[Install]\nWantedBy=multi-user.target\n"

// nodeConfig is a spec 3.4 config exercising files, a user with a key,
// the hostname and units; stateDisk names a disk for the state partition.
func nodeConfig(stateDisk string) map[string]any {
	cfg := map[string]any{
		"ignition": map[string]any{"version": "3.4.0"},
		"passwd": map[string]any{"users": []any{map[string]any{
			"name": "ops", "sshAuthorizedKeys": []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKiln ops@test"},
		}}},
		"storage": map[string]any{"files": []any{
			map[string]any{"path": "/etc/kiln-test/hello", "mode": 0o644, "contents": map[string]any{"source": "data:,world"}},
			map[string]any{"path": "/etc/hostname", "contents": map[string]any{"source": "data:,kiln-test%0A"}},
		}},
		"systemd": map[string]any{"units": []any{
			map[string]any{"name": "kiln-test-probe.service", "enabled": true, "contents": probeUnit},
			map[string]any{"name": "kiln-test-once.service", "enabled": true, "contents": onceUnit},
		}},
	}
	if stateDisk != "" {
		cfg["storage"].(map[string]any)["disks"] = []any{map[string]any{
			"device": stateDisk, "wipeTable": true,
			"partitions": []any{map[string]any{"label": "KILN-STATE", "number": 1}},
		}}
		cfg["storage"].(map[string]any)["filesystems"] = []any{map[string]any{
			"device": "/dev/disk/by-partlabel/KILN-STATE", "format": "ext4", "label": "KILN-STATE",
		}}
	}
	return cfg
}

// invalidConfig would write a file and start the probe if applied, but
// one file has a relative path: the agent must apply none of it.
func invalidConfig() map[string]any {
	cfg := nodeConfig("")
	files := cfg["storage"].(map[string]any)["files"].([]any)
	cfg["storage"].(map[string]any)["files"] = append(files, map[string]any{"path": "etc/relative", "contents": map[string]any{"source": "data:,x"}})
	return cfg
}

// conformanceUnit opens the console only once the checks are done: a
// descriptor opened before the serial getty starts is hung up by it, and
// everything written through it afterwards is lost (the ISO bios boot
// once printed no result within 8 min).
const conformanceUnit = "[Unit]\nDescription=kiln test: Ignition conformance checks\n" +
	"After=kiln-firstboot.service cf-marker.service\n\n" +
	"[Service]\nType=oneshot\nExecStart=/bin/sh -c '/bin/sh /etc/kiln-test/conformance.sh > /run/kiln-conformance.out 2>&1; cat /run/kiln-conformance.out > /dev/ttyS0'\n\n" +
	"[Install]\nWantedBy=multi-user.target\n"

// conformanceConfig is nodeConfig(stateDisk) as a config of spec version,
// with every Ignition conformance case (firstboot/ignite/conformance)
// that version has merged in, and a unit that runs their rendered checks
// after them and prints the result on the console. The boot scenarios
// use different versions, so that each boots one.
func conformanceConfig(t *testing.T, version, stateDisk string) []byte {
	t.Helper()
	base := nodeConfig(stateDisk)
	delete(base, "ignition")
	cases := conformance.Upto(version, conformance.Cases())
	raw, err := conformance.Config(version, append(cases, conformance.Case{Name: "the probe config", Config: string(mustJSON(t, base))}))
	if err != nil {
		t.Fatal(err)
	}
	return withScriptUnit(t, raw, "kiln-test-conformance.service", conformanceUnit, "/etc/kiln-test/conformance.sh", conformance.Script(cases))
}

// expectConformance waits for the conformance checks of this boot and
// fails the test with each check that failed.
func expectConformance(t *testing.T, v *vm.VM) {
	t.Helper()
	done := waitLine(t, v, conformance.DoneLine)
	if strings.HasSuffix(done, " failed=0") {
		t.Logf("Ignition conformance on boot %d: %s", v.Boot(), done)
		return
	}
	for _, l := range v.Lines() {
		if strings.Contains(l, "kiln-conformance: FAIL") {
			t.Error(l)
		}
	}
	t.Errorf("Ignition conformance on boot %d: %s", v.Boot(), done)
}
