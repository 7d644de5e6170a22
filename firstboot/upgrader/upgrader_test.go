package upgrader

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kiln-project/kiln/contract/bootslot"
	"github.com/kiln-project/kiln/contract/upgradeask"
)

var (
	v1 = bootslot.Image{Version: "v1", Digest: "sha256-" + strings.Repeat("1", 64)}
	v2 = bootslot.Image{Version: "v2", Digest: "sha256-" + strings.Repeat("2", 64)}

	ask = upgradeask.Ask{Request: "3f2a9c0d11e4b7a8", KilnSHA256: strings.Repeat("a", 64), Kubernetes: "v1.37.1",
		URL: "http://10.0.0.1:8470", Artifacts: upgradeask.Artifacts{Kernel: strings.Repeat("b", 64), Initrd: strings.Repeat("c", 64), Rootfs: strings.Repeat("d", 64)}}
)

type memStages struct {
	st    Stage
	saved int
}

func (m *memStages) Load() (Stage, bool, error) { return m.st, m.st.Request != "", nil }
func (m *memStages) Save(s Stage) error         { m.st = s; m.saved++; return nil }

type record bootslot.Record

func (r record) Read() (bootslot.Record, error) { return bootslot.Record(r), nil }

type stager struct {
	calls int
	err   error
}

func (f *stager) Stage(_ context.Context, a upgradeask.Ask, booted bootslot.Slot) (bootslot.Slot, string, error) {
	f.calls++
	if f.err != nil {
		return "", "", f.err
	}
	return booted.Other(), "v2", nil
}

// errRebooted ends Run where the machine would go down.
var errRebooted = errors.New("rebooted")

func service(t *testing.T, annotations map[string]string, rec bootslot.Record, booted bootslot.Slot, st *memStages, sg *stager) (*Service, *fake.Clientset, *int) {
	t.Helper()
	kube := fake.NewClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "w1", Annotations: annotations}})
	reboots := 0
	return &Service{Node: "w1", Kube: kube, Booted: booted, BootID: "boot-2", Record: record(rec), Stages: st, Stager: sg,
		Reboot: func(context.Context) error { reboots++; return errRebooted }, Poll: time.Millisecond, Log: t.Logf}, kube, &reboots
}

func annotations(t *testing.T, kube *fake.Clientset) map[string]string {
	t.Helper()
	n, err := kube.CoreV1().Nodes().Get(context.Background(), "w1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n.Annotations
}

func encodedAsk(t *testing.T) map[string]string {
	v, err := ask.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{upgradeask.AskAnnotation: v}
}

func TestAnAskIsStagedAnsweredAndRebooted(t *testing.T) {
	st, sg := &memStages{}, &stager{}
	ann := encodedAsk(t)
	ann[upgradeask.RolledBackAnnotation] = `{"request":"0123456789abcdef","from":"b","to":"a","reason":"an earlier rollback"}`
	s, kube, reboots := service(t, ann, bootslot.Record{Active: bootslot.A, SlotA: v1}, bootslot.A, st, sg)
	if err := s.Run(context.Background()); !errors.Is(err, errRebooted) {
		t.Fatalf("Run: %v", err)
	}
	if sg.calls != 1 || *reboots != 1 {
		t.Errorf("%d stages, %d reboots", sg.calls, *reboots)
	}
	if got := annotations(t, kube)[upgradeask.StagedAnnotation]; got != ask.Request {
		t.Errorf("staged answer %q", got)
	}
	if got, ok := annotations(t, kube)[upgradeask.RolledBackAnnotation]; ok {
		t.Errorf("an earlier request's rollback is still on the Node: %q", got)
	}
	if want := (Stage{Request: ask.Request, Slot: bootslot.B, Version: "v2", BootID: "boot-2"}); st.st != want {
		t.Errorf("saved %+v, want %+v", st.st, want)
	}
}

func TestAStageThatFailsIsAnsweredOnce(t *testing.T) {
	st, sg := &memStages{}, &stager{err: errors.New("rootfs.squashfs from http://10.0.0.1:8470/rootfs.squashfs: sha256 mismatch")}
	s, kube, reboots := service(t, encodedAsk(t), bootslot.Record{Active: bootslot.A, SlotA: v1}, bootslot.A, st, sg)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := s.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v", err)
	}
	if sg.calls != 1 || *reboots != 0 {
		t.Errorf("%d stages, %d reboots: the failed request was staged again or rebooted", sg.calls, *reboots)
	}
	f, err := upgradeask.DecodeFailed(annotations(t, kube)[upgradeask.FailedAnnotation])
	if err != nil || f.Request != ask.Request || !strings.Contains(f.Reason, "sha256 mismatch") {
		t.Errorf("failed answer %+v, %v", f, err)
	}
	if !st.st.Answered || st.st.Request != ask.Request {
		t.Errorf("saved %+v", st.st)
	}
}

