package ignite

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/kiln-project/kiln/internal/ignition"
)

type fakeHost struct {
	cmds     []string
	hostname string
	root     string
}

// Run records the command and emulates the shadow tools' effect on
// /etc/passwd and /etc/group: useradd's and groupadd's ids, home and
// primary group, and the line userdel and groupdel remove.
func (h *fakeHost) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	h.cmds = append(h.cmds, name+" "+strings.Join(args, " "))
	flags := map[string]string{}
	for i := 0; i+1 < len(args); i++ {
		if strings.HasPrefix(args[i], "-") && !strings.HasPrefix(args[i+1], "-") {
			flags[args[i]] = args[i+1]
		}
	}
	entity := args[len(args)-1]
	switch name {
	case "useradd":
		uid, gid := flags["-u"], strconv.Itoa(os.Getgid())
		if uid == "" {
			uid = strconv.Itoa(os.Getuid())
		}
		if g, ok := flags["-g"]; ok {
			if entry, found := (&Applier{Root: h.root}).lookup("/etc/group", g); found {
				gid = entry[2]
			}
		}
		home := flags["-d"]
		if home == "" {
			home = "/home/" + entity
		}
		return nil, appendLine(filepath.Join(h.root, "etc/passwd"), fmt.Sprintf("%s:x:%s:%s:%s:%s:/bin/sh", entity, uid, gid, flags["-c"], home))
	case "groupadd":
		return nil, appendLine(filepath.Join(h.root, "etc/group"), fmt.Sprintf("%s:x:%s:", entity, flags["-g"]))
	case "userdel":
		return nil, removeLine(filepath.Join(h.root, "etc/passwd"), entity)
	case "groupdel":
		return nil, removeLine(filepath.Join(h.root, "etc/group"), entity)
	}
	return nil, nil
}

func removeLine(path, name string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var kept []string
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasPrefix(line, name+":") {
			kept = append(kept, line)
		}
	}
	return os.WriteFile(path, []byte(strings.Join(kept, "")), 0o644)
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = fmt.Fprintln(f, line)
	return err
}

func (h *fakeHost) SetHostname(n string) error { h.hostname = n; return nil }

type fakeSystemd struct{ calls []string }

func (s *fakeSystemd) Reload(context.Context) error { s.calls = append(s.calls, "reload"); return nil }
func (s *fakeSystemd) Enable(_ context.Context, u []string) error {
	s.calls = append(s.calls, "enable "+strings.Join(u, ","))
	return nil
}
func (s *fakeSystemd) Disable(_ context.Context, u []string) error {
	s.calls = append(s.calls, "disable "+strings.Join(u, ","))
	return nil
}
func (s *fakeSystemd) Start(_ context.Context, u string) error {
	s.calls = append(s.calls, "start "+u)
	return nil
}

type noFetch struct{}

func (noFetch) Fetch(context.Context, string) ([]byte, error) { return nil, errors.New("offline") }

func gzipB64(s string) string {
	var b bytes.Buffer
	w := gzip.NewWriter(&b)
	w.Write([]byte(s))
	w.Close()
	return base64.StdEncoding.EncodeToString(b.Bytes())
}

func newRoot(t *testing.T) string {
	root := t.TempDir()
	seedImage(root)
	return root
}

// seedImage writes the image's part of a scratch root.
func seedImage(root string) {
	os.MkdirAll(filepath.Join(root, "etc"), 0o755)
	os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0:root:/root:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\n"), 0o644)
	os.WriteFile(filepath.Join(root, "etc/image-file"), []byte("from the image"), 0o644)
}

const fullConfig = `{
  "ignition": {"version": "3.4.0"},
  "passwd": {"users": [{"name": "ops", "sshAuthorizedKeys": ["ssh-ed25519 AAAA ops@site"], "groups": ["sudo"]}]},
  "storage": {
    "directories": [{"path": "/var/lib/kiln/d", "mode": 448}],
    "files": [
      {"path": "/etc/hostname", "contents": {"source": "data:,node-1%0A"}},
      {"path": "/etc/zipped", "mode": 384, "contents": {"compression": "gzip", "source": "data:;base64,%s"}},
      {"path": "/var/lib/kiln/keep", "contents": {"source": "data:,v1"}},
      {"path": "/var/lib/kiln/log", "append": [{"source": "data:,line%0A"}]}
    ],
    "links": [{"path": "/etc/link", "target": "/etc/hostname"}]
  },
  "systemd": {"units": [
    {"name": "probe.service", "enabled": true, "contents": "[Service]\nExecStart=/bin/true\n[Install]\nWantedBy=multi-user.target\n",
     "dropins": [{"name": "10-x.conf", "contents": "[Service]\nEnvironment=A=1\n"}]},
    {"name": "bad.service", "mask": true}
  ]}
}`

