package state

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coreos/ignition/v2/config/v3_5/types"
)

type execRunner struct{}

func (execRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %v: %w: %s", name, args, err, out)
	}
	return out, nil
}

// loopDisk attaches a sparse file as a block device: the real sgdisk,
// partx, blkid and mkfs.ext4 run against it.
func loopDisk(t *testing.T, mib int) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for loop devices")
	}
	for _, tool := range []string{"losetup", "sgdisk", "mkfs.ext4", "blkid", "partx"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed (scripts/host-deps.sh installs it)", tool)
		}
	}
	img := filepath.Join(t.TempDir(), "disk.img")
	if err := os.Truncate(img, 0); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	f, _ := os.Create(img)
	f.Truncate(int64(mib) << 20)
	f.Close()
	out, err := exec.Command("losetup", "-f", "-P", "--show", img).Output()
	if err != nil {
		t.Skipf("no loop device available: %v", err)
	}
	dev := strings.TrimSpace(string(out))
	t.Cleanup(func() { exec.Command("losetup", "-d", dev).Run() })
	return dev
}

func TestCreateMakesALabelledExt4PartitionOnABlankDisk(t *testing.T) {
	disk := loopDisk(t, 64)
	m := &Manager{Root: "/", Sys: execRunner{}, Machine: fixedMachine{MACs: []string{"52:54:00:12:34:56"}}}
	dev, err := m.Create(context.Background(), Target{Disk: disk})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dev, disk) {
		t.Errorf("partition %s is not on %s", dev, disk)
	}
	out, err := exec.Command("blkid", "-p", "-o", "export", dev).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"TYPE=ext4", "LABEL=" + Label, "PART_ENTRY_NAME=" + Label} {
		if !strings.Contains(string(out), want+"\n") {
			t.Errorf("blkid of %s lacks %s:\n%s", dev, want, out)
		}
	}
	if _, err := exec.LookPath("debugfs"); err != nil {
		t.Skip("debugfs not installed: the record inside is not checked")
	}
	rec, err := exec.Command("debugfs", "-R", "cat /"+RecordFile, dev).Output()
	if err != nil || !strings.Contains(string(rec), "52:54:00:12:34:56") {
		t.Errorf("the new filesystem's %s: %q, %v", RecordFile, rec, err)
	}
	lay, err := exec.Command("debugfs", "-R", "cat /"+LayoutFile, dev).Output()
	if err != nil || !strings.Contains(string(lay), fmt.Sprintf(`"layout": %d`, Layout)) {
		t.Errorf("the new filesystem's %s: %q, %v", LayoutFile, lay, err)
	}
	root, err := exec.Command("debugfs", "-R", "stat /", dev).Output()
	if err != nil || !strings.Contains(string(root), "Mode:  0755") {
		t.Errorf("the new filesystem's root: %v\n%s", err, root)
	}
}

func TestCreateRefusesADiskThatHoldsAFilesystem(t *testing.T) {
	disk := loopDisk(t, 32)
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "precious", disk).CombinedOutput(); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	m := &Manager{Root: "/", Sys: execRunner{}}
	_, err := m.Create(context.Background(), Target{Disk: disk})
	if err == nil || !strings.Contains(err.Error(), "refusing to partition") {
		t.Fatalf("err = %v, want a refusal", err)
	}
	out, _ := exec.Command("blkid", "-p", "-o", "value", "-s", "LABEL", disk).Output()
	if strings.TrimSpace(string(out)) != "precious" {
		t.Fatalf("the existing filesystem was touched: label now %q", out)
	}
}

