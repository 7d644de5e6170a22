package firstboot

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/catalog"
)

// versionRoot is a node whose node file asks for nodeVersion and whose
// image carries imageVersion ("": the file is absent or does not say).
func versionRoot(t *testing.T, nodeVersion, imageVersion string, withCatalog bool) string {
	t.Helper()
	root := t.TempDir()
	write := func(p string, v any) {
		data, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		os.MkdirAll(filepath.Join(root, filepath.Dir(p)), 0o755)
		if err := os.WriteFile(filepath.Join(root, p), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(nodefile.Path, nodefile.NodeFile{APIVersion: nodefile.APIVersion, Kind: nodefile.Kind, Name: "w1", Role: nodefile.RoleWorker,
		Cluster: nodefile.ClusterParams{KubernetesVersion: nodeVersion}})
	if withCatalog {
		cat := catalog.Catalog{KubernetesVersion: imageVersion}
		for _, r := range catalog.Roles {
			cat.Images = append(cat.Images, catalog.Image{Role: r, Ref: "kiln.local/" + r + ":t"})
		}
		write(catalog.Path, cat)
	}
	return root
}

// The node file must name the image's release, but on a slot kiln
// upgrade staged with that release, where it may name one the skew
// policy steps from: the pair a rollout moves between, nothing wider.
func TestCheckKubernetesVersion(t *testing.T) {
	const staged137 = "v1.37.1+kiln.0522ca4d8ea4"
	for _, tc := range []struct {
		name            string
		node, image     string
		withCatalog     bool
		slotImage       string // the booted slot's version in the boot-state record
		wantErrMentions []string
	}{
		{"same release", "v1.37.1", "v1.37.1", true, "", nil},
		{"other patch release", "v1.37.0", "v1.37.1", true, "", []string{"v1.37.0", "v1.37.1", nodefile.Path, "roll the node onto this image with kiln upgrade"}},
		{"other minor release", "v1.38.1", "v1.37.1", true, "", []string{"v1.38.1", "v1.37.1"}},
		{"the next minor, staged by kiln upgrade", "v1.36.3", "v1.37.1", true, staged137, nil},
		{"another patch, staged by kiln upgrade", "v1.37.0", "v1.37.1", true, staged137, nil},
		{"the next minor on the built slot", "v1.36.3", "v1.37.1", true, "v1.0.0", []string{"v1.36.3", "roll the node onto this image with kiln upgrade"}},
		{"the next minor, staged for another release", "v1.36.3", "v1.37.1", true, "v1.37.2+kiln.0522ca4d8ea4", []string{"v1.36.3"}},
		{"a skipped minor, staged", "v1.35.2", "v1.37.1", true, staged137, []string{"skips 1.36"}},
		{"a downgrade, staged", "v1.38.0", "v1.37.1", true, staged137, []string{"downgrade"}},
		{"image without the field is not checked", "v1.38.1", "", true, "", nil},
		{"no catalog is left to the role", "v1.38.1", "", false, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkKubernetesVersion(versionRoot(t, tc.node, tc.image, tc.withCatalog), tc.slotImage)
			if tc.wantErrMentions == nil {
				if err != nil {
					t.Fatalf("err = %v, want none", err)
				}
				return
			}
			for _, s := range tc.wantErrMentions {
				if err == nil || !strings.Contains(err.Error(), s) {
					t.Errorf("err = %v, want it to name %s", err, s)
				}
			}
		})
	}
}

// A mismatch is refused before the role touches the node: no command
// runs, no file but the status report is written, and the console's
// final line names both versions.
func TestRunRoleRefusesAnotherKubernetesVersion(t *testing.T) {
	root := versionRoot(t, "v1.36.4", "v1.37.1", true)
	before := filesUnder(t, root)
	var console bytes.Buffer
	sys := &fakeSys{}
	if err := RunRole(context.Background(), root, &console, sys, time.Second, "test"); err == nil {
		t.Fatal("RunRole accepted a node file for another Kubernetes release")
	}
	lines := strings.Split(strings.TrimSpace(console.String()), "\n")
	last := lines[len(lines)-1]
	if !strings.HasPrefix(last, "kiln-firstboot: error: role worker: ") || !strings.Contains(last, "Kubernetes v1.36.4") || !strings.Contains(last, "Kubernetes v1.37.1") {
		t.Errorf("final line %q does not name both versions", last)
	}
	if len(sys.cmds) > 0 {
		t.Errorf("commands ran: %q", sys.cmds)
	}
	after := slices.DeleteFunc(filesUnder(t, root), func(p string) bool { return p == statusPath })
	if !slices.Equal(after, before) {
		t.Errorf("files before %q, after %q", before, after)
	}
	data, _ := os.ReadFile(filepath.Join(root, statusPath))
	var st Status
	if err := json.Unmarshal(data, &st); err != nil || st.Role == nil || st.Role.State != "error" {
		t.Errorf("status.json: %s (%v)", data, err)
	}
}

func filesUnder(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, "/"+strings.TrimPrefix(p, root+"/"))
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}