func applyConfig(t *testing.T, root, raw string) (*fakeHost, *fakeSystemd) {
	t.Helper()
	cfg, _, err := ignition.Parse([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := NewPlan(context.Background(), cfg, Sources{Fetcher: noFetch{}})
	if err != nil {
		t.Fatal(err)
	}
	h, s := &fakeHost{root: root}, &fakeSystemd{}
	a := &Applier{Root: root, Persistent: []string{"/var/lib/kiln"}, StampDir: "/var/lib/kiln/stamps", Host: h, Systemd: s}
	if err := a.Check(plan); err != nil {
		t.Fatal(err)
	}
	if err := a.Apply(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
	return h, s
}

func read(t *testing.T, root, p string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestApplyWritesEveryKindOfNode(t *testing.T) {
	root := newRoot(t)
	h, s := applyConfig(t, root, strings.Replace(fullConfig, "%s", gzipB64("unzipped"), 1))
	checks := map[string]string{
		"/etc/hostname": "node-1\n", "/etc/zipped": "unzipped", "/var/lib/kiln/keep": "v1", "/var/lib/kiln/log": "line\n",
		"/etc/systemd/system/probe.service.d/10-x.conf": "[Service]\nEnvironment=A=1\n",
		"/home/ops/.ssh/authorized_keys":                "ssh-ed25519 AAAA ops@site\n",
	}
	for p, want := range checks {
		if got := read(t, root, p); got != want {
			t.Errorf("%s = %q, want %q", p, got, want)
		}
	}
	if fi, _ := os.Stat(filepath.Join(root, "etc/zipped")); fi.Mode().Perm() != 0o600 {
		t.Errorf("/etc/zipped mode %v, want 0600", fi.Mode().Perm())
	}
	if fi, _ := os.Stat(filepath.Join(root, "var/lib/kiln/d")); fi == nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("directory mode wrong: %v", fi)
	}
	if l, _ := os.Readlink(filepath.Join(root, "etc/link")); l != "/etc/hostname" {
		t.Errorf("link -> %q", l)
	}
	if l, _ := os.Readlink(filepath.Join(root, "etc/systemd/system/bad.service")); l != "/dev/null" {
		t.Errorf("mask -> %q, want /dev/null", l)
	}
	if h.hostname != "node-1" {
		t.Errorf("hostname set to %q", h.hostname)
	}
	if want := "useradd -p * -G sudo -m ops"; len(h.cmds) != 1 || h.cmds[0] != want {
		t.Errorf("host commands %v, want [%s]", h.cmds, want)
	}
	if got := strings.Join(s.calls, "|"); got != "reload|enable probe.service|start probe.service" {
		t.Errorf("systemd calls %q", got)
	}
}

// The agent re-applies the stored config every boot: persistent files are
// not clobbered when overwrite is false, and appends happen once.
func TestReapplyIsIdempotentOnPersistentPaths(t *testing.T) {
	root := newRoot(t)
	cfg := strings.Replace(fullConfig, "%s", gzipB64("unzipped"), 1)
	applyConfig(t, root, cfg)
	os.WriteFile(filepath.Join(root, "var/lib/kiln/keep"), []byte("changed by the node"), 0o644)
	applyConfig(t, root, cfg)
	if got := read(t, root, "/var/lib/kiln/keep"); got != "changed by the node" {
		t.Errorf("persistent file with overwrite=false was rewritten: %q", got)
	}
	if got := read(t, root, "/var/lib/kiln/log"); got != "line\n" {
		t.Errorf("append ran twice: %q", got)
	}
}

func TestCheckRefusesToClobberAnImageFile(t *testing.T) {
	root := newRoot(t)
	cfg, _, err := ignition.Parse([]byte(`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/image-file","contents":{"source":"data:,mine"}}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	plan, _ := NewPlan(context.Background(), cfg, Sources{Fetcher: noFetch{}})
	a := &Applier{Root: root, Persistent: []string{"/var/lib/kiln"}}
	if err := a.Check(plan); err == nil || !strings.Contains(err.Error(), "/etc/image-file exists") {
		t.Fatalf("Check = %v, want a refusal naming the file", err)
	}
}

func TestHashMismatchFailsThePlanBeforeAnyWrite(t *testing.T) {
	sum := sha512.Sum512([]byte("other"))
	raw := fmt.Sprintf(`{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/a","contents":{"source":"data:,mine","verification":{"hash":"sha512-%s"}}}]}}`, hex.EncodeToString(sum[:]))
	cfg, _, err := ignition.Parse([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	_, err = NewPlan(context.Background(), cfg, Sources{Fetcher: noFetch{}})
	if err == nil || !strings.Contains(err.Error(), "storage.files[0] (/etc/a)") || !strings.Contains(err.Error(), "verification failed") {
		t.Fatalf("err = %v, want a verification failure naming the file", err)
	}
}

func plan(t *testing.T, raw string) (*Plan, error) {
	t.Helper()
	cfg, _, err := ignition.Parse([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	return NewPlan(context.Background(), cfg, Sources{Fetcher: noFetch{}})
}

// A small gzip content can decompress to more than the node has; past
// the bound it is an error naming the field.
func TestGzipIsDecompressedWithinABound(t *testing.T) {
	defer func(old int64) { maxDecompressed = old }(maxDecompressed)
	maxDecompressed = 1024
	gz := func(n int) string {
		return `{"compression":"gzip","source":"data:;base64,` + gzipB64(strings.Repeat("x", n)) + `"}`
	}
	tests := []struct {
		name, file string
		wantErr    string // "" for success
	}{
		{"contents at the bound", `"contents":` + gz(1024), ""},
		{"contents over the bound", `"contents":` + gz(1025), "storage.files[0] (/etc/big): contents: "},
		{"append over the bound", `"append":[` + gz(10) + `,` + gz(1025) + `]`, "storage.files[0] (/etc/big): append[1]: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := plan(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/big",`+tc.file+`}]}}`)
			if tc.wantErr == "" {
				if err != nil || len(p.Files[0].Contents) != 1024 {
					t.Fatalf("NewPlan: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasSuffix(err.Error(), "decompressed size exceeds 1024 bytes") {
				t.Fatalf("NewPlan = %v, want %q...decompressed size exceeds 1024 bytes", err, tc.wantErr)
			}
		})
	}
}

func sha512Hex(s string) string {
	sum := sha512.Sum512([]byte(s))
	return "sha512-" + hex.EncodeToString(sum[:])
}

// With compression, verification.hash describes the decompressed data, as
// the spec says and coreos/ignition checks: a config written for Ignition
// must verify here.
func TestHashDescribesTheDecompressedData(t *testing.T) {
	zipped := gzipB64("unzipped")
	compressedBytes, _ := base64.StdEncoding.DecodeString(zipped)
	resource := func(hash string, gzip bool) string {
		if !gzip {
			return `{"source":"data:,unzipped","verification":{"hash":"` + hash + `"}}`
		}
		return `{"compression":"gzip","source":"data:;base64,` + zipped + `","verification":{"hash":"` + hash + `"}}`
	}
	tests := []struct {
		name, file string
		wantErr    string // "" for success
	}{
		{"plain contents", `"contents":` + resource(sha512Hex("unzipped"), false), ""},
		{"gzip contents, hash of the decompressed data", `"contents":` + resource(sha512Hex("unzipped"), true), ""},
		{"gzip append, hash of the decompressed data", `"append":[` + resource(sha512Hex("unzipped"), true) + `]`, ""},
		{"gzip contents, hash of the compressed bytes", `"contents":` + resource(sha512Hex(string(compressedBytes)), true),
			"storage.files[0] (/etc/z): contents: "},
		{"gzip append, hash of the compressed bytes", `"append":[` + resource(sha512Hex(string(compressedBytes)), true) + `]`,
			"storage.files[0] (/etc/z): append[0]: "},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[{"path":"/etc/z",`+tc.file+`}]}}`)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("NewPlan: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "verification failed: the decompressed content is") {
				t.Fatalf("NewPlan = %v, want a verification failure of %s", err, tc.wantErr)
			}
		})
	}
}

// An empty source is valid Ignition for an empty file.
func TestEmptySourceWritesAnEmptyFile(t *testing.T) {
	tests := []struct {
		name, file string
		wantErr    string // "" for success
	}{
		{"new file", `{"path":"/etc/empty","mode":384,"contents":{"source":""}}`, ""},
		{"replaces a file", `{"path":"/etc/image-file","overwrite":true,"mode":384,"contents":{"source":""}}`, ""},
		{"hash of nothing", `{"path":"/etc/empty","mode":384,"contents":{"source":"","verification":{"hash":"` + sha512Hex("") + `"}}}`, ""},
		{"hash of something else", `{"path":"/etc/empty","contents":{"source":"","verification":{"hash":"` + sha512Hex("x") + `"}}}`,
			"storage.files[0] (/etc/empty): contents: verification failed"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			raw := `{"ignition":{"version":"3.4.0"},"storage":{"files":[` + tc.file + `]}}`
			if tc.wantErr != "" {
				if _, err := plan(t, raw); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("NewPlan = %v, want %q", err, tc.wantErr)
				}
				return
			}
			applyConfig(t, root, raw)
			var f struct{ Path string }
			json.Unmarshal([]byte(tc.file), &f)
			fi, err := os.Stat(filepath.Join(root, f.Path))
			if err != nil || fi.Size() != 0 || fi.Mode().Perm() != 0o600 {
				t.Fatalf("%s: %v, %v; want an empty file, mode 0600", f.Path, fi, err)
			}
		})
	}
}

// A symbolic link's user and group are its own, as in coreos/ignition.
func TestSymlinkOwnerIsApplied(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to give a link away")
	}
	tests := []struct {
		name, owner      string
		wantUID, wantGID uint32
	}{
		{"by id", `"user":{"id":1234},"group":{"id":4321}`, 1234, 4321},
		{"by name", `"user":{"name":"svc"},"group":{"name":"svc"}`, 2345, 2345},
		{"unset: root", ``, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := newRoot(t)
			os.WriteFile(filepath.Join(root, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nsvc:x:2345:2345::/:/bin/false\n"), 0o644)
			os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nsvc:x:2345:\n"), 0o644)
			link := `{"path":"/etc/link","target":"/etc/image-file"`
			if tc.owner != "" {
				link += "," + tc.owner
			}
			applyConfig(t, root, `{"ignition":{"version":"3.4.0"},"storage":{"links":[`+link+`}]}}`)
			var st syscall.Stat_t
			if err := syscall.Lstat(filepath.Join(root, "etc/link"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Uid != tc.wantUID || st.Gid != tc.wantGID {
				t.Fatalf("/etc/link is owned by %d:%d, want %d:%d", st.Uid, st.Gid, tc.wantUID, tc.wantGID)
			}
		})
	}
}

// Contents each within their own bound can still add up to more than a
// node should hold in memory: the config as a whole is bounded too, and
// the error names the file and field where the total went over.
func TestPlanContentsAreBoundedTogether(t *testing.T) {
	defer func(old int64) { maxPlan = old }(maxPlan)
	maxPlan = 2048
	data := func(n int) string {
		return `{"source":"data:;base64,` + base64.StdEncoding.EncodeToString([]byte(strings.Repeat("x", n))) + `"}`
	}
	file := func(path, fields string) string { return `{"path":"` + path + `",` + fields + `}` }
	tests := []struct {
		name, files, wantErr string
	}{
		{"at the bound", file("/a", `"contents":`+data(1024)) + `,` + file("/b", `"contents":`+data(1024)), ""},
		{"over in the second file", file("/a", `"contents":`+data(1024)) + `,` + file("/b", `"contents":`+data(1025)),
			"storage.files[1] (/b): contents: the config's file contents add up to more than 2048 bytes"},
		{"over in an append", file("/a", `"contents":`+data(2000)+`,"append":[`+data(10)+`,`+data(100)+`]`),
			"storage.files[0] (/a): append[1]: the config's file contents add up to more than 2048 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := plan(t, `{"ignition":{"version":"3.4.0"},"storage":{"files":[`+tc.files+`]}}`)
			if tc.wantErr == "" && err != nil {
				t.Fatalf("NewPlan: %v", err)
			}
			if tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr) {
				t.Fatalf("NewPlan: %v, want %q", err, tc.wantErr)
			}
		})
	}
}
