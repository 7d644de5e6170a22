package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/kiln-project/kiln/contract/imagemanifest"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"github.com/kiln-project/kiln/ops/nodeops"
	"github.com/kiln-project/kiln/ops/upgrade"
)

func newUpgradeCmd() *cobra.Command {
	var f clusterFlags
	var image string
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "upgrade -f SITE --pki DIR --image DIR --dry-run",
		Short: "Plan the rolling upgrade of the cluster onto a new image (only --dry-run is built)",
		Long: `Plan rolling the site's cluster onto the image kiln build wrote to --image, one
node at a time, and print the plan:

  1. the masters, in site file order, one at a time, each only while etcd keeps
     quorum with its member down (a cluster of one or two masters never does:
     refused, naming the member);
  2. then the workers, in site file order, each cordoned and drained (as kiln
     node remove drains) and uncordoned once it passes the health gate.

Each node, once rebooted onto the new image, must pass the health gate before
the next one starts: its Node Ready with a heartbeat of the new boot, its role
done on that boot and, on a master, its etcd member a voter, every voting
member answering and its apiserver ready. The rollout stops at the first node
that rolls back or does not pass; running kiln upgrade again resumes there,
as a node that already runs the target image (its kubelet's release and the
kiln binary's digest it publishes in ` + nodefile.KilnDigestAnnotation + `) is skipped.

Refused before anything starts, each naming what: an --image that is not a
kiln build (no or invalid node.manifest.json, a missing artifact); a release
step Kubernetes or etcd does not support (Kubernetes: the same minor or the
next one, no skipped minor, no downgrade to an earlier minor; etcd: the same
minor or the next one, 3.5 to 3.6 but not 3.4 to 3.6); a node that is not
Ready; etcd voting members not answering.

The plan's columns: ORDER, NODE, ROLE, FROM (what the node runs: its kubelet,
a master's etcd, its kiln), TO (the image's), ACTION (roll, skip and why, or
refused and the pre-checks that fail; each refusal follows the table).

NOT BUILT YET: staging the image onto a node and rebooting it. The rollout
asks each node, through annotations on its Node (` + upgradeask.AskAnnotation + `), to
stage the image and reboot, and waits for its answer; no node acts on that ask
yet, so a rollout would only wait out its bound. Only --dry-run works; without
it kiln upgrade prints the plan and exits 1 saying so, having changed nothing
(or exits 0 when every node already runs the image).

Exit status: 0 when the plan may start, 1 when it is refused or the cluster
cannot be read, 2 for a usage error (a missing site file or PKI directory, an
--image that is not a kiln build). See docs/upgrade.md.`,
		Example: `  kiln upgrade -f site.yaml --pki pki/ --image out/ --dry-run`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, st, err := f.load()
			if err != nil {
				return err
			}
			build, err := imagemanifest.Open(image)
			if errors.Is(err, imagemanifest.ErrNotABuild) {
				return usageError{fmt.Errorf("--image %s: %w", image, err)}
			}
			if err != nil {
				return err
			}
			log := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
			p := &upgrade.Planner{Site: s, Target: build.Versions}
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
			if dryRun {
				return plan.Err()
			}
			return plan.Start()
		},
	}
	f.add(cmd)
	cmd.Flags().StringVar(&image, "image", "", "the output directory of kiln build to roll onto (required)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print the plan and change nothing (the only mode built)")
	cmd.MarkFlagRequired("image")
	return cmd
}
