package manifests

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// cpuRequests is what every pod kiln runs asks of the CPU, by pod name.
// The kubelet turns requests into cgroup weights, and on a busy machine
// the weights decide who waits. A pod that asks for nothing is
// BestEffort, and the whole BestEffort class weighs 1 against the
// Burstable class's weight, which grows with its pods' requests (about
// 58 for five 100m static pods, under cgroup v2 with the kubelet's
// conversion of shares to weights): cluster DNS, kube-proxy, kiln-net
// and the anchors then run only when the control plane leaves the CPU
// idle, which on one-vCPU masters is minutes after the node is Ready. So every pod asks, and the control plane asks most.
//
// etcd asks for the most (weight 14 against the apiserver's 8):
// every write and quorum read of every master waits for it, and a leader
// that cannot send its heartbeats within the election timeout loses its
// quorum. With etcd at 200m beside an apiserver at 250m (weights 8 and
// 10), a two-master cluster of one-vCPU machines after a whole-cluster
// power cut has its leader miss heartbeats ("failed to send out
// heartbeat on time") while the apiserver on its machine starts; the
// other member loses the leader again and again, and that apiserver is
// ready only minutes later. etcd uses little CPU of its own, so
// its weight costs the apiserver only the work the apiserver waits for
// anyway. The apiserver keeps twice the weight of any add-on: after a
// power cut the add-ons start while its post-start hooks run, and at
// 100m, near their weight, a restored genesis apiserver is ready later.
// The controller-manager and the scheduler give etcd the rest (100m and
// 50m).
//
// The sum on a master (930m with cluster DNS on it) stays under one
// CPU, so a one-vCPU node admits every pod; pods of workloads without
// requests are not refused by it.
var cpuRequests = map[string]string{
	"etcd":                      "350m",
	"kube-apiserver":            "200m",
	"kube-controller-manager":   "100m",
	"kube-scheduler":            "50m",
	"kiln-node-dns":             "50m",
	"coredns":                   "100m", // cluster DNS, as CoreDNS's own deployment asks
	"kiln-net":                  "30m",
	"kube-proxy":                "30m",
	"kiln-anchor-control-plane": "20m",
	"kiln-anchor-discovery":     "10m",
}

// requests are the resource requests of the named pod's container: its
// CPU from cpuRequests, and for static pods the memory they have always
// asked for. A pod missing from the table is a programming error, caught
// by the tests that render every pod.
func requests(pod string, memory string) corev1.ResourceRequirements {
	cpu, ok := cpuRequests[pod]
	if !ok {
		panic(fmt.Sprintf("manifests: pod %s has no CPU request in cpuRequests", pod))
	}
	list := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu)}
	if memory != "" {
		list[corev1.ResourceMemory] = resource.MustParse(memory)
	}
	return corev1.ResourceRequirements{Requests: list}
}
