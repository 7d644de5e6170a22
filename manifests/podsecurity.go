package manifests

import (
	corev1 "k8s.io/api/core/v1"
)

// podSecurity is the pod-level security context of every pod kiln
// renders: the container runtime's default seccomp profile, which
// refuses the system calls no ordinary program makes (kexec, module
// loading, mount, new namespaces, ...). containerd does not apply a
// seccomp profile to a privileged container (kube-proxy).
func podSecurity() *corev1.PodSecurityContext {
	return &corev1.PodSecurityContext{SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault}}
}

// confined is the security context of a container that is not
// privileged: every capability dropped but add, no privilege escalation
// (no setuid binary or file capability grants more than the container
// starts with), and a read-only root filesystem (each program writes only
// to the volumes it mounts).
//
// kiln's pods run as root, and root with every capability dropped has
// no CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_CHOWN or CAP_FOWNER: it
// reads and writes a file only as its owner, root, would by the file's
// mode. Every host file they touch is root's (kiln's Ignition configs
// write every file as root; the kubelet and kiln create the
// directories), so the owner's bits are enough.
func confined(add ...corev1.Capability) *corev1.SecurityContext {
	no, yes := false, true
	return &corev1.SecurityContext{
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}, Add: add},
		AllowPrivilegeEscalation: &no,
		ReadOnlyRootFilesystem:   &yes,
	}
}

// Confine gives a pod spec the runtime's default seccomp profile and its
// containers the confined security context with the capabilities add: a
// pod of the kiln image that kiln runs for a moment (the validation
// pod's kiln check) needs none.
func Confine(spec *corev1.PodSpec, add ...corev1.Capability) {
	spec.SecurityContext = podSecurity()
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = confined(add...)
	}
}
