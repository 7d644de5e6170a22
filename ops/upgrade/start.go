package upgrade

import (
	"errors"
	"fmt"
	"strings"
)

// ErrStagingNotBuilt is Start's answer for a plan with nodes to roll:
// the rollout (Roller) asks a node to stage the image and reboot, and no
// node acts on that ask yet, so it would only wait out its bound.
var ErrStagingNotBuilt = errors.New("staging an image onto a node and rebooting it is not built yet " +
	"(nodes do not act on kiln upgrade's ask): only kiln upgrade --dry-run works; nothing was changed")

// Start is what a rollout of the plan does now: the plan's refusal, nil
// when every node already runs the target image, else
// ErrStagingNotBuilt naming the nodes it would roll.
func (p *Plan) Start() error {
	if err := p.Err(); err != nil {
		return err
	}
	steps := p.ToRoll()
	if len(steps) == 0 {
		return nil
	}
	names := make([]string, len(steps))
	for i, s := range steps {
		names[i] = s.Node
	}
	return fmt.Errorf("%w (it would roll %s, in that order)", ErrStagingNotBuilt, strings.Join(names, ", "))
}
