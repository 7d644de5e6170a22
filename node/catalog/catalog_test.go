package catalog

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// full is a catalog with one image per role, refs kiln.local/<role>:t.
func full() *Catalog {
	c := &Catalog{KubernetesVersion: "v1.37.1"}
	for _, r := range Roles {
		c.Images = append(c.Images, Image{Role: r, Ref: "kiln.local/" + r + ":t", Digest: "sha256:" + r, Archive: ArchiveDir + "/" + r + ".tar"})
	}
	return c
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		edit    func(c *Catalog)
		wantErr string
	}{
		{"every role once", func(*Catalog) {}, ""},
		{"an extra image beside the roles", func(c *Catalog) { c.Images = append(c.Images, Image{Role: "extra", Ref: "x:1"}) }, ""},
		{"a role missing", func(c *Catalog) { c.Images = c.Images[1:] }, "no image for " + Roles[0]},
		{"a role twice", func(c *Catalog) { c.Images = append(c.Images, c.Images[2]) }, "role " + Roles[2] + " is listed twice"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := full()
			tc.edit(c)
			err := c.Check()
			if tc.wantErr == "" && err != nil {
				t.Fatalf("Check: %v", err)
			}
			if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Check = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestRefsAndManifests(t *testing.T) {
	c := full()
	c.Images = append(c.Images, Image{Role: "extra", Ref: "kiln.local/etcd:t"}) // same ref under another role
	if ref, ok := c.Ref(APIServer); !ok || ref != "kiln.local/kube-apiserver:t" {
		t.Errorf("Ref(APIServer) = %q, %v", ref, ok)
	}
	if _, ok := c.Ref("nonesuch"); ok {
		t.Error("Ref found a role the catalog does not list")
	}
	refs := c.Refs()
	if !slices.IsSorted(refs) || len(refs) != len(Roles) {
		t.Errorf("Refs = %v, want %d sorted unique refs", refs, len(Roles))
	}
	m := c.Manifests()
	if m.Etcd != "kiln.local/etcd:t" || m.Pause != "kiln.local/pause:t" || m.Kiln != "kiln.local/kiln:t" || m.Proxy != "kiln.local/kube-proxy:t" {
		t.Errorf("Manifests = %+v", m)
	}
}

// Marshal sorts by role, whatever the order images were added in, and
// Read gives back the same catalog.
func TestMarshalIsStableAndReadsBack(t *testing.T) {
	c := full()
	reversed := full()
	slices.Reverse(reversed.Images)
	order := slices.Clone(reversed.Images)
	a, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := reversed.Marshal()
	if string(a) != string(b) || !strings.HasSuffix(string(a), "}\n") {
		t.Fatalf("Marshal depends on the order:\n%s\n%s", a, b)
	}
	if !slices.Equal(reversed.Images, order) {
		t.Error("Marshal reordered the caller's images")
	}
	p := filepath.Join(t.TempDir(), "images.json")
	os.WriteFile(p, a, 0o644)
	got, err := Read(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.KubernetesVersion != "v1.37.1" || len(got.Images) != len(Roles) || got.Images[0].Role != slices.Min(Roles) {
		t.Errorf("Read back %+v", got)
	}
}

func TestReadRefuses(t *testing.T) {
	dir := t.TempDir()
	incomplete, _ := (&Catalog{Images: full().Images[1:]}).Marshal()
	for _, tc := range []struct {
		name, body, wantErr string
	}{
		{"not JSON", `{"images":`, "images.json"},
		{"a role missing", string(incomplete), "no image for"},
		{"no file", "", "reading the image catalog"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name, "images.json")
			if tc.body != "" {
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte(tc.body), 0o644)
			}
			if _, err := Read(p); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("Read = %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseImageList(t *testing.T) {
	out := `REF                               TYPE                                                      DIGEST                  SIZE      PLATFORMS   LABELS
kiln.local/etcd:v3.6.5            application/vnd.oci.image.manifest.v1+json                sha256:e1               21.9 MiB  linux/amd64 io.cri-containerd.image=managed
registry.k8s.io/kube-proxy:v1.37.1 application/vnd.docker.distribution.manifest.v2+json     sha256:p1               30.1 MiB  linux/amd64 -
truncated line

`
	got := parseImageList(out)
	want := map[string]string{"kiln.local/etcd:v3.6.5": "sha256:e1", "registry.k8s.io/kube-proxy:v1.37.1": "sha256:p1"}
	if len(got) != len(want) {
		t.Fatalf("parseImageList = %v, want %v", got, want)
	}
	for ref, d := range want {
		if got[ref] != d {
			t.Errorf("%s: digest %q, want %q", ref, got[ref], d)
		}
	}
	if len(parseImageList("REF TYPE DIGEST SIZE PLATFORMS LABELS\n")) != 0 {
		t.Error("the header line was read as an image")
	}
}
