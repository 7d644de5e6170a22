package serve

import (
	"context"
	"encoding/json"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/kiln-project/kiln/contract/netboot"
	"github.com/kiln-project/kiln/internal/browser"
)

// refreshBound is how long the page may take to show a report by itself:
// it refreshes every 5 s, and a loaded machine renders slowly.
const refreshBound = 30 * time.Second

// The status page in a real headless chromium: every node's row, then a
// phase report that the page shows after its own refresh, without the
// test loading it again.
func TestStatusPageInABrowserFollowsAReport(t *testing.T) {
	cfg := config(t)
	r := start(t, cfg)
	b := browser.ForTest(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	page := r.base + "/"
	if err := b.Load(ctx, page); err != nil {
		t.Fatal(err)
	}
	// The phase a worker's role reports as its kubelet phase starts.
	const node, phase = "w1", "role worker: running worker/kubelet"
	for _, n := range cfg.Site.Nodes {
		row, err := b.Text(ctx, "tr#node-"+n.Name)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range append([]string{n.Name, n.Role}, n.MACs...) {
			if !strings.Contains(row, strings.ToLower(want)) {
				t.Errorf("%s: the row of %s is %q, without %q", page, n.Name, row, want)
			}
		}
		if strings.Contains(row, phase) {
			t.Fatalf("%s: the row of %s shows %q before any report: %q", page, n.Name, phase, row)
		}
	}

	// As the agent reports (firstboot/serve.go): JSON, the time in UTC.
	at := time.Now().UTC().Format(time.RFC3339)
	body, _ := json.Marshal(map[string]string{"phase": phase, "at": at})
	if code, resp := post(t, nil, r.base+netboot.ReportPath+url.PathEscape(node), string(body)); code != 204 {
		t.Fatalf("POST %s%s = %d %s", netboot.ReportPath, node, code, resp)
	}
	reported := time.Now()
	wait, cancelWait := context.WithTimeout(ctx, refreshBound)
	defer cancelWait()
	row, err := b.WaitText(wait, "tr#node-"+node, phase)
	if err != nil {
		t.Fatalf("the page did not show %s's report by itself: %v", node, err)
	}
	t.Logf("the page showed the report %.1fs after it", time.Since(reported).Seconds())
	if !strings.Contains(row, phase+" ("+at+")") {
		t.Errorf("the row of %s is %q, want the phase with its time %s", node, row, at)
	}
	other, err := b.Text(ctx, "tr#node-w2")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(other, phase) {
		t.Errorf("w2's row shows %s's report: %q", node, other)
	}
}