func TestTheBootAfterAStage(t *testing.T) {
	staged := Stage{Request: ask.Request, Slot: bootslot.B, Version: "v2", BootID: "boot-1"}
	for _, tc := range []struct {
		name     string
		rec      bootslot.Record
		booted   bootslot.Slot
		answered bool
		want     string // the annotation written, "" none
		contains string
	}{
		{"marked good: nothing to say", bootslot.Record{Active: bootslot.B, SlotA: v1, SlotB: v2}, bootslot.B, true, "", ""},
		{"the trying boot: the role judges it", bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseStaged, SlotA: v1, SlotB: v2}, bootslot.B, false, "", ""},
		{"rolled back: said with the request", bootslot.Record{Active: bootslot.A, SlotA: v1, SlotB: v2,
			LastRollback: bootslot.Rollback{From: bootslot.B, To: bootslot.A, Reason: "health gate not passed in 10m0s: ready: not Ready"}},
			bootslot.A, true, upgradeask.RolledBackAnnotation, `"reason":"health gate not passed in 10m0s: ready: not Ready"`},
		{"the stage never finished: failed", bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseWriting, SlotA: v1, SlotB: v2},
			bootslot.A, true, upgradeask.FailedAnnotation, "did not finish before the node rebooted (record: active a, writing b)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &memStages{st: staged}
			sg := &stager{}
			// The ask that staged it is still on the Node: it is not staged again.
			s, kube, reboots := service(t, encodedAsk(t), tc.rec, tc.booted, st, sg)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
			defer cancel()
			if err := s.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Run: %v", err)
			}
			if sg.calls != 0 || *reboots != 0 {
				t.Errorf("%d stages, %d reboots", sg.calls, *reboots)
			}
			if st.st.Answered != tc.answered {
				t.Errorf("answered %v, want %v", st.st.Answered, tc.answered)
			}
			ann := annotations(t, kube)
			for _, a := range []string{upgradeask.RolledBackAnnotation, upgradeask.FailedAnnotation, upgradeask.StagedAnnotation} {
				if v, ok := ann[a]; ok != (a == tc.want) || ok && !strings.Contains(v, tc.contains) {
					t.Errorf("%s = %q (set %v), want set %v containing %q", a, v, ok, a == tc.want, tc.contains)
				}
			}
		})
	}
}

func TestAStageWhoseRebootDidNotHappenRebootsAgain(t *testing.T) {
	st := &memStages{st: Stage{Request: ask.Request, Slot: bootslot.B, Version: "v2", BootID: "boot-2"}}
	sg := &stager{}
	rec := bootslot.Record{Active: bootslot.A, Staged: bootslot.B, Phase: bootslot.PhaseStaged, Tries: 1, SlotA: v1, SlotB: v2}
	s, kube, reboots := service(t, encodedAsk(t), rec, bootslot.A, st, sg)
	if err := s.Run(context.Background()); !errors.Is(err, errRebooted) {
		t.Fatalf("Run: %v", err)
	}
	if sg.calls != 0 || *reboots != 1 || annotations(t, kube)[upgradeask.StagedAnnotation] != ask.Request {
		t.Errorf("%d stages, %d reboots, staged %q", sg.calls, *reboots, annotations(t, kube)[upgradeask.StagedAnnotation])
	}
}
