package timeline

import (
	"slices"
	"testing"
	"time"

	"github.com/kiln-project/kiln/qemu-tests/console"
)

func lines(texts ...any) []console.Line {
	var out []console.Line
	for i := 0; i < len(texts); i += 2 {
		out = append(out, console.Line{At: time.Duration(texts[i].(float64) * float64(time.Second)), Text: texts[i+1].(string)})
	}
	return out
}

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func TestExtract(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lines []console.Line
		want  []Mark
	}{
		{
			name: "a plain boot path: each step at its line",
			lines: lines(
				3.0, "[    0.000000] Linux version 6.1.0-28-amd64 (debian-kernel@lists.debian.org)",
				33.9, "kiln-firstboot: start boot_id=1b06e5e8-a785-4fa9-894d-905690f2798f",
				34.2, "kiln-firstboot: config from fw_cfg",
				41.2, "kiln-firstboot: config applied",
				41.3, "kiln-firstboot: done source=fw_cfg"),
			want: []Mark{{"kernel started", sec(3)}, {"agent started", sec(33.9)}, {"config found", sec(34.2)},
				{"config applied", sec(41.2)}, {"agent done", sec(41.3)}},
		},
		{
			name: "a missing step is left out, not invented",
			lines: lines(
				33.9, "kiln-firstboot: start boot_id=1b06e5e8",
				41.2, "kiln-firstboot: config applied"),
			want: []Mark{{"agent started", sec(33.9)}, {"config applied", sec(41.2)}},
		},
		{
			name: "the first matching line counts; a wait's progress line is not its end",
			lines: lines(
				47.6, "kiln-firstboot: kubelet started (images are imported into containerd first)",
				99.0, "kiln-firstboot: kubelet started (images are imported into containerd first)",
				214.0, "kiln-firstboot: waiting for apiserver healthy on 10.0.2.50 (2m46s so far; last: connection refused)",
				252.3, "kiln-firstboot: apiserver healthy on 10.0.2.50: after 3m24s"),
			want: []Mark{{"kubelet started", sec(47.6)}, {"apiserver healthy", sec(252.3)}},
		},
		{
			name: "the images end at the last import, in time order among the others",
			lines: lines(
				47.6, "kiln-firstboot: kubelet started (images are imported into containerd first)",
				52.0, "imported registry.k8s.io/pause:3.10 (sha256:ee6521f2) in 1.9s",
				252.3, "kiln-firstboot: apiserver healthy on 10.0.2.50: after 3m24s",
				260.1, "imported ghcr.io/kiln-project/kiln:v0 (sha256:0f3c1e2d) in 22.6s"),
			want: []Mark{{"kubelet started", sec(47.6)}, {"apiserver healthy", sec(252.3)}, {"all images imported", sec(260.1)}},
		},
		{
			name: "a control plane back in order after a power cut",
			lines: lines(
				45.0, "kiln-firstboot: kubelet started (images are imported into containerd first)",
				120.0, "kiln-firstboot: waiting for etcd quorum on 10.77.0.11 (30s so far; last: context deadline exceeded)",
				150.0, "kiln-firstboot: etcd quorum on 10.77.0.11: after 1m45s",
				151.0, "kiln-firstboot: started kube-apiserver",
				260.0, "kiln-firstboot: apiserver healthy on 10.77.0.11: after 1m49s",
				262.0, "kiln-firstboot: apiserver healthy on 10.77.0.11: after 0s"),
			want: []Mark{{"kubelet started", sec(45)}, {"etcd quorum", sec(150)}, {"apiserver healthy", sec(260)}},
		},
		{
			name: "a master's join",
			lines: lines(
				40.0, "kiln-firstboot: the cluster: after 2s",
				80.0, "kiln-firstboot: the node's images (kiln-images.service): after 40s",
				81.0, "kiln-firstboot: etcd: member 8e9e05c52164694d (m2) joins with initial cluster m1=https://10.77.0.11:2380,m2=https://10.77.0.12:2380",
				81.5, "kiln-firstboot: kubelet started (images are imported into containerd first)",
				150.0, "kiln-firstboot: etcd member 8e9e05c52164694d started: after 1m8s",
				170.0, "kiln-firstboot: etcd member 8e9e05c52164694d promoted: after 20s",
				400.0, "kiln-firstboot: node m2 Ready: after 1m",
				401.0, "kiln-firstboot: done role=master (joined in 6m1s)"),
			want: []Mark{{"cluster answered", sec(40)}, {"boot images in", sec(80)}, {"kubelet started", sec(81.5)},
				{"etcd up", sec(150)}, {"etcd promoted", sec(170)}, {"Ready", sec(400)}, {"role done", sec(401)}},
		},
		{
			name: "genesis writes its CNI file before its apiserver is healthy",
			lines: lines(
				29.5, "kiln-firstboot: kubelet started (images are imported into containerd first)",
				82.7, "kiln-firstboot: CNI configuration /etc/cni/net.d/10-kiln.conflist written for pod CIDR 10.244.0.0/24 (claimed: the first block, before the controller-manager allocates)",
				98.9, "kiln-firstboot: apiserver healthy on 10.0.2.50: after 16s"),
			want: []Mark{{"kubelet started", sec(29.5)}, {"CNI written", sec(82.7)}, {"apiserver healthy", sec(98.9)}},
		},
		{
			name:  "no lines, no marks",
			lines: nil,
			want:  nil,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Extract(Steps(), tc.lines); !slices.Equal(got, tc.want) {
				t.Errorf("Extract =\n%v\nwant\n%v", got, tc.want)
			}
		})
	}
}

func TestFloorStepsEndAtTheLoginPrompt(t *testing.T) {
	got := Extract(FloorSteps(), lines(
		3.0, "[    0.000000] Linux version 6.1.0-28-amd64",
		33.9, "kiln-firstboot: start boot_id=1b06e5e8",
		51.4, "kiln-bench login: "))
	want := []Mark{{"kernel started", sec(3)}, {"login prompt", sec(51.4)}}
	if !slices.Equal(got, want) {
		t.Errorf("Extract = %v, want %v", got, want)
	}
}

func TestStepNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range Steps() {
		if seen[s.Name] {
			t.Errorf("step %q twice", s.Name)
		}
		seen[s.Name] = true
	}
}
