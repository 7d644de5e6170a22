package role

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
)

// A role cut short resumes at its first unstamped one-shot phase; the
// every-boot phases run again; an error names the phase path; a role is
// restored only when every one-shot phase was stamped before. Phase is
// told each phase that starts.
func TestPhasesResumeAfterAnInterruptedBoot(t *testing.T) {
	var ran, told []string
	n := &Node{Root: t.TempDir(), Phase: func(path string) { told = append(told, path) }}
	fail := "join"
	phases := func() []phase {
		step := func(name string) func(context.Context) error {
			return func(context.Context) error {
				ran = append(ran, name)
				if name == fail {
					return errors.New("power cut")
				}
				return nil
			}
		}
		return []phase{
			{Name: "wait", RunIf: func() bool { return !n.units().env.stamped("r/join") }, Run: step("wait")},
			{Name: "join", Once: true, Run: step("join")},
			{Name: "start", Run: step("start")},
			{Name: "label", Once: true, Run: step("label")},
		}
	}
	for i, tc := range []struct {
		fail, want, err string
		how             string
	}{
		{fail: "join", want: "wait join", err: "r/join: power cut", how: "joined"},
		{fail: "label", want: "wait join start label", err: "r/label: power cut", how: "joined"},
		{fail: "", want: "start label", how: "joined"},
		{fail: "", want: "start", how: "restored"},
	} {
		ran, told, fail = nil, nil, tc.fail
		res, err := n.runRole(context.Background(), "r", "joined", phases())
		if got := strings.Join(ran, " "); got != tc.want || res.How != tc.how {
			t.Errorf("boot %d: ran %q (%s), want %q (%s)", i+1, got, res.How, tc.want, tc.how)
		}
		if got, want := strings.Join(told, " "), "r/"+strings.ReplaceAll(tc.want, " ", " r/"); got != want {
			t.Errorf("boot %d: Phase told %q, want %q", i+1, got, want)
		}
		if (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("boot %d: error %v, want %q", i+1, err, tc.err)
		}
	}
}

// A worker stops waiting at once when the cluster refuses its
// certificate or serves one from another CA; other errors are waited out.
func TestRejectedAnswersAreFinal(t *testing.T) {
	for _, tc := range []struct {
		err       error
		final     bool
		wantInMsg string
	}{
		{apierrors.NewUnauthorized("Unauthorized"), true, "the cluster rejects this node's certificate"},
		{fmt.Errorf("Get \"https://x\": %w", x509.UnknownAuthorityError{}), true, "not from this site's CA"},
		{errors.New("connection refused"), false, "connection refused"},
	} {
		got := rejected(tc.err)
		if errors.Is(got, retry.ErrFinal) != tc.final || !strings.Contains(got.Error(), tc.wantInMsg) {
			t.Errorf("%v: got %v (final %v), want final=%v with %q", tc.err, got, errors.Is(got, retry.ErrFinal), tc.final, tc.wantInMsg)
		}
	}
}

// The genesis Node's Ready waits only for its CNI file, so the pod CIDR
// is claimed once the kubelet has started, before the wait for the whole
// /readyz (its RBAC hook took 1-2 min under TCG).
func TestGenesisClaimsItsPodCIDRBeforeTheWholeReadyz(t *testing.T) {
	var names []string
	for _, p := range (&Node{}).genesisPhases() {
		names = append(names, p.Name)
	}
	start, cidr, apiserver := slices.Index(names, "start"), slices.Index(names, "pod-cidr"), slices.Index(names, "apiserver")
	if start < 0 || cidr < 0 || apiserver < 0 || !(start < cidr && cidr < apiserver) {
		t.Errorf("genesis phases %v: want start, then pod-cidr, then apiserver", names)
	}
}

// A new cluster's first boot starts etcd and the apiserver at once and
// its controller-manager and scheduler only in the controllers phase,
// once the apiserver is ready and before the add-ons they act on.
func TestGenesisStartsItsControllersOnceTheAPIServerIsReady(t *testing.T) {
	var names []string
	for _, p := range (&Node{}).genesisPhases() {
		names = append(names, p.Name)
	}
	apiserver, controllers, addOns := slices.Index(names, "apiserver"), slices.Index(names, "controllers"), slices.Index(names, "add-ons")
	if apiserver < 0 || !(apiserver < controllers && controllers < addOns) {
		t.Errorf("genesis phases %v: want apiserver, then controllers, then add-ons", names)
	}

	root, _ := nodeRoot(t, "g1")
	n := &Node{Root: root, Sys: &recorder{}, Wait: time.Second, Log: func(string, ...any) {}}
	n.file, n.cat = mustLoad(t, n)
	pods := func() []string {
		ents, _ := os.ReadDir(filepath.Join(root, manifests.StaticPodDir))
		var out []string
		for _, e := range ents {
			out = append(out, strings.TrimSuffix(e.Name(), ".yaml"))
		}
		return out
	}
	if err := n.units().plane.start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := pods(), []string{"etcd", "kiln-node-dns", "kube-apiserver"}; !slices.Equal(got, want) {
		t.Errorf("static pods after start: %v, want %v", got, want)
	}
	if err := n.units().plane.startControllers(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got, want := pods(), []string{"etcd", "kiln-node-dns", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}; !slices.Equal(got, want) {
		t.Errorf("static pods after controllers: %v, want %v", got, want)
	}
}
