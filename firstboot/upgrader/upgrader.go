// Package upgrader is a disk node's upgrade service
// (kiln-upgrade.service): it watches its own Node for kiln upgrade's ask
// (contract/upgradeask), stages the asked build into the slot it does not
// run, answers on the Node that it staged it (or why it could not) and
// reboots; on the boots after, it answers how that stage ended when it
// rolled back. It acts on a request once.
package upgrader

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/internal/retry"
)

// Stage is one stage this node made: the request it answers, the slot
// and image it staged, and the boot that staged it.
type Stage struct {
	Request string        `json:"request"`
	Slot    bootslot.Slot `json:"slot"`
	Version string        `json:"version"`
	BootID  string        `json:"bootID"`
	// Answered: the stage's end (rolled back, or never finished) is on
	// the Node, or it was marked good: nothing more to say about it.
	Answered bool `json:"answered,omitempty"`
}

// Stages keeps the last Stage on the state partition.
type Stages interface {
	Load() (Stage, bool, error)
	Save(Stage) error
}

// Stager writes ask's build into the slot booted does not run and marks
// it staged (firstboot/stage).
type Stager interface {
	Stage(ctx context.Context, ask upgradeask.Ask, booted bootslot.Slot) (slot bootslot.Slot, version string, err error)
}

// Record reads the boot-state record (bootrecord.Store).
type Record interface {
	Read() (bootslot.Record, error)
}

// Service is the upgrade service of one node.
type Service struct {
	Node   string
	Kube   kubernetes.Interface // as the node's kubelet
	Booted bootslot.Slot
	BootID string
	Record Record
	Stages Stages
	Stager Stager
	Reboot func(ctx context.Context) error
	// Poll is how often the Node is read for an ask.
	Poll time.Duration
	Log  retry.Logf
}

