package role

import (
	"context"
	"fmt"
	"path/filepath"
)

// phase is one named step of a role. A phase with once set is stamped
// on the state partition when it succeeds and skipped on every later
// boot; the others run on every boot. Each is idempotent, so a role cut
// short by a power cut resumes from its first unstamped phase.
type phase struct {
	name  string
	once  bool
	runIf func() bool // nil: always
	run   func(ctx context.Context) error
}

// runPhases runs the role's phases in order, wrapping an error with the
// phase path (master/etcd-join: ...).
func (n *Node) runPhases(ctx context.Context, role string, phases []phase) error {
	for _, p := range phases {
		stamp := filepath.Join(role, p.name)
		if p.once && n.stamped(stamp) {
			continue
		}
		if p.runIf != nil && !p.runIf() {
			continue
		}
		if err := p.run(ctx); err != nil {
			return fmt.Errorf("%s/%s: %w", role, p.name, err)
		}
		if p.once {
			if err := n.stamp(stamp); err != nil {
				return fmt.Errorf("%s/%s: stamping: %w", role, p.name, err)
			}
		}
	}
	return nil
}
