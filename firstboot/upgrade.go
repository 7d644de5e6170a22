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

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/firstboot/bootrecord"
	"github.com/kiln-project/kiln/firstboot/kubeletclient"
	"github.com/kiln-project/kiln/firstboot/stage"
	"github.com/kiln-project/kiln/firstboot/upgrader"
	"github.com/kiln-project/kiln/internal/atomicfile"
)

// UpgradeStagePath is the last stage the upgrade service made, on the
// state partition: what a later boot answers about.
const UpgradeStagePath = layout.VarDir + "/upgrade-stage.json"

// RunUpgrade is kiln-upgrade.service (kiln firstboot upgrade): the
// node's upgrade service (firstboot/upgrader), as its kubelet. A node
// that boots from the ISO or PXE has no slot to stage into: it answers
// each ask that it cannot stage.
func RunUpgrade(ctx context.Context, root string, console io.Writer, sys System) error {
	logf := func(format string, args ...any) { fmt.Fprintf(console, prefix+format+"\n", args...) }
	f, err := nodefile.Read(filepath.Join(root, nodefile.Path))
	if err != nil {
		return err
	}
	kube, err := kubeletclient.New(root)
	if err != nil {
		return err
	}
	s := &upgrader.Service{Node: f.Name, Kube: kube, BootID: bootID(root), Stages: stageFile(filepath.Join(root, UpgradeStagePath)),
		Reboot: rebooter(sys), Poll: 10 * time.Second, Log: logf}
	booted, store, err := slotStore(ctx, root, sys)
	switch {
	case errors.Is(err, bootrecord.ErrNoSlots):
		s.Stager, s.Record = noSlots{}, noSlots{}
	case err != nil:
		return err
	default:
		s.Booted, s.Record, s.Stager = booted, store, stager{stage.New(root, store, logf)}
	}
	return s.Run(ctx)
}

// stager is a firstboot/stage.Stager as the upgrade service asks it.
type stager struct{ *stage.Stager }

func (s stager) Stage(ctx context.Context, ask upgradeask.Ask, booted bootslot.Slot) (bootslot.Slot, string, error) {
	res, err := s.Stager.Stage(ctx, ask, booted)
	return res.Slot, res.Image.Version, err
}

// noSlots is the stager and record of a node without root slots.
type noSlots struct{}

func (noSlots) Stage(context.Context, upgradeask.Ask, bootslot.Slot) (bootslot.Slot, string, error) {
	return "", "", errors.New("this node boots from the ISO or by PXE and has no root slot to stage into: re-image it")
}

func (noSlots) Read() (bootslot.Record, error) {
	return bootslot.Record{}, errors.New("this node boots from the ISO or by PXE: it has no boot-state record")
}

// stageFile keeps the upgrade service's last stage as JSON.
type stageFile string

func (p stageFile) Load() (upgrader.Stage, bool, error) {
	var st upgrader.Stage
	b, err := os.ReadFile(string(p))
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		return st, false, fmt.Errorf("the upgrade's last stage %s: %w", UpgradeStagePath, err)
	}
	return st, true, nil
}

func (p stageFile) Save(st upgrader.Stage) error {
	b, _ := json.MarshalIndent(st, "", "  ")
	return atomicfile.WriteFile(string(p), append(b, '\n'), 0o600, nil)
}
