// Package rtexec owns rt-exec, the small program that starts etcd under
// the real-time round-robin policy on machines whose site asks for the
// slow timing profile: its source (helper/main.go, the standard library
// only), which the image builder compiles and bakes in at Path, and the
// command line a pod runs a program through it with.
package rtexec

import (
	_ "embed"
	"strconv"
)

// Source is rt-exec's main package.
//
//go:embed helper/main.go
var Source string

// Path is where a node image carries rt-exec; a pod that runs a program
// through it mounts it at the same path.
const Path = "/usr/lib/kiln/rt-exec"

// Priority is the SCHED_RR priority etcd runs at: the lowest real-time
// one, above every normal task. The kernel keeps 5% of each second for
// normal tasks (sched_rt_runtime_us), so a busy etcd cannot take the
// whole machine.
const Priority = 1

// Command is argv run through rt-exec at Priority.
func Command(argv ...string) []string {
	return append([]string{Path, "-priority", strconv.Itoa(Priority), "--"}, argv...)
}
