package firstboot

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kiln-project/kiln/firstboot/fsutil"
	"github.com/kiln-project/kiln/firstboot/role"
	"github.com/kiln-project/kiln/nodefile"
)

// RunRole does the node's role (kiln-role.service, after the config is
// applied) and ends with one console line: "kiln-firstboot: done
// role=<role>" or "kiln-firstboot: error: <reason>". The role's state is
// added to /run/kiln/status.json.
func RunRole(ctx context.Context, root string, console io.Writer, sys System, wait time.Duration) error {
	logf := func(format string, args ...any) { fmt.Fprintf(console, prefix+format+"\n", args...) }
	st := readStatus(root)
	name := "unknown"
	if f, err := nodefile.Read(filepath.Join(root, nodefile.Path)); err == nil {
		name = f.Role
	}
	st.Role = &RoleStatus{Name: name, State: "running"}
	writeStatusFile(root, st, logf)
	n := &role.Node{Root: root, Sys: sys, Log: logf, Wait: wait}
	start := time.Now()
	res, err := n.Run(ctx)
	if err != nil {
		st.Role.State, st.Role.Error = "error", err.Error()
		writeStatusFile(root, st, logf)
		logf("error: role %s: %s", name, oneLine(err.Error()))
		return err
	}
	st.Role.State, st.Role.Restored = "done", res.How == "restored"
	writeStatusFile(root, st, logf)
	logf("done role=%s (%s in %s)", res.Role, res.How, time.Since(start).Round(time.Second))
	return nil
}

func readStatus(root string) Status {
	var st Status
	if data, err := os.ReadFile(filepath.Join(root, statusPath)); err == nil {
		_ = json.Unmarshal(data, &st)
	}
	return st
}

func writeStatusFile(root string, st Status, logf func(string, ...any)) {
	data, _ := json.MarshalIndent(st, "", "  ")
	if err := fsutil.WriteFile(filepath.Join(root, statusPath), append(data, '\n'), 0o644, nil); err != nil {
		logf("could not write %s: %v", statusPath, err)
	}
}
