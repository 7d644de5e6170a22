package clustercheck

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/manifests"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func slice(service string, ready ...*bool) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: service + "-abc", Namespace: "kube-system",
		Labels: map[string]string{discoveryv1.LabelServiceName: service}}}
	for _, r := range ready {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.244.0.5"},
			Conditions: discoveryv1.EndpointConditions{Ready: r}})
	}
	return s
}

// controllerManagerPod is genesis g1's controller-manager mirror pod
// after restarts restarts, the last one ending with exit code 1.
func controllerManagerPod(restarts int32) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "kube-controller-manager-g1", Namespace: "kube-system",
		Labels: map[string]string{"component": "kube-controller-manager"}}, Spec: corev1.PodSpec{NodeName: "g1"}}
	c := corev1.ContainerStatus{Name: "kube-controller-manager", RestartCount: restarts}
	if restarts > 0 {
		c.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1,
			FinishedAt: metav1.NewTime(time.Date(2026, 12, 2, 13, 0, 0, 0, time.UTC))}
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{c}
	return p
}

func TestServiceReady(t *testing.T) {
	yes, no := new(bool), new(bool)
	*yes = true
	for _, tc := range []struct {
		name    string
		objects []runtime.Object
		wantErr string
	}{
		{"no slice", nil, "no ready endpoint (0 not ready)"},
		{"no endpoints", []runtime.Object{slice("kube-dns")}, "no ready endpoint (0 not ready)"},
		{"not ready", []runtime.Object{slice("kube-dns", no)}, "no ready endpoint (1 not ready)"},
		{"another service's ready endpoint", []runtime.Object{slice("kube-dns", no), slice("other", yes)}, "(1 not ready)"},
		{"ready", []runtime.Object{slice("kube-dns", no, yes)}, ""},
		{"ready unset counts as ready", []runtime.Object{slice("kube-dns", nil)}, ""},
		{"a restarting controller-manager is named", []runtime.Object{slice("kube-dns"), controllerManagerPod(5)},
			"(0 not ready); kube-controller-manager, which writes the endpoints, restarted 5 time(s) on g1 (last exit code 1 at 13:00:00)"},
		{"a steady controller-manager is not", []runtime.Object{slice("kube-dns"), controllerManagerPod(0)}, "(0 not ready)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ServiceReady(context.Background(), fake.NewClientset(tc.objects...), "kube-system", "kube-dns")
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("ServiceReady: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("ServiceReady: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

func TestPodLogsNamesEachContainer(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "coredns-1", Namespace: "kube-system", Labels: map[string]string{"k8s-app": "kube-dns"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "coredns"}}}}
	other := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "etcd-g1", Namespace: "kube-system"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "etcd"}}}}
	got := PodLogs(context.Background(), fake.NewClientset(pod, other), "kube-system", "k8s-app=kube-dns", 30)
	if !strings.Contains(got, "--- coredns-1/coredns") || strings.Contains(got, "etcd-g1") {
		t.Fatalf("PodLogs:\n%s\nwant a section for coredns-1/coredns only", got)
	}
}

// A check pod runs the node's kiln: the kiln image holds none.
func TestCheckPodRunsTheNodesKiln(t *testing.T) {
	pod := CheckPod("c", "kiln.local/kiln:t", "w1", "dns", "example")
	c := pod.Spec.Containers[0]
	if c.Command[0] != manifests.KilnInImage || c.Command[1] != "check" || pod.Spec.NodeName != "w1" {
		t.Fatalf("command %v on %q", c.Command, pod.Spec.NodeName)
	}
	if len(pod.Spec.Volumes) != 1 || pod.Spec.Volumes[0].HostPath == nil || pod.Spec.Volumes[0].HostPath.Path != nodefile.KilnBinary {
		t.Fatalf("volumes %+v, want the node's kiln", pod.Spec.Volumes)
	}
	if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != manifests.KilnInImage || !c.VolumeMounts[0].ReadOnly {
		t.Fatalf("mounts %+v, want the node's kiln read-only at %s", c.VolumeMounts, manifests.KilnInImage)
	}
}

// A check pod runs under the runtime's seccomp profile with every
// capability dropped, no privilege escalation and a read-only root.
func TestCheckPodIsConfined(t *testing.T) {
	pod := CheckPod("c", "kiln.local/kiln:t", "w1", "serve", "--listen", ":8080")
	if sc := pod.Spec.SecurityContext; sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v, want seccomp RuntimeDefault", sc)
	}
	sc := pod.Spec.Containers[0].SecurityContext
	if sc == nil || sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		t.Errorf("container security context %+v, want every capability dropped, no escalation, a read-only root", sc)
	}
}
