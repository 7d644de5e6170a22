package manifests

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/rtexec"
)

// Every name the site accepts has a profile, and every profile keeps the
// rules its components enforce or recommend.
func TestTimingProfilesAreSound(t *testing.T) {
	if len(timings) != len(nodefile.Timings) {
		t.Errorf("%d profiles for %d site timing names", len(timings), len(nodefile.Timings))
	}
	for _, name := range nodefile.Timings {
		tm, ok := TimingProfile(name)
		if !ok {
			t.Errorf("site timing %q has no profile", name)
			continue
		}
		for _, c := range []struct {
			rule string
			ok   bool
		}{
			// etcd tuning guide: the election timeout at least ten heartbeats.
			{"etcd election >= 10 heartbeats", tm.EtcdElection >= 10*tm.EtcdHeartbeat},
			// etcd refuses an election timeout above 50 s.
			{"etcd election <= 50s", tm.EtcdElection <= 50*time.Second},
			{"etcd timers in whole milliseconds", tm.EtcdHeartbeat%time.Millisecond == 0 && tm.EtcdElection%time.Millisecond == 0},
			// client-go's leader election: lease > renew deadline > 1.2 × retry period.
			{"lease > renew deadline", tm.LeaseDuration > tm.RenewDeadline},
			{"renew deadline > 1.2 retry periods", tm.RenewDeadline*10 > tm.RetryPeriod*12},
			{"leader-election timers in whole seconds", tm.LeaseDuration%time.Second == 0 && tm.RenewDeadline%time.Second == 0 && tm.RetryPeriod%time.Second == 0},
			// A Node is marked not ready only once its lease has run out.
			{"node grace > node lease", tm.NodeGrace > tm.NodeLease},
			{"node lease in whole seconds", tm.NodeLease%time.Second == 0 && tm.NodeGrace%time.Second == 0},
			// A start may take longer than the liveness probe alone allowed (90 s).
			{"startup > 90s", tm.Startup > 90*time.Second},
			// The validation pod's DNS check runs in whole seconds (the
			// check's --retry) and at least the minute it always had.
			{"DNS check >= 1m in whole seconds", tm.DNSCheck >= time.Minute && tm.DNSCheck%time.Second == 0},
		} {
			if !c.ok {
				t.Errorf("%s: %s does not hold: %+v", name, c.rule, tm)
			}
		}
	}
}

// The slow profile is the more patient one in every bound that can
// give up on a slow start.
func TestSlowTimingIsMorePatient(t *testing.T) {
	d, s := TimingFor(nodefile.TimingDefault), TimingFor(nodefile.TimingSlow)
	for _, c := range []struct {
		name          string
		fast, patient time.Duration
	}{
		{"startup", d.Startup, s.Startup},
		{"liveness", d.Liveness, s.Liveness},
		{"etcd check", d.EtcdCheck, s.EtcdCheck},
		{"DNS check", d.DNSCheck, s.DNSCheck},
		{"leader's renew deadline", d.RenewDeadline, s.RenewDeadline},
		{"node grace", d.NodeGrace, s.NodeGrace},
	} {
		if c.patient <= c.fast {
			t.Errorf("%s: slow %s, default %s", c.name, c.patient, c.fast)
		}
	}
}

func flagsOf(pod *corev1.Pod) map[string]string {
	out := map[string]string{}
	for _, a := range pod.Spec.Containers[0].Command[1:] {
		k, v, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		out[k] = v
	}
	return out
}