func TestTargetForPrefersTheDiskTheConfigLabels(t *testing.T) {
	label, size := Label, 512
	cfg := types.Config{Storage: types.Storage{Disks: []types.Disk{
		{Device: "/dev/vdb", Partitions: []types.Partition{{Label: &label, Number: 3, SizeMiB: &size}}},
	}}}
	m := &Manager{Root: t.TempDir(), Sys: execRunner{}}
	got, ok, err := m.TargetFor(context.Background(), cfg)
	if err != nil || !ok || got != (Target{Disk: "/dev/vdb", Number: 3, SizeMiB: 512}) {
		t.Fatalf("TargetFor = %+v %v %v", got, ok, err)
	}
	// No disk named and no KILN-ROOT-A partition (CD or PXE boot): RAM.
	if _, ok, err := m.TargetFor(context.Background(), types.Config{}); ok || err != nil {
		t.Fatalf("diskless TargetFor ok=%v err=%v, want no target", ok, err)
	}
}

// With no disk named, the state partition goes on the disk that holds
// slot a's root partition, KILN-ROOT-A: the raw disk, whichever slot
// booted. A partition labelled plain KILN-ROOT marks no boot disk.
func TestTargetForFindsTheBootDiskBySlotA(t *testing.T) {
	for _, tc := range []struct {
		label string
		want  Target
		ok    bool
	}{
		{"KILN-ROOT-A", Target{Disk: "/dev/vda"}, true},
		{"KILN-ROOT-B", Target{}, false},
		{"KILN-ROOT", Target{}, false},
	} {
		root := t.TempDir()
		link := filepath.Join(root, "dev/disk/by-partlabel", tc.label)
		write(t, root, "dev/vda2", "")
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../vda2", link); err != nil {
			t.Fatal(err)
		}
		r := &scriptedRunner{answers: map[string]answer{"lsblk -ndo PKNAME " + link: {"vda\n", nil}}}
		m := &Manager{Root: root, Sys: r}
		got, ok, err := m.TargetFor(context.Background(), types.Config{})
		if err != nil || ok != tc.ok || got != tc.want {
			t.Errorf("%s: TargetFor = %+v %v %v, want %+v %v", tc.label, got, ok, err, tc.want, tc.ok)
		}
	}
}

// exitStatus is a command that ran and failed, as exec reports it.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }
func (e exitStatus) ExitCode() int { return int(e) }

type answer struct {
	out string
	err error
}

// scriptedRunner answers the command lines it is given and, like a blank
// disk, "nothing found" (blkid's exit status 2) to any other blkid; every
// other command succeeds. It records what ran.
type scriptedRunner struct {
	answers map[string]answer
	cmds    []string
}

func (r *scriptedRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	r.cmds = append(r.cmds, line)
	if a, ok := r.answers[line]; ok {
		return []byte(a.out), a.err
	}
	if name == "blkid" {
		return nil, exitStatus(2)
	}
	return nil, nil
}

func (r *scriptedRunner) ran(prefixes ...string) []string {
	var out []string
	for _, c := range r.cmds {
		for _, p := range prefixes {
			if strings.HasPrefix(c, p) {
				out = append(out, c)
			}
		}
	}
	return out
}

func probeCmd(tag, dev string) string { return "blkid -p -o value -s " + tag + " " + dev }

// diskRoot is a node root with /dev/vda and, as udev would show the new
// state partition, /dev/vda1 behind its by-partlabel link.
func diskRoot(t *testing.T) string {
	root := t.TempDir()
	for _, p := range []string{"dev/vda", "dev/vda1"} {
		write(t, root, p, "")
	}
	links := filepath.Join(root, "dev/disk/by-partlabel")
	if err := os.MkdirAll(links, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../vda1", filepath.Join(links, Label)); err != nil {
		t.Fatal(err)
	}
	return root
}

