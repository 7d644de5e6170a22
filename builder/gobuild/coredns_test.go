package gobuild

import (
	"context"
	"go/format"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/manifests"
)

// corefilePlugins are the plugins a Corefile uses: the first word of each
// line directly inside a server block. Lines in deeper blocks are a
// plugin's options (file's "reload 2s", kubernetes' "fallthrough").
func corefilePlugins(corefile string) []string {
	var plugins []string
	depth := 0
	for _, line := range strings.Split(corefile, "\n") {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		if depth == 1 && fields[0] != "}" {
			plugins = append(plugins, fields[0])
		}
		depth += strings.Count(line, "{") - strings.Count(line, "}")
	}
	return plugins
}

func TestCorefilePluginsParser(t *testing.T) {
	got := corefilePlugins("a:53 {\n    bind 1.2.3.4\n    file z a {\n        reload 2s\n    }\n    errors # log\n}\n.:53 {\n  forward . 1.1.1.1\n}\n")
	if want := []string{"bind", "file", "errors", "forward"}; !slices.Equal(got, want) {
		t.Errorf("parsed %v, want %v", got, want)
	}
}

// The CoreDNS kiln builds has only CoreDNSPlugins: every plugin kiln's
// Corefiles use must be one of them.
func TestCorefilesUseOnlyTheBuiltPlugins(t *testing.T) {
	n := nodefile.NodeFile{
		APIVersion: "kiln.dev/v1alpha1", Kind: nodefile.Kind, Name: "m1", Role: "genesis", Address: "192.168.10.11",
		Cluster: nodefile.ClusterParams{
			Name: "lab", KubernetesVersion: "v1.37.1", Domain: "cluster.local",
			PodCIDR: "10.244.0.0/16", ServiceCIDR: "10.96.0.0/12", ClusterDNS: "10.96.0.10",
			APIServerPort: 6443, DiscoveryName: "kube-apiserver.kiln.internal", NodeLocalDNS: "169.254.20.10",
			UpstreamDNS: []string{"192.168.10.1", "192.168.10.2"},
		},
		Masters: []nodefile.Member{{Name: "m1", Address: "192.168.10.11"}},
	}
	p := manifests.Params{Node: n}
	used := map[string]bool{}
	for name, corefile := range map[string]string{"Corefile": manifests.Corefile(p), "ClusterCorefile": manifests.ClusterCorefile(p)} {
		plugins := corefilePlugins(corefile)
		if len(plugins) < 3 {
			t.Errorf("%s: parsed only %v from\n%s", name, plugins, corefile)
		}
		for _, pl := range plugins {
			used[pl] = true
			if !slices.Contains(CoreDNSPlugins, pl) {
				t.Errorf("%s uses plugin %q, which kiln's CoreDNS does not have (CoreDNSPlugins)\n%s", name, pl, corefile)
			}
		}
	}
	// And the list carries nothing the Corefiles do not use.
	for _, pl := range CoreDNSPlugins {
		if !used[pl] {
			t.Errorf("CoreDNSPlugins has %q, which no Corefile uses", pl)
		}
	}
}

func TestCoreDNSTarget(t *testing.T) {
	tg := CoreDNSTarget("v1.15.0")
	if got := tg.programs(); !slices.Equal(got, []string{"kiln.local/build/coredns"}) || tg.binaryName(got[0]) != "coredns" {
		t.Errorf("programs %v", got)
	}
	src := tg.Main["coredns.go"]
	if formatted, err := format.Source([]byte(src)); err != nil || string(formatted) != src {
		t.Errorf("main is not gofmt's: %v\n%s", err, src)
	}
	for _, want := range []string{"package main", `"github.com/coredns/coredns/coremain"`, "coremain.Run()", "dnsserver.Directives = directives",
		"\t_ \"github.com/coredns/coredns/plugin/kubernetes\"\n"} {
		if !strings.Contains(src, want) {
			t.Errorf("main lacks %q:\n%s", want, src)
		}
	}
	// The directives, in order, are exactly CoreDNSPlugins.
	_, list, _ := strings.Cut(src, "var directives = []string{\n")
	list, _, _ = strings.Cut(list, "}")
	if got := strings.Fields(strings.NewReplacer(`"`, "", ",", "").Replace(list)); !slices.Equal(got, CoreDNSPlugins) {
		t.Errorf("directives %v, want %v", got, CoreDNSPlugins)
	}
	other := tg
	other.Main = map[string]string{"coredns.go": coreDNSMain(CoreDNSPlugins[1:])}
	if other.Key() == tg.Key() {
		t.Error("two main packages share a cache key")
	}
}

// coreDNSIncidental are plugins the binary registers without kiln asking:
// packages of CoreDNSPlugins import them (cache imports metrics, which
// registers as prometheus; forward dnstap and debug; file, cache,
// forward and kubernetes metadata; file and kubernetes transfer). They
// are not directives, so a Corefile cannot use them.
var coreDNSIncidental = []string{"debug", "dnstap", "metadata", "prometheus", "transfer"}

// The real CoreDNS build, through the module proxy into $KILN_CACHE:
// KILN_COREDNS=1 (or KILN_COMPONENTS=1, make components).
func TestBuildCoreDNS(t *testing.T) {
	if os.Getenv("KILN_COREDNS") != "1" && os.Getenv("KILN_COMPONENTS") != "1" {
		t.Skip("set KILN_COREDNS=1 to build CoreDNS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	b := Builder{CacheDir: DefaultCacheDir(), Log: testWriter{t}}
	start := time.Now()
	bins, err := b.Build(ctx, CoreDNSTarget(testCoreDNS))
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	bin := bins["coredns"]
	out, err := exec.Command(bin, "-plugins").CombinedOutput()
	if err != nil {
		t.Fatalf("coredns -plugins: %v: %s", err, out)
	}
	got := strings.Fields(string(out))
	want := slices.Sorted(slices.Values(append(slices.Clone(CoreDNSPlugins), coreDNSIncidental...)))
	if slices.Sort(got); !slices.Equal(got, want) {
		t.Errorf("coredns -plugins lists %v, want %v", got, want)
	}
	out, err = exec.Command(bin, "-version").CombinedOutput()
	if v := "CoreDNS-" + strings.TrimPrefix(testCoreDNS, "v"); err != nil || !strings.Contains(string(out), v) || !strings.Contains(string(out), testCoreDNS) {
		t.Errorf("coredns -version: %v: %s (want %s, commit %s)", err, out, v, testCoreDNS)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("coredns: %s; %.1f MiB (%d bytes); Build took %s", strings.Join(strings.Fields(string(out)), " "), float64(fi.Size())/(1<<20), fi.Size(), took.Round(time.Second))
}
