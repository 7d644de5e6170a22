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
// and the anchors then ran only when the control plane left the CPU
// idle, and on one-vCPU masters that was minutes after the node was
// Ready. So every pod asks, and the control plane asks most: etcd,
// which every write and quorum read of every master waits for, and the
// apiserver, whose start (its post-start hooks) the add-ons' own starts
// compete with after a power cut (250m, 200m and 100m are what kubeadm
// gives the apiserver, the controller-manager and the scheduler).
//
// The sum on a master (960m with cluster DNS on it) stays under one
// CPU, so a one-vCPU node admits every pod; pods of workloads without
// requests are not refused by it.
var cpuRequests = map[string]string{
	"etcd":                                "200m",
	"kube-apiserver":                      "250m",
	"kube-controller-manager":             "150m",
	"kube-scheduler":                      "100m",
	"kiln-node-dns":                       "50m",
	"coredns":                             "100m", // cluster DNS, as CoreDNS's own deployment asks
	"kiln-net":                            "30m",
	"kube-proxy":                          "30m",
	"kiln-anchor-etcd":                    "10m",
	"kiln-anchor-kube-apiserver":          "10m",
	"kiln-anchor-kube-controller-manager": "10m",
	"kiln-anchor-kube-scheduler":          "10m",
	"kiln-anchor-discovery":               "10m",
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
