package firstboot

import (
	"encoding/json"
	"path/filepath"

	"github.com/kiln-project/kiln/firstboot/fsutil"
)

// Status is /run/kiln/status.json: what the agent is doing or did.
type Status struct {
	State     string   `json:"state"` // running, waiting, done, error
	Source    string   `json:"source,omitempty"`
	BootID    string   `json:"bootID"`
	FirstBoot bool     `json:"firstBoot"`
	Resumed   bool     `json:"resumed,omitempty"` // a previous first boot died half way
	Error     string   `json:"error,omitempty"`
	Report    []string `json:"report,omitempty"`
	Steps     []string `json:"steps,omitempty"`
}

const (
	statusPath    = "/run/kiln/status.json"
	firstBootFlag = "/run/kiln/first-boot"
)

func (a *Agent) writeStatus() {
	data, _ := json.MarshalIndent(a.status, "", "  ")
	if err := fsutil.WriteFile(filepath.Join(a.Root, statusPath), append(data, '\n'), 0o644, nil); err != nil {
		a.logf("could not write %s: %v", statusPath, err)
	}
}
