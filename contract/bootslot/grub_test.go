package bootslot

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestScriptLoadsEachSlot(t *testing.T) {
	script := Script([]string{"quiet"})
	for _, s := range Slots {
		want := "if [ -f " + s.Args() + " ]; then source " + s.Args() + "; fi\n  linux " + s.Kernel() + " " + strings.Join(Cmdline(s), " ") + " ${kiln_args}\n  initrd " + s.Initrd() + "\n"
		if !strings.Contains(script, want) {
			t.Errorf("the script does not load slot %s with\n%s", s, want)
		}
	}
	for _, needed := range []string{"load_env -f " + EnvPath, "save_env -f " + EnvPath + " kiln_tries", "set kiln_args='quiet'\n"} {
		if !strings.Contains(script, needed) {
			t.Errorf("the script has no %q", needed)
		}
	}
}

// grubEmuDir is where Debian's grub-emu package puts GRUB's modules.
const grubEmuDir = "/usr/lib/grub/x86_64-emu"

// emuESP is an ESP image for grub-emu, made with the host's FAT tools.
type emuESP struct {
	t     *testing.T
	dir   string
	image string
}

func newEmuESP(t *testing.T) *emuESP {
	t.Helper()
	for _, tool := range []string{"grub-emu", "mkfs.fat", "mmd", "mcopy", "mdel"} {
		hostTool(t, tool)
	}
	if _, err := os.Stat(filepath.Join(grubEmuDir, "normal.mod")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("grub-emu's modules: %v: scripts/host-deps.sh installs grub-emu", err)
		}
		t.Skipf("grub-emu's modules: %v: run scripts/host-deps.sh to run this test", err)
	}
	dir := t.TempDir()
	e := &emuESP{t: t, dir: dir, image: filepath.Join(dir, "esp.img")}
	run(t, "mkfs.fat", "-C", "-n", "KILN-ESP", e.image, "8192")
	run(t, "mmd", "-i", e.image, "::/kiln")
	return e
}

func (e *emuESP) put(block []byte) {
	local := filepath.Join(e.dir, "grubenv")
	writeFile(e.t, local, block)
	run(e.t, "mcopy", "-o", "-i", e.image, local, "::"+EnvPath)
}

// putFile writes data at path on the ESP, making its directory.
func (e *emuESP) putFile(path string, data []byte) {
	local := filepath.Join(e.dir, filepath.Base(path))
	writeFile(e.t, local, data)
	exec.Command("mmd", "-i", e.image, "::"+filepath.Dir(path)).Run() // it may exist
	run(e.t, "mcopy", "-o", "-i", e.image, local, "::"+path)
}

func (e *emuESP) get() []byte {
	local := filepath.Join(e.dir, "grubenv.out")
	run(e.t, "mcopy", "-o", "-i", e.image, "::"+EnvPath, local)
	return readFile(e.t, local)
}

// emuConfig runs Script on the ESP image as (hd0), with linux and initrd
// replaced by functions that print their arguments (one a line, as
// grub-emu's terminal wraps at 80 columns), then leaves grub-emu.
func emuConfig() string {
	return `insmod fat
insmod loadenv
insmod test
insmod echo
set root=(hd0)
function linux { for a in "$@"; do echo "kiln-test: linux $a"; done; }
function initrd { for a in "$@"; do echo "kiln-test: initrd $a"; done; }
` + Script(builtArgs) + `echo "kiln-test: end"
reboot
`
}

