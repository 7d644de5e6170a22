package role

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kiln-project/kiln/nodefile"
)

// A worker's kubelet registers its Node on the boot that joins; on a
// restored boot (every one-shot phase stamped) it is told not to.
func TestRestoredKubeletSkipsRegistration(t *testing.T) {
	for _, tc := range []struct {
		name     string
		stamps   []string
		wantSkip bool
	}{
		{name: "first boot", wantSkip: false},
		{name: "join half done", stamps: []string{"worker/request-labels"}, wantSkip: false},
		{name: "restored", stamps: []string{"worker/request-labels", "worker/joined"}, wantSkip: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "w1")
			for _, s := range tc.stamps {
				p := filepath.Join(root, nodefile.StampDir, s)
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte("2026-11-29T00:00:00Z\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			n := &Node{Root: root, Sys: &recorder{}, Wait: time.Second, Log: func(string, ...any) {}}
			if _, err := n.Run(context.Background()); err == nil {
				t.Fatal("a worker with no cluster finished its role")
			}
			env, err := os.ReadFile(filepath.Join(root, kubeletEnvPath))
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Contains(string(env), " --register-node=false"); got != tc.wantSkip {
				t.Errorf("--register-node=false in kubelet.env: %v, want %v (%q)", got, tc.wantSkip, env)
			}
		})
	}
}

// A kubelet that skips its registration gets it back, once, when the
// apiserver says the Node is gone; other failures change nothing.
func TestRegisterIfGone(t *testing.T) {
	notFound := apierrors.NewNotFound(schema.GroupResource{Resource: "nodes"}, "w1")
	for _, tc := range []struct {
		name        string
		skip        bool
		errs        []error
		wantRestart int
		wantSkip    bool
	}{
		{name: "registering kubelet, Node missing", skip: false, errs: []error{notFound}, wantRestart: 0},
		{name: "not ready yet", skip: true, errs: []error{errors.New("node w1: Ready=Unknown")}, wantRestart: 0, wantSkip: true},
		{name: "apiserver not serving", skip: true, errs: []error{errors.New("dial tcp 10.0.2.52:6443: connect: connection refused")}, wantRestart: 0, wantSkip: true},
		{name: "Node missing", skip: true, errs: []error{notFound}, wantRestart: 1},
		{name: "Node missing on every poll", skip: true, errs: []error{notFound, notFound, notFound}, wantRestart: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, _ := nodeRoot(t, "w1")
			sys := &recorder{}
			n := &Node{Root: root, Sys: sys, Log: func(string, ...any) {}, skipRegistration: tc.skip}
			n.file, n.cat = mustLoad(t, n)
			for _, err := range tc.errs {
				n.registerIfGone(context.Background(), err)
			}
			restarts := 0
			for _, c := range sys.calls {
				if c == "systemctl restart --no-block kubelet.service" {
					restarts++
				}
			}
			if restarts != tc.wantRestart || len(sys.calls) != tc.wantRestart {
				t.Errorf("commands %v, want %d kubelet restart(s)", sys.calls, tc.wantRestart)
			}
			if n.skipRegistration != tc.wantSkip {
				t.Errorf("skipRegistration = %v, want %v", n.skipRegistration, tc.wantSkip)
			}
			if n.reregistered != (tc.wantRestart > 0) {
				t.Errorf("reregistered = %v after %d restart(s): the labels would not be applied again", n.reregistered, tc.wantRestart)
			}
			env, err := os.ReadFile(filepath.Join(root, kubeletEnvPath))
			switch {
			case tc.wantRestart == 0 && err == nil:
				t.Errorf("kubelet.env written: %q", env)
			case tc.wantRestart > 0 && (err != nil || strings.Contains(string(env), "--register-node")):
				t.Errorf("kubelet.env after the restart: %q (%v)", env, err)
			}
		})
	}
}
