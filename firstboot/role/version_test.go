package role

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// annotationServer is an apiserver that answers PATCH of Node w1 with
// status and records the annotations each patch asked for.
func annotationServer(t *testing.T, status int) (url string, got *map[string]string) {
	t.Helper()
	got = &map[string]string{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPatch || r.URL.Path != "/api/v1/nodes/w1" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusNotFound)
			return
		}
		body, _ := io.ReadAll(r.Body)
		var p struct {
			Metadata struct{ Annotations map[string]string } `json:"metadata"`
		}
		_ = json.Unmarshal(body, &p)
		maps.Copy(*got, p.Metadata.Annotations)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == http.StatusOK {
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"Node","metadata":{"name":"w1"}}`)
		} else {
			fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Forbidden","code":403}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv.URL, got
}

// kubeletNode is worker w1's Node with its kubelet's kubeconfig pointed
// at server, and a console log.
func kubeletNode(t *testing.T, server, version string) (*Node, *[]string) {
	t.Helper()
	root, _ := nodeRoot(t, "w1")
	kubeconfig := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\n"+
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", server)
	writeUnder(t, root, filepath.Join(nodefile.KubeconfigDir, "kubelet.conf"), kubeconfig)
	var log []string
	n := &Node{Root: root, Version: version, Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }}
	n.file, n.cat = mustLoad(t, n)
	return n, &log
}

func writeUnder(t *testing.T, root, path, content string) {
	t.Helper()
	p := filepath.Join(root, path)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// The role publishes the agent's version and its binary's digest on its
// own Node as its kubelet; a cluster that refuses it costs a console
// line, not the role.
func TestPublishVersion(t *testing.T) {
	const binary = "a kiln binary"
	sum := sha256.Sum256([]byte(binary))
	digest := hex.EncodeToString(sum[:])
	for _, tc := range []struct {
		name    string
		status  int
		version string
		binary  bool
		want    map[string]string // the annotations the apiserver got
		said    string
	}{
		{name: "published with the binary's digest", status: http.StatusOK, version: "v0.9.1-3-gabc", binary: true,
			want: map[string]string{nodefile.VersionAnnotation: "v0.9.1-3-gabc", nodefile.KilnDigestAnnotation: digest}},
		{name: "no binary: the version alone, said", status: http.StatusOK, version: "v0.9.1",
			want: map[string]string{nodefile.VersionAnnotation: "v0.9.1"}, said: "the kiln binary's digest is not published"},
		{name: "refused: said, not fatal", status: http.StatusForbidden, version: "v0.9.1", binary: true,
			want: map[string]string{nodefile.VersionAnnotation: "v0.9.1", nodefile.KilnDigestAnnotation: digest}, said: "the kiln version is not on Node w1"},
		{name: "no version: nothing asked", status: http.StatusOK, binary: true, want: map[string]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, got := annotationServer(t, tc.status)
			n, log := kubeletNode(t, url, tc.version)
			if tc.binary {
				writeUnder(t, n.Root, nodefile.KilnBinary, binary)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := n.units().kubelet.publishVersion(ctx); err != nil {
				t.Fatalf("publishVersion failed the role: %v", err)
			}
			if !maps.Equal(*got, tc.want) {
				t.Errorf("annotations %v, want %v", *got, tc.want)
			}
			if said := strings.Join(*log, "\n"); tc.said != "" && !strings.Contains(said, tc.said) {
				t.Errorf("console %q, want %q", said, tc.said)
			}
		})
	}
}

// The role's last phase publishes this boot's ID, the health gate's sign
// that the role finished on this boot; a failure is said, not fatal.
func TestPublishRoleDone(t *testing.T) {
	const bootID = "5f0c2a4e-1b7d-4c3e-9a8f-0123456789ab"
	for _, tc := range []struct {
		name   string
		status int
		bootID bool
		want   map[string]string
		said   string
	}{
		{name: "published", status: http.StatusOK, bootID: true, want: map[string]string{nodefile.RoleDoneAnnotation: bootID}},
		{name: "refused: said, not fatal", status: http.StatusForbidden, bootID: true,
			want: map[string]string{nodefile.RoleDoneAnnotation: bootID}, said: "the role's end is not on Node w1"},
		{name: "no boot ID: nothing asked, said", status: http.StatusOK, want: map[string]string{}, said: "the role's end is not on Node w1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, got := annotationServer(t, tc.status)
			n, log := kubeletNode(t, url, "v0.9.1")
			if tc.bootID {
				writeUnder(t, n.Root, bootIDPath, bootID+"\n")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := n.units().kubelet.publishRoleDone(ctx); err != nil {
				t.Fatalf("publishRoleDone failed the role: %v", err)
			}
			if !maps.Equal(*got, tc.want) {
				t.Errorf("annotations %v, want %v", *got, tc.want)
			}
			if said := strings.Join(*log, "\n"); tc.said != "" && !strings.Contains(said, tc.said) {
				t.Errorf("console %q, want %q", said, tc.said)
			}
		})
	}
}