// Run answers the last stage's end, then acts on asks until ctx ends or
// the node reboots onto a stage.
func (s *Service) Run(ctx context.Context) error {
	last, _, err := s.Stages.Load()
	if err != nil {
		return err
	}
	for {
		if last, err = s.settle(ctx, last); err != nil {
			s.Log("upgrade: %v", err)
		}
		if last.Request != "" && !last.Answered && last.BootID == s.BootID {
			return s.reboot(ctx, last) // staged this boot: the reboot did not happen
		}
		ask, ok, err := s.ask(ctx)
		switch {
		case err != nil:
			s.Log("upgrade: %v", err)
		case ok && ask.Request != last.Request:
			next, err := s.stage(ctx, ask)
			if err != nil {
				return err
			}
			if next.Request != "" {
				last = next
				return s.reboot(ctx, last)
			}
			last = Stage{Request: ask.Request, Answered: true, BootID: s.BootID}
			if err := s.Stages.Save(last); err != nil { // so it is not staged again
				s.Log("upgrade: %v", err)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(s.Poll):
		}
	}
}

// settle answers how the last stage ended, once, on a boot after the one
// that staged it: marked good (nothing to say), still being tried (later),
// rolled back or never finished (said on the Node).
func (s *Service) settle(ctx context.Context, last Stage) (Stage, error) {
	if last.Request == "" || last.Answered || last.BootID == s.BootID {
		return last, nil
	}
	r, err := s.Record.Read()
	if err != nil {
		return last, err
	}
	var answer map[string]any
	switch {
	case r.Active == last.Slot:
		s.Log("upgrade: request %s: slot %s (%s) was marked good", last.Request, last.Slot, last.Version)
	case r.Phase == bootslot.PhaseStaged && r.Staged == last.Slot && r.FailReason == "" && r.Tries > 0:
		return last, nil // GRUB has not tried it yet: a reboot is still to come
	case r.Phase == bootslot.PhaseStaged && r.Staged == last.Slot && s.Booted == last.Slot:
		return last, nil // this is the trying boot: the role judges it
	case r.LastRollback.From == last.Slot:
		rb := upgradeask.RolledBack{Request: last.Request, From: r.LastRollback.From, To: r.LastRollback.To, Reason: r.LastRollback.Reason}
		v, err := rb.Encode()
		if err != nil {
			return last, err
		}
		answer = map[string]any{upgradeask.RolledBackAnnotation: v}
		s.Log("upgrade: request %s: %s", last.Request, rb.Error())
	default:
		f := upgradeask.Failed{Request: last.Request, Reason: bootslot.Reason(fmt.Sprintf("the stage of slot %s did not finish before the node rebooted (record: %s)", last.Slot, r.State()))}
		v, err := f.Encode()
		if err != nil {
			return last, err
		}
		answer = map[string]any{upgradeask.FailedAnnotation: v}
		s.Log("upgrade: request %s: %s", last.Request, f.Reason)
	}
	if answer != nil {
		if err := s.annotate(ctx, answer); err != nil {
			return last, err
		}
	}
	last.Answered = true
	return last, s.Stages.Save(last)
}

// ask reads the ask on the Node, if any.
func (s *Service) ask(ctx context.Context) (upgradeask.Ask, bool, error) {
	n, err := s.Kube.CoreV1().Nodes().Get(ctx, s.Node, metav1.GetOptions{})
	if err != nil {
		return upgradeask.Ask{}, false, fmt.Errorf("reading Node %s for an ask: %w", s.Node, err)
	}
	v, ok := n.Annotations[upgradeask.AskAnnotation]
	if !ok {
		return upgradeask.Ask{}, false, nil
	}
	a, err := upgradeask.DecodeAsk(v)
	if err != nil {
		return upgradeask.Ask{}, false, fmt.Errorf("Node %s: %w", s.Node, err)
	}
	return a, true, nil
}

// stage stages ask's build. On success it returns the Stage, saved and
// answered on the Node; on a failure to stage it answers why and returns
// the zero Stage. Its error is one it could not answer.
func (s *Service) stage(ctx context.Context, ask upgradeask.Ask) (Stage, error) {
	s.Log("upgrade: request %s: staging kiln sha256:%.12s, Kubernetes %s from %s", ask.Request, ask.KilnSHA256, ask.Kubernetes, ask.URL)
	start := time.Now()
	slot, version, err := s.Stager.Stage(ctx, ask, s.Booted)
	if err != nil {
		if ctx.Err() != nil {
			return Stage{}, err
		}
		f := upgradeask.Failed{Request: ask.Request, Reason: bootslot.Reason(retry.OneLine(err))}
		s.Log("upgrade: request %s: could not stage: %v", ask.Request, err)
		v, eerr := f.Encode()
		if eerr != nil {
			return Stage{}, eerr
		}
		return Stage{}, s.annotate(ctx, map[string]any{upgradeask.FailedAnnotation: v})
	}
	st := Stage{Request: ask.Request, Slot: slot, Version: version, BootID: s.BootID}
	if err := s.Stages.Save(st); err != nil {
		return Stage{}, err
	}
	s.Log("upgrade: request %s: staged %s on slot %s in %s", ask.Request, version, slot, time.Since(start).Round(time.Second))
	return st, nil
}

// reboot says the stage on the Node and reboots onto it.
func (s *Service) reboot(ctx context.Context, st Stage) error {
	v, err := upgradeask.EncodeStaged(st.Request)
	if err != nil {
		return err
	}
	// An earlier request's failure or rollback no longer describes the
	// node: a merge patch's null removes it.
	if err := s.annotate(ctx, map[string]any{upgradeask.StagedAnnotation: v, upgradeask.FailedAnnotation: nil, upgradeask.RolledBackAnnotation: nil}); err != nil {
		return err
	}
	s.Log("upgrade: request %s: rebooting to try slot %s once", st.Request, st.Slot)
	return s.Reboot(ctx)
}

// publishBound bounds one answer on the Node.
const publishBound = 5 * time.Minute

// annotate merges ann into the Node's annotations.
func (s *Service) annotate(ctx context.Context, ann map[string]any) error {
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	return retry.Wait(ctx, "the upgrade's answer on Node "+s.Node, publishBound, s.Log, func(ctx context.Context) error {
		_, err := s.Kube.CoreV1().Nodes().Patch(ctx, s.Node, types.MergePatchType, patch, metav1.PatchOptions{})
		if apierrors.IsForbidden(err) {
			return retry.Final(err)
		}
		return err
	})
}
