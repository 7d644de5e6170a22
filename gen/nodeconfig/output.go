package nodeconfig

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/outdir"
)

// MarkerKind is the first line of the marker kiln gen writes into its
// output directory.
const MarkerKind = "kiln gen"

const wayOut = "choose an empty or new directory, or remove it yourself"

// checkOutput refuses an output directory Generate may not replace as a
// whole: one that is, holds or lies inside the PKI, holds the site file
// or the current directory, or holds anything kiln gen did not write.
func checkOutput(out string, s *site.Site, st pki.Store) error {
	if err := checkPlace(out, s.File, st.Dir); err != nil {
		return err
	}
	return checkContent(out)
}

// checkPlace refuses out when replacing it would take the PKI, the site
// file or the current directory with it, or put the output in the PKI.
func checkPlace(out, siteFile, pkiDir string) error {
	cwd, err := os.Getwd()
	if err != nil {
		return fmt.Errorf("finding the current directory: %w", err)
	}
	at, err := outdir.Resolve(out)
	if err != nil {
		return err
	}
	for _, o := range []struct {
		name, path   string
		refuseInside bool
	}{
		{"the PKI directory", pkiDir, true},
		{"the site file", siteFile, false},
		{"the current directory", cwd, false},
	} {
		if o.path == "" {
			continue
		}
		p, err := outdir.Resolve(o.path)
		if err != nil {
			return err
		}
		if what := relation(at, p, o.name, o.refuseInside); what != "" {
			return &outdir.Refusal{Path: out, What: what,
				WayOut: "kiln gen replaces its output directory as a whole; choose a new directory apart from the site file and the PKI, e.g. -o out/site"}
		}
	}
	return nil
}

// relation says how out stands to p ("is", "holds", "is inside"), or ""
// when replacing out leaves p alone.
func relation(out, p, name string, refuseInside bool) string {
	switch {
	case out == p:
		return fmt.Sprintf("is %s (%s)", name, p)
	case outdir.Within(p, out):
		return fmt.Sprintf("holds %s %s", name, p)
	case refuseInside && outdir.Within(out, p):
		return fmt.Sprintf("is inside %s %s", name, p)
	}
	return ""
}

// checkContent refuses out unless it is missing, empty, or holds only
// what kiln gen wrote: the paths its marker lists or, without a marker
// (the output of a kiln from before the marker), nodes/*.ign and
// admin.kubeconfig.
func checkContent(out string) error {
	fi, err := os.Lstat(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("output directory %s: %w", out, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return &outdir.Refusal{Path: out, What: "is a symbolic link, which replacing the directory would remove",
			WayOut: "give the directory it points to, or a new one"}
	case !fi.IsDir():
		return &outdir.Refusal{Path: out, What: "is a file, not a directory", WayOut: wayOut}
	}
	owned, err := ownedBy(out)
	if err != nil {
		return err
	}
	foreign, err := outdir.Foreign(out, owned)
	if err != nil {
		return err
	}
	if foreign != "" {
		return &outdir.Refusal{Path: out, What: fmt.Sprintf("holds %s, which kiln gen did not write (kiln gen replaces its output directory as a whole)", foreign),
			WayOut: wayOut}
	}
	return nil
}

// ownedBy is what in out kiln gen wrote, as its marker says or, without
// one, as the layout of its older output says.
func ownedBy(out string) (func(rel string, d fs.DirEntry) bool, error) {
	m, ok, err := outdir.ReadMarker(out)
	if err != nil {
		return nil, err
	}
	if !ok {
		return olderOutput, nil
	}
	if m.Kind != MarkerKind {
		return nil, &outdir.Refusal{Path: out, What: fmt.Sprintf("holds the output of %q (its %s says so), not of kiln gen", m.Kind, outdir.MarkerName),
			WayOut: wayOut}
	}
	set := outdir.NewSet(append(m.Paths, outdir.MarkerName)...)
	return func(rel string, _ fs.DirEntry) bool { return set.Has(rel) }, nil
}

// olderOutput claims what kiln gen wrote before it wrote a marker.
func olderOutput(rel string, d fs.DirEntry) bool {
	switch {
	case rel == NodesDir:
		return d.IsDir()
	case rel == AdminKubeconfig, path.Dir(rel) == NodesDir && path.Ext(rel) == ".ign":
		return d.Type().IsRegular()
	}
	return false
}