func write(t *testing.T, root, p, data string) {
	t.Helper()
	full := filepath.Join(root, p)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A probe that fails is not a blank disk: the agent stops, naming the
// device, before anything that writes to it.
func TestCreateStopsWhenAProbeFails(t *testing.T) {
	destructive := []string{"sgdisk", "mkfs", "wipefs"}
	tests := []struct {
		name      string
		disk      string
		answers   map[string]answer
		wantErr   string   // "" for success
		forbidden []string // commands that must not run
	}{
		{name: "blank disk: exit status 2 is nothing found", disk: "/dev/vda"},
		{"usage or permission error", "/dev/vda", map[string]answer{probeCmd("PTTYPE", "/dev/vda"): {"", exitStatus(4)}}, "/dev/vda", destructive},
		{"ambiguous signatures", "/dev/vda", map[string]answer{probeCmd("PTTYPE", "/dev/vda"): {"", exitStatus(8)}}, "/dev/vda", destructive},
		{"blkid missing", "/dev/vda", map[string]answer{probeCmd("PTTYPE", "/dev/vda"): {"", exec.ErrNotFound}}, "/dev/vda", destructive},
		{"nothing found, but blkid could not open the disk", "/dev/vda",
			map[string]answer{probeCmd("PTTYPE", "/dev/vda"): {"blkid: error: /dev/vda: Permission denied\n", exitStatus(2)}}, "/dev/vda", destructive},
		{"the disk does not exist: blkid -p says nothing found", "/dev/vdz", nil, "/dev/vdz", destructive},
		{"no table, and the filesystem probe fails", "/dev/vda", map[string]answer{probeCmd("TYPE", "/dev/vda"): {"", exitStatus(4)}}, "/dev/vda", destructive},
		{"the new partition's probe fails", "/dev/vda", map[string]answer{
			probeCmd("PTTYPE", "/dev/vda"): {"gpt\n", nil},
			probeCmd("TYPE", "/dev/vda1"):  {"", exitStatus(8)},
		}, "/dev/vda1", []string{"mkfs", "wipefs"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &scriptedRunner{answers: tc.answers}
			m := &Manager{Root: diskRoot(t), Sys: r}
			dev, err := m.Create(context.Background(), Target{Disk: tc.disk})
			if tc.wantErr == "" {
				if err != nil || dev != "/dev/vda1" || len(r.ran("mkfs.ext4")) != 1 {
					t.Fatalf("Create = %q, %v; want /dev/vda1 formatted (commands %q)", dev, err, r.cmds)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Create = %q, %v; want an error naming %s", dev, err, tc.wantErr)
			}
			if got := r.ran(tc.forbidden...); len(got) > 0 {
				t.Fatalf("ran %q after a failed probe", got)
			}
		})
	}
}

func TestFindTellsNoStateFromAFailedLookup(t *testing.T) {
	lookup := "blkid -o device -t LABEL=" + Label
	tests := []struct {
		name    string
		answer  answer
		wantDev string
		wantErr bool
	}{
		{"found", answer{"/dev/vda3\n", nil}, "/dev/vda3", false},
		{"no such label", answer{"", exitStatus(2)}, "", false},
		{"blkid fails", answer{"", exitStatus(4)}, "", true},
		{"blkid missing", answer{"", exec.ErrNotFound}, "", true},
		{"two: a stray drive beside the state disk", answer{"/dev/vda3\n/dev/sdb1\n", nil}, "", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &scriptedRunner{answers: map[string]answer{lookup: tc.answer}}
			m := &Manager{Root: t.TempDir(), Sys: r}
			dev, ok, err := m.Find(context.Background())
			if dev != tc.wantDev || ok != (tc.wantDev != "") || (err != nil) != tc.wantErr {
				t.Fatalf("Find = %q, %v, %v", dev, ok, err)
			}
			if err != nil && !strings.Contains(err.Error(), Label) {
				t.Errorf("error %q does not say what was looked for", err)
			}
			// One filesystem found is the answer at once; any other
			// answer is asked again once udev is idle.
			settled := r.ran("udevadm") != nil
			if settled != (tc.wantDev == "") {
				t.Errorf("udev settled: %v; want a settle only when the first lookup found not exactly one (commands %q)", settled, r.cmds)
			}
		})
	}
}

// bootingDisk is a disk whose driver is still loading: blkid finds
// nothing for the first lookups, and udev's queue is busy for as long as
// busy says.
type bootingDisk struct {
	absentLookups int  // lookups that find nothing before the disk is there
	busy          bool // udev's queue never empties
	lookups       int
	udevChecks    int
}

func (d *bootingDisk) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	switch line := strings.Join(append([]string{name}, args...), " "); line {
	case "blkid -o device -t LABEL=" + Label:
		d.lookups++
		if d.lookups <= d.absentLookups {
			return nil, exitStatus(blkidNothingFound)
		}
		return []byte("/dev/vda1\n"), nil
	case "udevadm settle --timeout=0":
		d.udevChecks++
		if d.busy {
			return nil, exitStatus(1)
		}
		return nil, nil
	default:
		return nil, fmt.Errorf("unexpected command %q", line)
	}
}

