package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/qemu-tests/cluster"
)

// removeBound bounds one `kiln node remove` (its drain and its wait for
// the node's answer are bounded inside it too).
const removeBound = 10 * time.Minute

// timeLifecycle times what an operator does to reprovision machines, on
// the cluster the power cut left (issue 12): for the worker w1, then the
// master m2, `kiln node remove` (the command, run inside the namespace)
// while the machine runs, to its exit with the Node gone; then the
// machine re-imaged (powered off, a blank state disk, its config) to its
// Node Ready again, and for m2 a voting member again.
func (c *clusterRun) timeLifecycle(ctx context.Context) error {
	site := filepath.Join(c.dir, "site.yaml")
	if err := os.WriteFile(site, []byte(cluster.ThreeNodes().Site()), 0o600); err != nil {
		return err
	}
	var rows []row
	for _, name := range []string{"w1", "m2"} {
		n := c.node(name)
		took, err := c.remove(ctx, site, n)
		if err != nil {
			return err
		}
		rows = append(rows, ratioRow(fmt.Sprintf("**remove**: `kiln node remove %s` (a running %s) start to exit, Node gone", name, n.Role),
			took, c.floor, 0, "the command inside the namespace: drain, etcd member, the node's answer, the Node deleted"))
		// A removed node comes back only with new credentials.
		cfg, log, err := cluster.Readmit(abs(c.o.kiln), site, c.pkiDir, name, func(name string, args ...string) ([]byte, error) {
			return c.seg.Command(ctx, name, args...).CombinedOutput()
		})
		clusterLog("%s", strings.TrimSpace(log))
		if err != nil {
			return err
		}
		c.cfgs[name] = cfg
		ready, err := c.reimage(ctx, n)
		if err != nil {
			return err
		}
		rows = append(rows, ratioRow(fmt.Sprintf("**re-image** %s: power-on with a blank state disk to its Node Ready", name),
			ready, c.floor, 0, "its config with new credentials (kiln pki renew --node, kiln node admit)"))
		c.r.addTimeline("cluster", clusterTimeline, stepsRow(fmt.Sprintf("%s (%s): re-imaged", n.Name, n.Role), n.Console()))
	}
	c.r.add(clusterTitle, clusterHead, rows...)
	return nil
}

func (c *clusterRun) node(name string) *clusterNode {
	i := slices.IndexFunc(c.nodes, func(n *clusterNode) bool { return n.Name == name })
	return c.nodes[i]
}

// remove runs kiln node remove for n and returns how long it took; the
// Node must be gone at its exit.
func (c *clusterRun) remove(ctx context.Context, site string, n *clusterNode) (time.Duration, error) {
	clusterLog("kiln node remove %s (up to %s)", n.Name, removeBound)
	ctx, cancel := context.WithTimeout(ctx, removeBound)
	defer cancel()
	start := time.Now()
	out, err := c.seg.Command(ctx, abs(c.o.kiln), "node", "remove", n.Name, "-f", site, "--pki", c.pkiDir, "--timeout", "5m").CombinedOutput()
	took := time.Since(start)
	clusterLog("kiln node remove %s (%s):\n%s", n.Name, took.Round(time.Second), strings.TrimSpace(string(out)))
	if err != nil {
		return took, fmt.Errorf("kiln node remove %s: %w", n.Name, err)
	}
	if _, err := c.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return took, fmt.Errorf("kiln node remove %s exited, but its Node is still there (%v)", n.Name, err)
	}
	return took, nil
}

// reimage powers n off, gives it a blank state disk and boots it with
// its config; it returns the time from power-on to its role's done line
// and its Node Ready with a heartbeat of this boot (a master: and etcd
// back to two voting members).
func (c *clusterRun) reimage(ctx context.Context, n *clusterNode) (time.Duration, error) {
	n.PowerCut()
	if err := createQcow2(filepath.Join(c.dir, n.Name+"-state.qcow2"), "8G"); err != nil {
		return 0, err
	}
	n.Ignition = c.cfgs[n.Name]
	since := time.Now().Add(-5 * time.Second) // the guest clock starts from the host's RTC
	if err := n.Restart(); err != nil {
		return 0, fmt.Errorf("%s: booting re-imaged: %w", n.Name, err)
	}
	n.on = poweredOn(n.VM)
	clusterLog("%s re-imaged: powered on with a blank state disk", n.Name)
	if _, err := waitRoleDone(ctx, n, "joined"); err != nil {
		return 0, err
	}
	what := "Node " + n.Name + " Ready with a heartbeat since " + since.Format(time.TimeOnly)
	clusterLog("waiting up to %s for %s", clusterSettle, what)
	if err := retry.Wait(ctx, what, clusterSettle, clusterLog, func(ctx context.Context) error {
		return clustercheck.NodeReady(ctx, c.kube, n.Name, since)
	}); err != nil {
		return 0, err
	}
	ready := time.Since(n.on)
	if n.Role != "worker" {
		if err := c.waitVoters(ctx); err != nil {
			return 0, err
		}
	}
	return ready, nil
}
