package upgrade

import (
	"cmp"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// Write prints the plan as --dry-run shows it: the target, a line per
// step (order, node, role, what it runs, what it will run, the action),
// then each refusal once with the nodes it holds, each problem and each
// note.
func (p *Plan) Write(w io.Writer) error {
	fmt.Fprintf(w, "target: Kubernetes %s, etcd %s, kiln sha256:%s\n", p.Target.Kubernetes, p.Target.Etcd, short(p.Target.KilnSHA256))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ORDER\tNODE\tROLE\tFROM\tTO\tACTION")
	for _, s := range p.Steps {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", s.Order, s.Node, s.Role, s.From.describe(s.Role), p.to(s.Role), s.action())
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range p.refusals() {
		fmt.Fprintln(w, "refused:", r)
	}
	for _, pr := range p.Problems {
		fmt.Fprintln(w, "problem:", pr)
	}
	for _, n := range p.Notes {
		fmt.Fprintln(w, "note:", n)
	}
	return nil
}

// describe is the FROM column: the kubelet's release, a master's etcd,
// the kiln the node says it runs.
func (r Running) describe(role string) string {
	if r.Kubernetes == "" {
		return "-"
	}
	parts := []string{r.Kubernetes}
	if isMaster(role) {
		parts = append(parts, "etcd "+cmp.Or(r.Etcd, "?"))
	}
	kiln := "kiln " + cmp.Or(r.Kiln, "?")
	if r.KilnSHA256 != "" {
		kiln += " (sha256:" + short(r.KilnSHA256) + ")"
	}
	return strings.Join(append(parts, kiln), ", ")
}

// to is the TO column.
func (p *Plan) to(role string) string {
	parts := []string{p.Target.Kubernetes}
	if isMaster(role) {
		parts = append(parts, "etcd "+p.Target.Etcd)
	}
	return strings.Join(append(parts, "kiln sha256:"+short(p.Target.KilnSHA256)), ", ")
}

// action is the ACTION column: roll, skip and why, or the pre-checks
// that refuse it.
func (s Step) action() string {
	switch {
	case s.Skip != "":
		return "skip: " + s.Skip
	case len(s.Refusals) > 0:
		names := make([]string, len(s.Refusals))
		for i, r := range s.Refusals {
			names[i] = r.Name
		}
		return "refused: " + strings.Join(names, ", ")
	}
	return "roll"
}

// refusals are the distinct refusals, each with the nodes it holds, in
// the order they first appear.
func (p *Plan) refusals() []string {
	type key struct{ name, why string }
	var order []key
	nodes := map[key][]string{}
	for _, s := range p.Steps {
		for _, r := range s.Refusals {
			k := key{r.Name, r.Why}
			if _, ok := nodes[k]; !ok {
				order = append(order, k)
			}
			nodes[k] = append(nodes[k], s.Node)
		}
	}
	out := make([]string, len(order))
	for i, k := range order {
		out[i] = fmt.Sprintf("%s: %s: %s", strings.Join(nodes[k], ", "), k.name, k.why)
	}
	return out
}

func short(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return cmp.Or(digest, "?")
}
