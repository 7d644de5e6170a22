// Package timeline finds the steps of a boot in its timed console lines
// (the agent's and the roles' lines, first match per step) and draws the
// boots of a benchmark as an SVG: one row of bars per boot, a bar from
// the step before to the step's own line.
package timeline

import (
	"cmp"
	"regexp"
	"slices"
	"time"

	"github.com/kiln-project/kiln/qemu-tests/console"
	"github.com/kiln-project/kiln/qemu-tests/vm"
)

// Step is a point of a boot the console shows.
type Step struct {
	Name string
	Line *regexp.Regexp
	// Last ends the step at the last matching line instead of the first:
	// for a step printed once per item (an image imported).
	Last bool
}

// Steps are what the kernel, the agent (kiln-firstboot.service), the
// containerd seed (kiln-seed.service), the image import
// (kiln-images.service) and the roles (kiln-role.service)
// print, roughly in the order a first boot prints them. A boot prints
// some of them: a plain boot has no role, a restored one imports nothing,
// only a joining master waits for the cluster and its etcd member.
func Steps() []Step {
	return []Step{
		{Name: "kernel started", Line: regexp.MustCompile(`Linux version \d`)},
		{Name: "agent started", Line: regexp.MustCompile(`kiln-firstboot: start boot_id=`)},
		{Name: "config found", Line: regexp.MustCompile(`kiln-firstboot: config from \S+`)},
		{Name: "state partition", Line: regexp.MustCompile(`kiln-firstboot: state partition (created on|\S+ mounted)`)},
		{Name: "config applied", Line: regexp.MustCompile(`kiln-firstboot: config applied`)},
		{Name: "agent done", Line: regexp.MustCompile(`kiln-firstboot: done source=`)},
		// kiln-seed.service, before containerd: the image's containerd
		// store planted (first boot) or found planted.
		{Name: "images seeded", Line: regexp.MustCompile(`kiln-seed: containerd's store (planted from|is this image's seed)`)},
		{Name: "cluster answered", Line: regexp.MustCompile(`kiln-firstboot: the cluster: after `)},
		{Name: "boot images in", Line: regexp.MustCompile(`kiln-firstboot: the node's images \(kiln-images\.service\): after `)},
		// The role queued the kubelet's start; the kubelet runs once
		// kiln-images.service has the static pods' images in.
		{Name: "kubelet started", Line: regexp.MustCompile(`kiln-firstboot: kubelet started`)},
		// The CNI file a Node's Ready waits for: written before the
		// kubelet from the recorded pod CIDR on a later boot, once the
		// genesis node's Node has claimed one on its first.
		{Name: "CNI written", Line: regexp.MustCompile(`kiln-firstboot: CNI configuration \S+ written for pod CIDR `)},
		{Name: "etcd up", Line: regexp.MustCompile(`kiln-firstboot: etcd member [0-9a-f]+ started: after `)},
		{Name: "etcd promoted", Line: regexp.MustCompile(`kiln-firstboot: etcd member [0-9a-f]+ promoted: after `)},
		// A control plane that existed before this boot starts its
		// apiserver once its etcd member reads through quorum.
		{Name: "etcd quorum", Line: regexp.MustCompile(`kiln-firstboot: etcd quorum on \S+: after `)},
		// Then in its turn: at once on the etcd leader's master, on the
		// others once another master's apiserver is ready (or its bound
		// passed).
		{Name: "apiserver's turn", Line: regexp.MustCompile(`kiln-firstboot: (the apiserver's turn on \S+ .*: after |starting kube-apiserver anyway: the apiserver's turn)`)},
		{Name: "all images imported", Line: regexp.MustCompile(`imported \S+ \(sha256:[0-9a-f]+\) in `), Last: true},
		{Name: "apiserver healthy", Line: regexp.MustCompile(`kiln-firstboot: apiserver healthy on \S+: after `)},
		{Name: "add-ons applied", Line: regexp.MustCompile(`kiln-firstboot: add-ons applied: `)},
		{Name: "labelled", Line: regexp.MustCompile(`kiln-firstboot: node \S+ registered and labelled: after `)},
		{Name: "Ready", Line: regexp.MustCompile(`kiln-firstboot: node \S+ Ready: after `)},
		{Name: "labels requested", Line: regexp.MustCompile(`kiln-firstboot: labels requested on node \S+: after `)},
		{Name: "validated", Line: regexp.MustCompile(`kiln-firstboot: validated: `)},
		{Name: "role done", Line: regexp.MustCompile(`kiln-firstboot: done role=`)},
	}
}

// FloorSteps are what a plain boot (the agent masked) shows: the kernel
// and the serial getty's prompt, which ends it.
func FloorSteps() []Step {
	return []Step{
		{Name: "kernel started", Line: regexp.MustCompile(`Linux version \d`)},
		{Name: "login prompt", Line: vm.LoginPrompt},
	}
}

// Mark is when a boot reached a step, since power-on.
type Mark struct {
	Step string
	At   time.Duration
}

// Extract finds each step's line and returns the marks in time order; a
// step no line matches is left out.
func Extract(steps []Step, lines []console.Line) []Mark {
	var marks []Mark
	for _, s := range steps {
		if at, ok := s.find(lines); ok {
			marks = append(marks, Mark{Step: s.Name, At: at})
		}
	}
	slices.SortStableFunc(marks, func(a, b Mark) int { return cmp.Compare(a.At, b.At) })
	return marks
}

func (s Step) find(lines []console.Line) (time.Duration, bool) {
	var (
		at    time.Duration
		found bool
	)
	for _, l := range lines {
		if !s.Line.MatchString(l.Text) {
			continue
		}
		at, found = l.At, true
		if !s.Last {
			break
		}
	}
	return at, found
}
