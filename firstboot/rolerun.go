package firstboot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/skew"
	"github.com/kiln-project/kiln/firstboot/role"
	"github.com/kiln-project/kiln/firstboot/stage"
	"github.com/kiln-project/kiln/firstboot/state"
	"github.com/kiln-project/kiln/internal/atomicfile"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/catalog"
)

// RunRole does the node's role (kiln-role.service, after the config is
// applied) and ends with one console line: "kiln-firstboot: done
// role=<role>" or "kiln-firstboot: error: <reason>". The role's state is
// added to /run/kiln/status.json. version is the agent's, which the role
// publishes on the node's Node.
func RunRole(ctx context.Context, root string, console io.Writer, sys System, wait time.Duration, version string) error {
	logf := func(format string, args ...any) { fmt.Fprintf(console, prefix+format+"\n", args...) }
	st := readStatus(root)
	name := "unknown"
	args, _ := readServeArgs(root) // the agent said what is wrong with them
	reports := newReporter(args.URL, logf)
	defer reports.wait()
	if f, err := nodefile.Read(filepath.Join(root, nodefile.Path)); err == nil {
		name = f.Role
		reports.setName(f.Name)
	}
	st.Role = &RoleStatus{Name: name, State: "running"}
	write := func() {
		writeStatusFile(root, st, logf)
		reports.report(rolePhase(st.Role))
	}
	write()
	n := &role.Node{Root: root, Sys: sys, Log: logf, Wait: wait, Version: version, Phase: func(path string) {
		st.Role.Phase = path
		write()
	}}
	trial, slotImage, terr := trialOf(ctx, root, sys, logf)
	if terr != nil {
		logf("this boot's slot is not judged: %v", terr)
	}
	n.DeferRoleDone = trial != nil
	start := time.Now()
	res, err := runChecked(ctx, root, n, slotImage)
	if trial != nil {
		boot := bootID(root)
		trial.Gate = func(ctx context.Context) error { return n.Gate(ctx, boot) }
		if _, err := os.Stat(filepath.Join(root, layout.FailGateSwitch)); err == nil {
			trial.Gate = func(context.Context) error {
				return retry.Final(errors.New("test switch: this build fails its health gate on purpose"))
			}
		}
		if verr := trial.Decide(ctx, err); verr != nil && err == nil {
			err = verr
		} else if err == nil {
			n.PublishRoleDone(ctx) // says why when it cannot
		}
	}
	if err != nil {
		st.Role.State, st.Role.Error = "error", err.Error()
		write()
		logf("error: role %s: %s", name, oneLine(err.Error()))
		return err
	}
	st.Role.State, st.Role.Restored, st.Role.Phase = "done", res.How == "restored", ""
	write()
	if terr == nil {
		migrateState(root, sys, version, logf)
	}
	logf("done role=%s (%s in %s)", res.Role, res.How, time.Since(start).Round(time.Second))
	return nil
}

// migrateState moves the state layout forward once this boot is judged
// good: its role is done and, on a trying boot, its slot marked good
// (before that, a rollback boots a kiln that may not know the new
// layout). A failure leaves the layout as it was, which this kiln runs
// on; the next good boot tries again.
func migrateState(root string, sys System, version string, logf func(string, ...any)) {
	m := &state.Manager{Root: root, Sys: sys, Version: version}
	from, err := m.Migrate()
	switch {
	case err != nil:
		logf("the state layout stays as it was: %v (the next good boot tries again)", err)
	case from < state.Layout:
		logf("state layout %d moved to %d, now that this boot is judged good", from, state.Layout)
	}
}

// rolePhase is what kiln serve is told of the role's state: "role
// worker: running worker/kubelet", "role worker: done", "role worker:
// error: <why>" (the error names the phase).
func rolePhase(r *RoleStatus) string {
	p := "role " + r.Name + ": " + r.State
	switch {
	case r.Error != "":
		p += ": " + oneLine(r.Error)
	case r.Phase != "":
		p += " " + r.Phase
	}
	return p
}

// runChecked runs the role once the node file is known to fit the image
// (slotImage is the boot-state record's version of the booted slot).
func runChecked(ctx context.Context, root string, n *role.Node, slotImage string) (role.Result, error) {
	if err := checkKubernetesVersion(root, slotImage); err != nil {
		return role.Result{}, err
	}
	return n.Run(ctx)
}

// checkKubernetesVersion refuses a node file that asks for another
// Kubernetes release than the one baked into the image, but for the
// pair a rollout moves between: on a root slot kiln upgrade staged with
// this image's release (slotImage "<release>+kiln.<digest>",
// stage.ImageFor), the node file may name a release the skew policy
// steps from to this one (the minor before it, or another patch), since
// the site's nodes keep their configs through the roll. A missing file
// is left for the role to report; an image that does not record its
// release is not checked.
func checkKubernetesVersion(root, slotImage string) error {
	f, err := nodefile.Read(filepath.Join(root, nodefile.Path))
	if err != nil {
		return nil
	}
	cat, err := catalog.Read(filepath.Join(root, catalog.Path))
	if err != nil || cat.KubernetesVersion == "" || f.Cluster.KubernetesVersion == "" {
		return nil
	}
	want, have := f.Cluster.KubernetesVersion, cat.KubernetesVersion
	if want == have {
		return nil
	}
	step := skew.Kubernetes(want, have)
	if staged, ok := stage.ReleaseOf(slotImage); ok && staged == have && step == nil {
		return nil
	}
	why := fmt.Sprintf("boot an image built for %s, or set cluster.kubernetesVersion to %s in the site file and run kiln gen again", want, have)
	switch {
	case step != nil:
		why += " (" + step.Error() + ")"
	default:
		why += " (or roll the node onto this image with kiln upgrade, which stages it for the pair of releases it moves between)"
	}
	return fmt.Errorf("%s asks for Kubernetes %s but this image carries Kubernetes %s (%s): %s",
		nodefile.Path, want, have, catalog.Path, why)
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
	if err := atomicfile.WriteFile(filepath.Join(root, statusPath), append(data, '\n'), 0o644, nil); err != nil {
		logf("could not write %s: %v", statusPath, err)
	}
}