// The profile named in the node file reaches etcd's raft timers, the
// leader election of the controller-manager and the scheduler, and the
// apiserver's own etcd checks.
func TestTimingFlags(t *testing.T) {
	election := func(lease, renew, retry string) map[string]string {
		return map[string]string{"leader-elect": "true", "leader-elect-lease-duration": lease,
			"leader-elect-renew-deadline": renew, "leader-elect-retry-period": retry}
	}
	etcdCheck := func(d string) map[string]string {
		return map[string]string{"etcd-healthcheck-timeout": d, "etcd-readycheck-timeout": d}
	}
	for _, tc := range []struct {
		timing, role string
		etcd         map[string]string
		election     map[string]string
		apiserver    map[string]string
		nodeGrace    string
		nodeLease    int32
	}{
		{"", "genesis", map[string]string{"heartbeat-interval": "100", "election-timeout": "1000"}, election("15s", "10s", "2s"), etcdCheck("2s"), "50s", 40},
		{"default", "genesis", map[string]string{"heartbeat-interval": "100", "election-timeout": "1000"}, election("15s", "10s", "2s"), etcdCheck("2s"), "50s", 40},
		{"slow", "genesis", map[string]string{"heartbeat-interval": "500", "election-timeout": "5000"}, election("120s", "100s", "20s"), etcdCheck("10s"), "180s", 120},
		// A joining master renders the same etcd timers as genesis: raft
		// needs them to match across members.
		{"slow", "master", map[string]string{"heartbeat-interval": "500", "election-timeout": "5000"}, election("120s", "100s", "20s"), etcdCheck("10s"), "180s", 120},
	} {
		n := node("m1", tc.role, "192.168.10.11")
		n.Cluster.Timing = tc.timing
		p := GenesisParams(n, testImages)
		if got := KubeletConfig(p).NodeLeaseDurationSeconds; got != tc.nodeLease {
			t.Errorf("timing %q, %s: kubelet nodeLeaseDurationSeconds %d, want %d", tc.timing, tc.role, got, tc.nodeLease)
		}
		got := etcdSettings(t, p)
		for k, v := range tc.etcd {
			if got[k] != v {
				t.Errorf("timing %q, %s: etcd configuration %s: %q, want %q", tc.timing, tc.role, k, got[k], v)
			}
		}
		cm := maps.Clone(tc.election)
		cm["node-monitor-grace-period"] = tc.nodeGrace
		for _, c := range []struct {
			pod  *corev1.Pod
			want map[string]string
		}{
			{ControllerManager(p), cm},
			{Scheduler(p), tc.election},
			{APIServer(p), tc.apiserver},
		} {
			got := flagsOf(c.pod)
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("timing %q, %s: %s: --%s=%q, want %q", tc.timing, tc.role, c.pod.Name, k, got[k], v)
				}
			}
		}
	}
}

// etcdSettings are the top-level settings of the node's etcd
// configuration file, as strings.
func etcdSettings(t *testing.T, p Params) map[string]string {
	t.Helper()
	data, err := EtcdConfig(p)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := yaml.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = fmt.Sprint(v)
	}
	return out
}

