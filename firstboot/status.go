package firstboot

import "github.com/kiln-project/kiln/contract/layout"

// Status is /run/kiln/status.json: what the agent is doing or did.
type Status struct {
	State     string `json:"state"` // running, waiting, done, error
	Source    string `json:"source,omitempty"`
	BootID    string `json:"bootID"`
	FirstBoot bool   `json:"firstBoot"`
	Resumed   bool   `json:"resumed,omitempty"` // a previous first boot died half way
	// ForeignState is the device of a state filesystem left unused:
	// another machine made it, or it has no record and was not adopted.
	ForeignState string      `json:"foreignState,omitempty"`
	Error        string      `json:"error,omitempty"`
	Report       []string    `json:"report,omitempty"`
	Steps        []string    `json:"steps,omitempty"`
	Role         *RoleStatus `json:"role,omitempty"`
	// FellBack is set when this boot's config failed and the node
	// applied the previous config, which the failed one names.
	FellBack *FellBack `json:"fellBack,omitempty"`
}

// FellBack says which config failed, why, and which one the node runs.
type FellBack struct {
	Failed  string `json:"failed"`  // sha512-<hex> of the config that failed
	Reason  string `json:"reason"`  // its failure
	Applied string `json:"applied"` // sha512-<hex> of the previous config, applied instead
}

// RoleStatus is the role step's part of the status (kiln-role.service).
type RoleStatus struct {
	Name     string `json:"name"`
	State    string `json:"state"` // running, done, error
	Restored bool   `json:"restored,omitempty"`
	Error    string `json:"error,omitempty"`
	// Phase is the phase running or failed ("worker/kubelet").
	Phase string `json:"phase,omitempty"`
}

const (
	statusPath    = layout.StatusPath
	firstBootFlag = layout.FirstBootFlag
)

// writeStatus writes status.json and reports the state to kiln serve.
func (a *Agent) writeStatus() {
	writeStatusFile(a.Root, a.status, a.logf)
	phase := "firstboot: " + a.status.State
	if a.status.Error != "" {
		phase += ": " + oneLine(a.status.Error)
	}
	if fb := a.status.FellBack; fb != nil && a.status.State == "done" {
		phase += ": fell back to the previous config " + fb.Applied + " (" + fb.Failed + " failed: " + fb.Reason + ")"
	}
	a.reports.report(phase)
}
