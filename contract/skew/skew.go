// Package skew owns the version skew rules a rolling upgrade holds each
// step to, for kiln upgrade's plan and for the node that boots the new
// image: Kubernetes' (the same minor or the next one) and etcd's (one
// minor at a time).
package skew

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/version"
)

// Kubernetes is nil when a node may go from the Kubernetes release
// from to to in one step, as Kubernetes' version skew policy allows: the
// same minor (any patch) or the next minor; never a skipped minor, never
// down to an earlier minor, never across a major.
func Kubernetes(from, to string) error {
	return oneMinor("Kubernetes", from, to)
}

// Etcd is nil when a member may go from the etcd release from to to
// in one step, as etcd supports it: the same minor or the next one (3.5
// to 3.6, not 3.4 to 3.6), never down to an earlier minor.
func Etcd(from, to string) error {
	return oneMinor("etcd", from, to)
}

// oneMinor is the rule both share; what names the software.
func oneMinor(what, from, to string) error {
	f, err := version.ParseGeneric(from)
	if err != nil {
		return fmt.Errorf("%s release %q: %w", what, from, err)
	}
	t, err := version.ParseGeneric(to)
	if err != nil {
		return fmt.Errorf("%s release %q: %w", what, to, err)
	}
	switch {
	case f.Major() != t.Major():
		return fmt.Errorf("%s %s to %s crosses a major release", what, from, to)
	case t.Minor() < f.Minor():
		return fmt.Errorf("%s %s to %s is a downgrade to an earlier minor release, which %s does not support", what, from, to, what)
	case t.Minor() > f.Minor()+1:
		return fmt.Errorf("%s %s to %s skips %d.%d: go through each minor release in turn (an image of %d.%d first)",
			what, from, to, f.Major(), f.Minor()+1, f.Major(), f.Minor()+1)
	}
	return nil
}
