package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/node/healthgate"
	"github.com/kiln-project/kiln/ops/nodeops"
	"github.com/kiln-project/kiln/ops/upgrade"
)

func newUpgradeCmd() *cobra.Command {
	var f clusterFlags
	var o upgradeFlags
	cmd := &cobra.Command{
		Use:   "upgrade -f SITE --pki DIR --image DIR (--serve ADDR | --url URL | --dry-run)",
		Short: "Roll the cluster onto a new image, one node at a time, with rollback",
		Long: `Roll the site's cluster onto the image kiln build wrote to --image, one node at
a time, and print the plan first:

  1. the masters, in site file order, one at a time, each only while etcd keeps
     quorum with its member down (a cluster of one or two masters never does:
     refused, naming the member, unless --accept-outage);
  2. then the workers, in site file order, each cordoned and drained (as kiln
     node remove drains) and uncordoned once it passes the health gate.

For each node the rollout asks it, through annotations on its Node
(` + upgradeask.AskAnnotation + `), to stage the build and reboot. The node's upgrade
service (kiln-upgrade.service) fetches the build's kernel, initrd and root from
the ask's URL, checks each against the sha256 the ask carries, writes them into
the root slot it does not run, answers and reboots. GRUB boots the new slot
once; the node's role marks it good after its own health gate, or the next boot
comes back on the old slot and the node says why (` + upgradeask.RolledBackAnnotation + `).

The rollout then waits for the node to pass the health gate on its new boot:
its Node Ready with a heartbeat of the new boot, its role done on that boot, on
a master its etcd member a voter, every voting member answering and its
apiserver ready; and for it to run the target (the kiln binary's digest in
` + nodefile.KilnDigestAnnotation + ` and its kubelet's release). The rollout stops at the first
node that cannot stage, rolls back or does not pass; the nodes before it run
the target, those after it are untouched. Running kiln upgrade again resumes
there: a node that already runs the target image is skipped.

Where the nodes fetch the build: --serve ADDR serves --image's pxe/ artifacts
over HTTP on ADDR (an address of this machine the nodes reach) for the
rollout's length; --url URL names a server that already serves them
(URL/vmlinuz, URL/initrd.img, URL/rootfs.squashfs). Plain HTTP is enough: a
node stages nothing whose digest differs from the ask's.

Only nodes booted from a raw disk have root slots to stage into; a node booted
from the ISO or by PXE answers that it cannot stage, and the rollout stops
there (re-image it: docs/operations.md).

Refused before anything starts, each naming what: an --image that is not a
kiln build (no or invalid node.manifest.json, a missing artifact); a release
step Kubernetes or etcd does not support (Kubernetes: the same minor or the
next one, no skipped minor, no downgrade to an earlier minor; etcd: the same
minor or the next one, 3.5 to 3.6 but not 3.4 to 3.6); a node that is not
Ready; etcd voting members not answering.

The plan's columns: ORDER, NODE, ROLE, FROM (what the node runs: its kubelet,
a master's etcd, its kiln), TO (the image's), ACTION (roll, skip and why, or
refused and the pre-checks that fail; each refusal follows the table).

Exit status: 0 when every node runs the target (with --dry-run: when the plan
may start), 1 when the plan is refused, the rollout stops or the cluster cannot
be read, 2 for a usage error (a missing site file or PKI directory, an --image
that is not a kiln build, neither --serve nor --url). See docs/upgrade.md.`,
		Example: `  kiln upgrade -f site.yaml --pki pki/ --image out/ --dry-run
  kiln upgrade -f site.yaml --pki pki/ --image out/ --serve 10.0.0.1:8470`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := o.check(); err != nil {
				return usageError{err}
			}
			s, st, err := f.load()
			if err != nil {
				return err
			}
			build, err := imagemanifest.Open(o.image)
			if errors.Is(err, imagemanifest.ErrNotABuild) {
				return usageError{fmt.Errorf("--image %s: %w", o.image, err)}
			}
			if err != nil {
				return err
			}
			log := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
			p := &upgrade.Planner{Site: s, Target: build.Versions, AcceptOutage: o.acceptOutage}
			if p.Kube, err = nodeops.ConnectAPI(ctx, s, st, "", 0, log); err != nil {
				return err
			}
			etcd, err := nodeops.ConnectEtcd(s, st, "")
			if err != nil {
				return err
			}
			defer etcd.Close()
			p.Etcd = etcd
			plan, err := p.Plan(ctx)
			if err != nil {
				return err
			}
			if err := plan.Write(cmd.OutOrStdout()); err != nil {
				return err
			}
			if err := plan.Err(); o.dryRun || err != nil || len(plan.ToRoll()) == 0 {
				return err
			}
			url := o.url
			if o.serve != "" {
				art, err := upgrade.ServeArtifacts(build, o.serve, log)
				if err != nil {
					return err
				}
				defer art.Close()
				url = art.URL
			}
			ask, err := upgrade.AskFor(build, url)
			if err != nil {
				return usageError{fmt.Errorf("--image %s: %w", o.image, err)}
			}
			r := &upgrade.Roller{Planner: p, Ask: ask, Bounds: o.bounds, Log: log,
				Gate: healthgate.Gate{Kube: p.Kube, Etcd: etcd, APIServer: healthgate.APIServerFunc(func(ctx context.Context, node string) error {
					return nodeops.MasterReady(ctx, s, st, node)
				})},
				Drainer: nodeops.Drainer{Kube: p.Kube, Options: o.drain}}
			return r.Run(ctx, plan)
		},
	}
	f.add(cmd)
	o.add(cmd)
	return cmd
}

