package qemutests

import (
	"context"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// surveyHold is the cluster scenario's power-on-together case: a master
// powered on beside the genesis node whose etcd port times out (every
// packet to it dropped on the segment) until the genesis node's console
// says it waits to rule that master out. Then the port is let through,
// and the genesis node must bootstrap: the master refuses, or answers as
// a master waiting to join.
type surveyHold struct {
	master, genesis string
	mu              sync.Mutex
	waitLine        string
	err             error
	genesisVM       *clusterVM
	done            chan struct{}
}

// holdSurveyBound bounds the wait for the genesis node's waiting line:
// its agent starts under a minute after power-on, and its first probe
// of the held port times out 8 s later.
const holdSurveyBound = 10 * time.Minute

// holdMasterEtcdPort holds the etcd port of the topology's first master
// beside the genesis node, when one is powered on with it; nil
// otherwise (check then does nothing).
func holdMasterEtcdPort(t *testing.T, r *clusterRun) *surveyHold {
	t.Helper()
	genesis, master := r.tp.Machines[0], ""
	var addr netip.Addr
	for _, m := range r.tp.Machines[1:] {
		if m.Role == "master" && m.After == "" {
			master, addr = m.Name, netip.MustParseAddr(m.IP())
			break
		}
	}
	if master == "" || genesis.Role != "genesis" {
		return nil
	}
	lift, err := r.seg.DropTCP(addr, 2379)
	if err != nil {
		t.Fatal(err)
	}
	h := &surveyHold{master: master, genesis: genesis.Name, done: make(chan struct{})}
	t.Logf("survey hold: every packet to %s's etcd port %s:2379 is dropped until %s says it waits to rule %s out", master, addr, genesis.Name, master)
	r.afterPowerOn = append(r.afterPowerOn, func() {
		g := r.nodes[0]
		h.genesisVM = g
		go func() {
			defer close(h.done)
			re := regexp.MustCompile(`genesis: waiting to rule out ` + regexp.QuoteMeta(master) + ` \(.*not bootstrapping while a cluster may exist`)
			line, err := g.WaitWholeLine(context.Background(), re, holdSurveyBound)
			if lerr := lift(); lerr != nil && err == nil {
				err = lerr
			}
			h.mu.Lock()
			defer h.mu.Unlock()
			h.waitLine, h.err = line, err
		}()
	})
	return h
}

// check fails the test unless the genesis node said it waited for the
// held master, and then bootstrapped having ruled it out.
func (h *surveyHold) check(t *testing.T) {
	t.Helper()
	if h == nil {
		return
	}
	<-h.done
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		t.Fatalf("survey hold: %s never said it waits to rule %s out while %s's etcd port timed out: %v", h.genesis, h.master, h.master, h.err)
	}
	t.Logf("survey hold: %s said %q; the port was let through then", h.genesis, strings.TrimSpace(h.waitLine))
	var verdict []string
	for _, l := range h.genesisVM.Console() {
		if strings.Contains(l.Text, "bootstrapping is safe") || strings.Contains(l.Text, "answers as waiting to join") {
			verdict = append(verdict, strings.TrimSpace(l.Text))
		}
	}
	if !slices.ContainsFunc(verdict, func(l string) bool { return strings.Contains(l, "bootstrapping is safe") }) {
		t.Fatalf("survey hold: %s's console has no survey verdict after the hold (%q)", h.genesis, verdict)
	}
	t.Logf("survey hold: %s's verdict: %s", h.genesis, strings.Join(verdict, " | "))
}