func TestFindWaitsForTheDiskOnlyWhileUdevIsBusy(t *testing.T) {
	tests := []struct {
		name        string
		disk        bootingDisk
		wantDev     string
		wantLookups int
	}{
		// After a power cut: the disk shows up while udev is still busy
		// with other devices; it is taken as soon as blkid sees it.
		{"disk appears while udev is busy", bootingDisk{absentLookups: 3, busy: true}, "/dev/vda1", 4},
		// A blank machine: nothing comes, udev goes idle, one last look.
		{"udev idle, nothing there", bootingDisk{absentLookups: 1000}, "", 2},
		// The disk is registered just as udev's queue empties.
		{"disk appears at the last look", bootingDisk{absentLookups: 1}, "/dev/vda1", 2},
		// udev never empties its queue: Find gives its answer at the bound.
		{"udev busy past the bound", bootingDisk{absentLookups: 1000, busy: true}, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.disk
			m := &Manager{Root: t.TempDir(), Sys: &d, FindWait: 600 * time.Millisecond}
			start := time.Now()
			dev, ok, err := m.Find(context.Background())
			if err != nil || dev != tc.wantDev || ok != (tc.wantDev != "") {
				t.Fatalf("Find = %q, %v, %v; want %q", dev, ok, err, tc.wantDev)
			}
			if tc.wantLookups > 0 && d.lookups != tc.wantLookups {
				t.Errorf("blkid asked %d times; want %d", d.lookups, tc.wantLookups)
			}
			if tc.wantLookups == 0 && time.Since(start) < m.FindWait {
				t.Errorf("Find answered after %s, before its bound %s, while udev was busy", time.Since(start), m.FindWait)
			}
			if time.Since(start) > m.FindWait+2*findPoll {
				t.Errorf("Find took %s; its bound is %s", time.Since(start), m.FindWait)
			}
		})
	}
}

func TestFindStopsWhenItsContextEnds(t *testing.T) {
	d := &bootingDisk{absentLookups: 1000, busy: true}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	m := &Manager{Root: t.TempDir(), Sys: d}
	_, _, err := m.Find(ctx)
	if err == nil || !strings.Contains(err.Error(), Label) {
		t.Fatalf("Find after its context ended = %v; want an error naming %s", err, Label)
	}
}