var terminalCodes = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// boot runs grub-emu once and returns the lines the config printed.
func (e *emuESP) boot() []string {
	e.t.Helper()
	prefix := filepath.Join(e.dir, "grub")
	if err := os.MkdirAll(prefix, 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.Symlink(grubEmuDir, filepath.Join(prefix, "x86_64-emu")); err != nil && !os.IsExist(err) {
		e.t.Fatal(err)
	}
	writeFile(e.t, filepath.Join(prefix, "grub.cfg"), []byte(emuConfig()))
	deviceMap := filepath.Join(e.dir, "device.map")
	writeFile(e.t, deviceMap, []byte("(hd0) "+e.image+"\n"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "grub-emu", "-d", prefix, "-m", deviceMap)
	out, err := cmd.CombinedOutput()
	if err != nil {
		e.t.Fatalf("grub-emu: %v\n%s", err, out)
	}
	var lines []string
	for _, l := range strings.Split(terminalCodes.ReplaceAllString(string(out), ""), "\n") {
		if i := strings.Index(l, "kiln-test: "); i >= 0 {
			lines = append(lines, strings.TrimSpace(l[i+len("kiln-test: "):]))
		}
	}
	if len(lines) == 0 || lines[len(lines)-1] != "end" {
		e.t.Fatalf("grub-emu did not run the config to its end:\n%s", out)
	}
	return lines[:len(lines)-1]
}

// builtArgs are the image's extra arguments Script is made with in the
// tests: GRUB must pass them as two.
var builtArgs = []string{"quiet", "kiln.test=1"}

// loads is what the test config prints when the script loads slot s with
// the built image's extra arguments.
func loads(s Slot) []string { return loadsWith(s, builtArgs) }

// loadsWith is what it prints when slot s has the extra arguments extra.
func loadsWith(s Slot, extra []string) []string {
	var lines []string
	for _, arg := range append([]string{s.Kernel()}, append(Cmdline(s), extra...)...) {
		lines = append(lines, "linux "+arg)
	}
	return append(lines, "initrd "+s.Initrd())
}

// TestScriptInGrubEmu runs Script in GRUB's own script interpreter
// (grub-emu) against a record on a FAT image, for each state Choose is
// held to: GRUB loads the slot Choose picks, and save_env leaves the
// record Choose returns, changing at most one byte of the block.
func TestScriptInGrubEmu(t *testing.T) {
	esp := newEmuESP(t)
	for _, tt := range chooseCases {
		t.Run(tt.name, func(t *testing.T) {
			before, err := Encode(tt.from)
			if err != nil {
				t.Fatal(err)
			}
			esp.put(before)
			if got, want := esp.boot(), loads(tt.boots); !reflect.DeepEqual(got, want) {
				t.Errorf("GRUB printed\n%q\nwant\n%q", got, want)
			}
			after := esp.get()
			if n := differingBytes(before, after); n > 1 {
				t.Errorf("save_env changed %d bytes of the block, want at most 1", n)
			}
			got, err := Decode(after)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.after) {
				t.Errorf("record after GRUB: %s, want %s", got.State(), tt.after.State())
			}
		})
	}
	t.Run("no record", func(t *testing.T) {
		run(t, "mdel", "-i", esp.image, "::"+EnvPath)
		if got, want := esp.boot(), loads(A); !reflect.DeepEqual(got, want) {
			t.Errorf("GRUB printed\n%q\nwant\n%q", got, want)
		}
	})
	t.Run("not a GRUB environment block", func(t *testing.T) {
		esp.put(bytes.Repeat([]byte{'#'}, BlockSize))
		if got, want := esp.boot(), loads(A); !reflect.DeepEqual(got, want) {
			t.Errorf("GRUB printed\n%q\nwant\n%q", got, want)
		}
	})
	// A slot staged with another image boots with that image's arguments,
	// passed as they are (GRUB's $ and \ and " inside), the other slot
	// with the built image's.
	t.Run("a slot's own arguments", func(t *testing.T) {
		own := []string{"console=ttyS1", `kiln.odd=$x\y"z`, "quiet"}
		data, err := EncodeArgs(own)
		if err != nil {
			t.Fatal(err)
		}
		esp.putFile(B.Args(), data)
		for _, tc := range []struct {
			rec  Record
			want []string
		}{
			{stagedB, loadsWith(B, own)},
			{fresh, loads(A)},
		} {
			block, err := Encode(tc.rec)
			if err != nil {
				t.Fatal(err)
			}
			esp.put(block)
			if got := esp.boot(); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("record %s: GRUB printed\n%q\nwant\n%q", tc.rec.State(), got, tc.want)
			}
		}
	})
}
