package manifests

import (
	"fmt"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// Timing is how patient the control plane is with itself: etcd's raft
// timers, the leader-election timers of the controller-manager and the
// scheduler, and how long a control-plane static pod may take to start
// before its liveness probe counts. The site chooses one profile
// (cluster.timing) for the whole cluster, so every etcd member runs the
// same heartbeat and election timeout. docs/timing.md explains the values.
type Timing struct {
	// etcd: how often the leader sends heartbeats, and how long a
	// follower goes without one before it calls an election.
	EtcdHeartbeat, EtcdElection time.Duration
	// Leader election of kube-controller-manager and kube-scheduler:
	// how long a lease holds, how long the leader keeps trying to renew
	// before it gives up (and exits), and how often candidates retry.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// NodeLease is how long a kubelet's Node lease holds
	// (nodeLeaseDurationSeconds); the kubelet renews it every quarter of
	// that. NodeGrace is how long the controller-manager lets a Node go
	// without a renewal before it marks the Node not ready
	// (--node-monitor-grace-period), which takes the Node's pods out of
	// every Service's endpoints and, after five minutes, evicts them.
	NodeLease, NodeGrace time.Duration
	// Startup is how long a static pod may take from container start
	// until its health endpoint first answers before the kubelet
	// restarts it; the liveness probe only runs after that.
	Startup time.Duration
	// Liveness is how long a started static pod's health endpoint may
	// fail before the kubelet restarts it: an apiserver whose etcd
	// quorum is slow (a starved member) answers /livez with errors for a
	// while, and a restart under load costs minutes more.
	Liveness time.Duration
	// Housekeeping is how often the kubelet's cAdvisor reads every
	// container's cgroup statistics (--housekeeping-interval): the
	// largest share of an idle kubelet's CPU on a small or emulated
	// machine. Slower means container metrics and the memory figures
	// eviction decisions start from are that much older.
	Housekeeping time.Duration
	// EtcdCheck bounds the apiserver's own etcd checks in /livez and
	// /readyz (--etcd-healthcheck-timeout, --etcd-readycheck-timeout): a
	// starved etcd member that answers in 3 s makes the default 2 s check
	// fail, the apiserver unready and, through /livez, a restart candidate.
	EtcdCheck time.Duration
	// DNSCheck is how long the genesis validation pod keeps resolving
	// the kubernetes Service through cluster DNS before the role reports
	// failure: the answer needs kube-proxy's rules for the Service and a
	// CoreDNS synced with the apiserver, and on a machine at half its
	// usual speed neither may come within a minute.
	DNSCheck time.Duration
	// EtcdRealtime runs etcd under the real-time round-robin policy
	// (rtexec): a two-member etcd stalls whenever either member waits for
	// the CPU, and inside a busy guest etcd waited behind the kubelet,
	// containerd and the apiserver's start (peer round trips of 2 s, the
	// leader failing to send its heartbeats on time). A real-time etcd
	// runs as soon as it has work; the kernel still keeps 5% of every
	// second for everything else.
	EtcdRealtime bool
}

// timings are the profiles, by the names nodefile.Timings lists.
var timings = map[string]Timing{
	// etcd's and Kubernetes' own defaults, and a start may take 5 min.
	nodefile.TimingDefault: {
		EtcdHeartbeat: 100 * time.Millisecond, EtcdElection: 1000 * time.Millisecond,
		LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		NodeLease: 40 * time.Second, NodeGrace: 50 * time.Second,
		Startup: 5 * time.Minute, Liveness: 80 * time.Second,
		Housekeeping: 10 * time.Second,
		EtcdCheck:    2 * time.Second,
		DNSCheck:     time.Minute,
	},
	// Loaded, small or emulated machines: five times etcd's timers (the
	// election still 10 heartbeats), a leader that keeps its lease
	// through 100 s of an apiserver that does not answer (at 40 s the
	// controller-manager of a loaded two-master cluster exits again and
	// again, and each start costs minutes without controllers), Node
	// leases three times as long, a start may take 15 min, a running
	// component may fail its health check for 5 min before it is
	// restarted, and container statistics are read every 30 s (at 10 s
	// cAdvisor's housekeeping takes about a quarter of a slow machine's
	// kubelet's CPU), and etcd runs under the real-time round-robin policy.
	nodefile.TimingSlow: {
		EtcdHeartbeat: 500 * time.Millisecond, EtcdElection: 5000 * time.Millisecond,
		LeaseDuration: 120 * time.Second, RenewDeadline: 100 * time.Second, RetryPeriod: 20 * time.Second,
		NodeLease: 120 * time.Second, NodeGrace: 180 * time.Second,
		Startup: 15 * time.Minute, Liveness: 5 * time.Minute,
		Housekeeping: 30 * time.Second,
		EtcdCheck:    10 * time.Second,
		DNSCheck:     5 * time.Minute,
		EtcdRealtime: true,
	},
}

// KubeletFlags are the kubelet's command-line flags that follow the
// profile (the ones its configuration file has no field for).
func (t Timing) KubeletFlags() []string {
	return []string{"--housekeeping-interval=" + t.Housekeeping.String()}
}

// TimingProfile returns the named profile.
func TimingProfile(name string) (Timing, bool) {
	t, ok := timings[name]
	return t, ok
}

// TimingFor is the profile a node file names (cluster.timing). An empty
// name (a node file from before the setting) is the default; site
// validation keeps unknown names out of node files, and one that slips
// through gets the default too, which is what the cluster ran with
// before.
func TimingFor(name string) Timing {
	if t, ok := timings[name]; ok {
		return t
	}
	return timings[nodefile.TimingDefault]
}

func timing(p Params) Timing { return TimingFor(p.Node.Cluster.Timing) }

// probePeriod is how often the kubelet runs the control plane's probes.
const probePeriod = 10 * time.Second

// startupFailures is the startup probe's failure threshold: enough
// probes, one per period, to cover the profile's startup time.
func (t Timing) startupFailures() int32 {
	return int32((t.Startup + probePeriod - 1) / probePeriod)
}

func (t Timing) livenessFailures() int32 {
	return int32((t.Liveness + probePeriod - 1) / probePeriod)
}

// seconds renders a duration the way the components' flags are usually
// written (etcd's milliseconds are in its configuration file).
func seconds(d time.Duration) string { return fmt.Sprintf("%ds", int(d.Seconds())) }
