package builder

import (
	"encoding/json"
	"testing"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/node/catalog"
)

// The manifest the builder writes is what kiln upgrade reads
// (contract/imagemanifest): the releases from the images' tags, the kiln
// binary's digest. A renamed field or role breaks this test, not an
// operator's upgrade.
func TestManifestReadsAsTheUpgradeContract(t *testing.T) {
	m := Manifest{Name: "node",
		Binaries: []FileDigest{{Path: agentBinary, SHA256: "0522ca4d", Size: 1}},
		Images: []catalog.Image{
			{Role: catalog.Etcd, Ref: "kiln.local/etcd:v3.6.5"},
			{Role: catalog.APIServer, Ref: "kiln.local/kube-apiserver:v1.37.1"},
			{Role: catalog.ControllerManager, Ref: "kiln.local/kube-controller-manager:v1.37.1"},
			{Role: catalog.Scheduler, Ref: "kiln.local/kube-scheduler:v1.37.1"},
			{Role: catalog.Proxy, Ref: "kiln.local/kube-proxy:v1.37.1"},
		},
		Artifacts: []FileDigest{{Path: "node.raw", SHA256: "c324", Size: 1}},
	}
	data, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var read imagemanifest.Manifest
	if err := json.Unmarshal(data, &read); err != nil {
		t.Fatal(err)
	}
	v, err := read.Versions()
	if err != nil {
		t.Fatal(err)
	}
	if want := (imagemanifest.Versions{Kubernetes: "v1.37.1", Etcd: "v3.6.5", KilnSHA256: "0522ca4d"}); v != want {
		t.Errorf("versions %+v, want %+v", v, want)
	}
	if len(read.Artifacts) != 1 || read.Artifacts[0] != m.Artifacts[0] {
		t.Errorf("artifacts %+v, want %+v", read.Artifacts, m.Artifacts)
	}
}