// upgradeFlags are kiln upgrade's own flags.
type upgradeFlags struct {
	image, serve, url    string
	dryRun, acceptOutage bool
	bounds               upgrade.Bounds
	drain                nodeops.Options
}

func (o *upgradeFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&o.image, "image", "", "the output directory of kiln build to roll onto (required)")
	fl.BoolVar(&o.dryRun, "dry-run", false, "print the plan and change nothing")
	fl.StringVar(&o.serve, "serve", "", "serve --image's pxe/ artifacts over HTTP on this host:port, which the nodes reach, for the rollout's length")
	fl.StringVar(&o.url, "url", "", "where the nodes fetch the artifacts instead: URL/vmlinuz, URL/initrd.img, URL/rootfs.squashfs")
	fl.BoolVar(&o.acceptOutage, "accept-outage", false, "roll a cluster of one or two masters, whose API is down while each master reboots")
	fl.DurationVar(&o.bounds.Staged, "stage-timeout", upgrade.DefaultStageBound, "bound on a node's fetch and write of the build")
	fl.DurationVar(&o.bounds.Reboot, "reboot-timeout", upgrade.DefaultRebootBound, "bound on a node's reboot, until its Node reports the new boot")
	fl.DurationVar(&o.bounds.Gate, "gate-timeout", upgrade.DefaultGateBound, "bound on a rebooted node's health gate")
	fl.DurationVar(&o.drain.Timeout, "drain-timeout", nodeops.DefaultTimeout, "bound on a worker's drain")
	fl.BoolVar(&o.drain.DeleteEmptyDirData, "delete-emptydir-data", false, "also evict pods with emptyDir volumes; their data is lost (kubectl drain's flag)")
	fl.BoolVar(&o.drain.EvictUnmanaged, "evict-unmanaged", false, "also evict pods no controller manages; nothing re-creates them (kubectl drain --force)")
	cmd.MarkFlagRequired("image")
}

// check refuses a rollout without a place the nodes fetch from.
func (o *upgradeFlags) check() error {
	switch {
	case o.serve != "" && o.url != "":
		return errors.New("--serve and --url both name where the nodes fetch the build: give one")
	case !o.dryRun && o.serve == "" && o.url == "":
		return errors.New("the nodes need the build's artifacts: give --serve ADDR (kiln upgrade serves --image) or --url URL (a server that does), or --dry-run to print the plan only")
	}
	return nil
}
