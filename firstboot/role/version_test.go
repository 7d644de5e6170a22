package role

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
)

// The role publishes the agent's version on its own Node as its kubelet;
// a cluster that refuses it costs a console line, not the role.
func TestPublishVersion(t *testing.T) {
	for _, tc := range []struct {
		name    string
		status  int
		version string
		want    string // the annotation the apiserver got; "" none
		said    string
	}{
		{name: "published", status: http.StatusOK, version: "v0.9.1-3-gabc", want: "v0.9.1-3-gabc"},
		{name: "refused: said, not fatal", status: http.StatusForbidden, version: "v0.9.1", want: "v0.9.1", said: "the kiln version is not on Node w1"},
		{name: "no version: nothing asked", status: http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
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
				got = p.Metadata.Annotations[nodefile.VersionAnnotation]
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				if tc.status == http.StatusOK {
					fmt.Fprint(w, `{"apiVersion":"v1","kind":"Node","metadata":{"name":"w1"}}`)
				} else {
					fmt.Fprint(w, `{"apiVersion":"v1","kind":"Status","status":"Failure","reason":"Forbidden","code":403}`)
				}
			}))
			defer srv.Close()
			root, _ := nodeRoot(t, "w1")
			kubeconfig := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: %q}}]\n"+
				"users: [{name: u, user: {token: t}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n", srv.URL)
			if err := os.WriteFile(filepath.Join(root, nodefile.KubeconfigDir, "kubelet.conf"), []byte(kubeconfig), 0o600); err != nil {
				t.Fatal(err)
			}
			var log []string
			n := &Node{Root: root, Version: tc.version, Log: func(f string, a ...any) { log = append(log, fmt.Sprintf(f, a...)) }}
			n.file, n.cat = mustLoad(t, n)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			if err := n.units().kubelet.publishVersion(ctx); err != nil {
				t.Fatalf("publishVersion failed the role: %v", err)
			}
			if got != tc.want {
				t.Errorf("annotation %q, want %q", got, tc.want)
			}
			if said := strings.Join(log, "\n"); tc.said != "" && !strings.Contains(said, tc.said) {
				t.Errorf("console %q, want %q", said, tc.said)
			}
		})
	}
}
