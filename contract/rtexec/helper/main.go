// Command rt-exec runs a program under the real-time round-robin policy
// (SCHED_RR), which every thread the program starts inherits. kiln's etcd
// pod runs etcd through it under the slow timing profile, so that on a
// loaded machine etcd's heartbeats, peer acknowledgements and quorum reads
// never queue behind the kubelet, containerd or the apiserver.
//
//	rt-exec [-priority N] -- PROGRAM [ARGS...]
//
// When the policy cannot be set (no CAP_SYS_NICE, a kernel that refuses
// real-time tasks in the container's cgroup) it says so on stderr and runs
// the program at its normal priority: a node whose etcd cannot be
// prioritised still has an etcd. It is built by kiln's image builder from
// this file alone (the standard library only) and baked into the image.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"
	"unsafe"
)

const schedRR = 2 // SCHED_RR in <sched.h>

// The policy is set on the calling thread and kept across execve, so the
// thread that sets it must be the one that calls exec.
func init() { runtime.LockOSThread() }

func main() {
	prio, argv, err := parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "rt-exec: %v\nusage: rt-exec [-priority N] -- PROGRAM [ARGS...]\n", err)
		os.Exit(2)
	}
	if err := setRoundRobin(prio); err != nil {
		fmt.Fprintf(os.Stderr, "rt-exec: %s runs at its normal priority: SCHED_RR priority %d: %v\n", argv[0], prio, err)
	} else {
		fmt.Fprintf(os.Stderr, "rt-exec: %s runs under SCHED_RR at priority %d\n", argv[0], prio)
	}
	path, err := exec.LookPath(argv[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "rt-exec: %v\n", err)
		os.Exit(127)
	}
	err = syscall.Exec(path, argv, os.Environ())
	fmt.Fprintf(os.Stderr, "rt-exec: exec %s: %v\n", path, err)
	os.Exit(126)
}

// parse reads [-priority N] -- PROGRAM [ARGS...].
func parse(args []string) (int, []string, error) {
	prio := 1
	for len(args) > 0 && args[0] != "--" {
		if args[0] != "-priority" || len(args) < 2 {
			return 0, nil, fmt.Errorf("unknown argument %q", args[0])
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return 0, nil, fmt.Errorf("-priority %q: not a number", args[1])
		}
		prio, args = n, args[2:]
	}
	if len(args) < 2 {
		return 0, nil, fmt.Errorf("no program after --")
	}
	return prio, args[1:], nil
}

func setRoundRobin(prio int) error {
	param := struct{ priority int32 }{int32(prio)}
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETSCHEDULER, 0, schedRR, uintptr(unsafe.Pointer(&param)))
	if errno != 0 {
		return errno
	}
	return nil
}