// On a blank machine blkid is not asked again and again while udev is
// busy: only when the kernel's list of block devices changes.
func TestFindAsksBlkidOnlyWhenTheDeviceListChanges(t *testing.T) {
	root := t.TempDir()
	partitions := filepath.Join(root, "proc", "partitions")
	os.MkdirAll(filepath.Dir(partitions), 0o755)
	os.WriteFile(partitions, []byte("major minor  #blocks  name\n  11 0 429056 sr0\n"), 0o444)

	blank := &bootingDisk{absentLookups: 1000, busy: true}
	m := &Manager{Root: root, Sys: blank, FindWait: 600 * time.Millisecond}
	if dev, ok, err := m.Find(context.Background()); dev != "" || ok || err != nil {
		t.Fatalf("Find on a blank machine = %q, %v, %v", dev, ok, err)
	}
	if blank.lookups != 2 {
		t.Errorf("blkid asked %d times while the device list stood still; want 2 (the first look and the last)", blank.lookups)
	}
	if blank.udevChecks < 2 {
		t.Errorf("udev's queue looked at %d times; want it watched until the bound", blank.udevChecks)
	}

	// The disk's driver registers it while udev is busy: found at once.
	late := &bootingDisk{absentLookups: 1, busy: true}
	m = &Manager{Root: root, Sys: late, FindWait: 5 * time.Second}
	go func() {
		time.Sleep(3 * findPoll)
		os.WriteFile(partitions, []byte("major minor  #blocks  name\n  11 0 429056 sr0\n 254 0 8388608 vda\n 254 1 8387567 vda1\n"), 0o444)
	}()
	start := time.Now()
	if dev, ok, err := m.Find(context.Background()); dev != "/dev/vda1" || !ok || err != nil {
		t.Fatalf("Find as the disk appears = %q, %v, %v", dev, ok, err)
	}
	if late.lookups != 2 || time.Since(start) > 2*time.Second {
		t.Errorf("found after %d lookups and %s; want the second lookup, right after the device list changed", late.lookups, time.Since(start))
	}
}

// mkfsWatcher is a scriptedRunner that reads, when mkfs.ext4 runs, the
// record in the directory its -d names.
type mkfsWatcher struct {
	scriptedRunner
	record string // what -d's directory held; "" when mkfs had no -d
}

func (w *mkfsWatcher) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if i := slices.Index(args, "-d"); name == "mkfs.ext4" && i >= 0 && i+1 < len(args) {
		b, err := os.ReadFile(filepath.Join(args[i+1], RecordFile))
		if err != nil {
			w.record = "unreadable: " + err.Error()
		} else {
			w.record = string(b)
		}
	}
	return w.scriptedRunner.Run(ctx, name, args...)
}

// The filesystem Create makes holds this machine's record from the
// moment it exists: a power cut before its first mount leaves one this
// machine owns, not one with no record that only an adoption would let
// it use.
func TestCreateRecordsThisMachineWithTheFilesystem(t *testing.T) {
	tests := []struct {
		name       string
		this       fixedMachine
		wantRecord string // "" for no -d
	}{
		{"a machine with a NIC", fixedMachine{MACs: []string{"52:54:00:12:34:56"}}, `"macs": [` + "\n" + `    "52:54:00:12:34:56"`},
		{"a machine with a product UUID", fixedMachine{ProductUUID: "4c4c4544-0042-3510-8051-b4c04f4e3132"}, `"productUUID": "4c4c4544-0042-3510-8051-b4c04f4e3132"`},
		{"nothing to record: MountCreated says so", fixedMachine{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &mkfsWatcher{}
			m := &Manager{Root: diskRoot(t), Sys: w, Machine: tc.this}
			dev, err := m.Create(context.Background(), Target{Disk: "/dev/vda"})
			if err != nil || dev != "/dev/vda1" {
				t.Fatalf("Create = %q, %v", dev, err)
			}
			mkfs := w.ran("mkfs.ext4")
			if len(mkfs) != 1 || !strings.HasPrefix(mkfs[0], "mkfs.ext4 -q -F -L "+Label+" ") || !strings.HasSuffix(mkfs[0], " /dev/vda1") {
				t.Fatalf("mkfs commands %q", mkfs)
			}
			if tc.wantRecord == "" {
				if strings.Contains(mkfs[0], " -d ") {
					t.Errorf("%q: a record for a machine with nothing to record", mkfs[0])
				}
				return
			}
			if !strings.Contains(w.record, tc.wantRecord) || !strings.Contains(w.record, `"version": 1`) {
				t.Fatalf("the new filesystem's record:\n%s\nwant it to contain %s (%s)", w.record, tc.wantRecord, mkfs[0])
			}
			args := strings.Fields(mkfs[0])
			dir := args[slices.Index(args, "-d")+1]
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("the record's directory %s is left behind: %v", dir, err)
			}
		})
	}
}
