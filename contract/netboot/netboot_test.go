package netboot

import (
	"strings"
	"testing"
)

func TestSpecArgsRefusesAScriptItDoesNotKnow(t *testing.T) {
	std := strings.Join(PXECmdline("${base-url}"), " ")
	for _, c := range []struct {
		script string
		want   string
		ok     bool
	}{
		{"kernel ${base-url}/vmlinuz " + std + " quiet a=b ${kiln-args}\n", "quiet a=b", true},
		{"#!ipxe\nkernel ${base-url}/vmlinuz " + std + " ${kiln-args}\nboot\n", "", true},
		{"kernel ${base-url}/vmlinuz " + std + " quiet\n", "", false},                    // no ${kiln-args}
		{"kernel ${base-url}/vmlinuz root=live:x " + std + " ${kiln-args}\n", "", false}, // other arguments first
		{"chain http://elsewhere/boot.ipxe\n", "", false},
	} {
		got, ok := SpecArgs(c.script)
		if ok != c.ok || strings.Join(got, " ") != c.want {
			t.Errorf("SpecArgs(%q) = %q, %v; want %q, %v", c.script, got, ok, c.want, c.ok)
		}
	}
}

func TestCAPin(t *testing.T) {
	// sha256 of the empty string
	if got := CAPin(nil); got != "sha256-e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" {
		t.Errorf("CAPin(nil) = %s", got)
	}
}
