package gobuild

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
)

// KubernetesCommands are the programs kiln bakes: the kubelet and kubectl on the host,
// the rest packed as container images.
var KubernetesCommands = []string{"kubelet", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl"}

var kubeVersion = regexp.MustCompile(`^v1\.(\d+)\.(\d+)$`)

// KubernetesTarget is the Kubernetes components at version, with the
// staging modules listed in goMod (k8s.io/kubernetes's own go.mod)
// pinned to the matching v0.x release and the version stamped in.
func KubernetesTarget(version string, goMod []byte, buildDate string) (Target, error) {
	m := kubeVersion.FindStringSubmatch(version)
	if m == nil {
		return Target{}, fmt.Errorf("kubernetes version %q: want v1.MINOR.PATCH", version)
	}
	staging := fmt.Sprintf("v0.%s.%s", m[1], m[2])
	replace := map[string]string{}
	for _, mod := range stagingModules(goMod) {
		replace[mod] = staging
	}
	if len(replace) == 0 {
		return Target{}, fmt.Errorf("kubernetes %s: its go.mod lists no staging modules", version)
	}
	t := Target{Name: "kubernetes", Module: "k8s.io/kubernetes", Version: version, Replace: replace, Cold: "~15 min, half of it module downloads"}
	for _, c := range KubernetesCommands {
		t.Packages = append(t.Packages, "k8s.io/kubernetes/cmd/"+c)
	}
	for k, v := range map[string]string{
		"gitVersion": version, "gitMajor": "1", "gitMinor": m[1], "gitTreeState": "clean", "buildDate": buildDate,
	} {
		t.LDFlags = append(t.LDFlags, fmt.Sprintf("-X k8s.io/component-base/version.%s=%s", k, v))
	}
	sort.Strings(t.LDFlags)
	return t, nil
}

// ResolveKubernetesTarget is KubernetesTarget for version with
// k8s.io/kubernetes's own go.mod fetched through the module proxy.
func ResolveKubernetesTarget(ctx context.Context, version, buildDate string) (Target, error) {
	goMod, err := ModuleGoMod(ctx, "k8s.io/kubernetes", version)
	if err != nil {
		return Target{}, err
	}
	return KubernetesTarget(version, goMod, buildDate)
}

// stagingModules lists the modules k8s.io/kubernetes replaces with its
// own ./staging tree.
func stagingModules(goMod []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(goMod))
	for sc.Scan() {
		line := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "replace"))
		mod, target, ok := strings.Cut(line, "=>")
		if !ok || !strings.HasPrefix(strings.TrimSpace(target), "./staging/") {
			continue
		}
		out = append(out, strings.Fields(mod)[0])
	}
	sort.Strings(out)
	return out
}

// ModuleGoMod fetches a module's go.mod through the module proxy.
func ModuleGoMod(ctx context.Context, module, version string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "go", "mod", "download", "-json", module+"@"+version).Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download %s@%s: %w", module, version, err)
	}
	var info struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return nil, err
	}
	if info.Error != "" {
		return nil, fmt.Errorf("go mod download %s@%s: %s", module, version, info.Error)
	}
	return os.ReadFile(info.GoMod)
}