// Every static pod with a liveness probe has a startup probe on the same
// endpoint that allows the profile's startup time; the liveness probe
// needs no initial delay, since it counts only after startup succeeded.
func TestStartupProbes(t *testing.T) {
	endpoints := map[string]string{
		"etcd":                    "HTTP 127.0.0.1:2381/health?serializable=true",
		"kube-apiserver":          "HTTPS 127.0.0.1:6443/livez",
		"kube-controller-manager": "HTTPS 127.0.0.1:10257/healthz",
		"kube-scheduler":          "HTTPS 127.0.0.1:10259/livez",
	}
	for _, tc := range []struct {
		timing         string
		want, liveness time.Duration
	}{
		{"", 5 * time.Minute, 80 * time.Second},
		{"default", 5 * time.Minute, 80 * time.Second},
		{"slow", 15 * time.Minute, 5 * time.Minute},
	} {
		n := node("m1", "genesis", "192.168.10.11")
		n.Cluster.Timing = tc.timing
		p := GenesisParams(n, testImages)
		var probed []string
		for _, pod := range append(ControlPlane(p), NodeLocalDNS(p)) {
			c := pod.Spec.Containers[0]
			if c.LivenessProbe == nil {
				if c.StartupProbe != nil {
					t.Errorf("%s: a startup probe without a liveness probe", pod.Name)
				}
				continue
			}
			probed = append(probed, pod.Name)
			s, l := c.StartupProbe, c.LivenessProbe
			if s == nil {
				t.Errorf("timing %q: %s has a liveness probe and no startup probe", tc.timing, pod.Name)
				continue
			}
			if !reflect.DeepEqual(s.ProbeHandler, l.ProbeHandler) {
				t.Errorf("%s: startup probe %+v, liveness probe %+v: not the same endpoint", pod.Name, s.HTTPGet, l.HTTPGet)
			}
			if g := l.HTTPGet; endpoints[pod.Name] != string(g.Scheme)+" "+g.Host+":"+g.Port.String()+g.Path {
				t.Errorf("%s: probes %s %s:%s%s, want %s", pod.Name, g.Scheme, g.Host, g.Port.String(), g.Path, endpoints[pod.Name])
			}
			if l.InitialDelaySeconds != 0 {
				t.Errorf("%s: liveness initial delay %d s behind a startup probe", pod.Name, l.InitialDelaySeconds)
			}
			allowed := time.Duration(s.InitialDelaySeconds+s.PeriodSeconds*s.FailureThreshold) * time.Second
			if allowed < tc.want || allowed > tc.want+time.Duration(s.PeriodSeconds)*time.Second {
				t.Errorf("timing %q: %s: startup probe allows %s, want %s", tc.timing, pod.Name, allowed, tc.want)
			}
			if live := time.Duration(l.PeriodSeconds*l.FailureThreshold) * time.Second; live != tc.liveness {
				t.Errorf("timing %q: %s: liveness probe allows %s of failures, want %s", tc.timing, pod.Name, live, tc.liveness)
			}
		}
		slices.Sort(probed)
		if want := []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"}; !slices.Equal(probed, want) {
			t.Errorf("timing %q: pods with liveness probes %v, want %v", tc.timing, probed, want)
		}
	}
}

// The kubelet's flags follow the profile; a node file without one, or
// with a name that slipped past validation, gets the default's.
func TestKubeletFlagsFollowTheTiming(t *testing.T) {
	for name, want := range map[string]string{
		"":        "--housekeeping-interval=10s",
		"default": "--housekeeping-interval=10s",
		"slow":    "--housekeeping-interval=30s",
		"bogus":   "--housekeeping-interval=10s",
	} {
		if got := TimingFor(name).KubeletFlags(); len(got) != 1 || got[0] != want {
			t.Errorf("timing %q: kubelet flags %v, want [%s]", name, got, want)
		}
	}
}

// Under the slow profile etcd starts through rt-exec, mounted from the
// image, with the capability the real-time policy needs; under the
// default it is started as it always was.
func TestEtcdRealtimeUnderSlowTiming(t *testing.T) {
	for _, tc := range []struct {
		timing   string
		wantArgs string
		wantCaps []corev1.Capability
	}{
		{"default", "etcd --config-file=" + EtcdConfigPath, nil},
		{"slow", rtexec.Path + " -priority 1 -- etcd --config-file=" + EtcdConfigPath, []corev1.Capability{"SYS_NICE"}},
	} {
		n := node("m1", "genesis", "192.168.10.11")
		n.Cluster.Timing = tc.timing
		pod := Etcd(GenesisParams(n, testImages))
		c := pod.Spec.Containers[0]
		if got := strings.Join(c.Command, " "); got != tc.wantArgs {
			t.Errorf("%s: etcd's command %q, want %q", tc.timing, got, tc.wantArgs)
		}
		var caps []corev1.Capability
		if c.SecurityContext != nil && c.SecurityContext.Capabilities != nil {
			caps = c.SecurityContext.Capabilities.Add
		}
		if !slices.Equal(caps, tc.wantCaps) {
			t.Errorf("%s: etcd's added capabilities %v, want %v", tc.timing, caps, tc.wantCaps)
		}
		mounted := slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == rtexec.Path && m.ReadOnly })
		if mounted != (tc.timing == "slow") {
			t.Errorf("%s: rt-exec mounted read-only: %v", tc.timing, mounted)
		}
	}
}
