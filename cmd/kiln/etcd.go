package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/node/etcdmember"
	"github.com/kiln-project/kiln/node/etcdsnapshot"
	"github.com/kiln-project/kiln/ops/nodeops"
)

func newEtcdCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "etcd",
		Short: "Operate on the cluster's etcd: snapshots",
	}
	cmd.AddCommand(newEtcdSnapshotCmd())
	return cmd
}

// nodeSnapshotBound bounds a master's scheduled snapshot, inside its
// service's TimeoutStartSec (15 min, gen/nodeconfig) so the command
// reports its own failure rather than being killed.
const nodeSnapshotBound = 14 * time.Minute

func newEtcdSnapshotCmd() *cobra.Command {
	var f clusterFlags
	var out string
	var node bool
	cmd := &cobra.Command{
		Use:   "snapshot (-f SITE --pki DIR -o FILE | --node)",
		Short: "Pull a verified etcd snapshot to this machine, or take a master's scheduled one",
		Long: `From the operator's machine (-f, --pki, -o): take a snapshot of the cluster's
etcd through its client API and write it to FILE. The site's masters are tried
in turn (genesis first) at their address, port 2379, with the PKI's etcd CA and
apiserver-etcd-client certificate; the first that answers a status call and
streams a whole snapshot gives it. The snapshot is written to a temp file
beside FILE, synced, verified (the SHA-256 etcd appends to the database, and the
database's header), then given its name. kiln refuses a FILE that exists: it
never overwrites a file it did not write. Progress (which master, database size,
revision) goes to stderr; the result (size, revision, storage version, sha256
of the file) to stdout.

On a master (--node), as its kiln-etcd-snapshot.timer runs it: take a snapshot of
the master's own member (https://127.0.0.1:2379, with /etc/kiln/pki's etcd client
certificate) into ` + layout.EtcdSnapshotDir + `, named
etcd-<UTC time>-rev<revision>.db, and keep the newest cluster.etcdSnapshots.keep
of them. When the state partition cannot spare the room (the snapshot's size
plus a reserve of a tenth of the filesystem, at least 1 GiB, left free), older
snapshots go first; when even that is not enough, the snapshot is skipped and
the command fails saying so: etcd's own data comes first.

Restoring a cluster from a snapshot: docs/operations.md, "Restoring a lost
cluster".`,
		Example: `  kiln etcd snapshot -f site.yaml --pki pki/ -o backup.db
  kiln etcd snapshot --node`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
			var snap etcdsnapshot.Snapshot
			var err error
			switch {
			case node && (f.site != "" || out != ""):
				return usageError{errors.New("--node takes a snapshot on this master from its own files: give it without -f and -o")}
			case node:
				var skip string
				snap, skip, err = nodeSnapshot(ctx, log)
				if skip != "" {
					fmt.Fprintln(cmd.OutOrStdout(), skip)
					return nil
				}
			case f.site == "" || out == "":
				return usageError{errors.New("give -f SITE and -o FILE (and --pki DIR) to pull a snapshot, or --node on a master")}
			default:
				snap, err = pullSnapshot(ctx, &f, out, log)
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s: %d bytes, revision %d, storage version %s, sha256 %s\n",
				snap.Path, snap.Size, snap.Revision, snap.Version, snap.SHA256)
			return nil
		},
	}
	cmd.Flags().StringVarP(&f.site, "file", "f", "", "the site file (with -o)")
	cmd.Flags().StringVar(&f.pki, "pki", "pki", "the PKI directory kiln gen keeps")
	cmd.Flags().StringVarP(&out, "output", "o", "", "the snapshot file to write; refused when it exists")
	cmd.Flags().BoolVar(&node, "node", false, "on a master: a scheduled snapshot of its own member into "+layout.EtcdSnapshotDir)
	return cmd
}

// pullSnapshot is the operator's snapshot, from the first master that
// gives one.
func pullSnapshot(ctx context.Context, f *clusterFlags, out string, log etcdsnapshot.Logf) (etcdsnapshot.Snapshot, error) {
	s, st, err := f.load()
	if err != nil {
		return etcdsnapshot.Snapshot{}, err
	}
	cfg, err := nodeops.EtcdTLS(st)
	if err != nil {
		return etcdsnapshot.Snapshot{}, pkiError(err)
	}
	var sources []etcdsnapshot.Source
	for _, m := range s.Masters() {
		url := etcdmember.ClientURL(m.IP().String())
		c, err := etcdmember.Dial([]string{url}, cfg)
		if err != nil {
			return etcdsnapshot.Snapshot{}, err
		}
		defer c.Close()
		sources = append(sources, etcdsnapshot.Source{Name: m.Name, Endpoint: url, Member: c.Maintenance()})
	}
	snap, err := etcdsnapshot.Pull(ctx, sources, out, log)
	if errors.Is(err, etcdsnapshot.ErrExists) {
		return snap, usageError{err}
	}
	return snap, err
}

// nodeSnapshot is a master's scheduled snapshot; skip says why there is
// none when the site turned snapshots off.
func nodeSnapshot(ctx context.Context, log etcdsnapshot.Logf) (snap etcdsnapshot.Snapshot, skip string, err error) {
	nf, err := nodefile.Read(nodefile.Path)
	if err != nil {
		return snap, "", err
	}
	if nf.Role != nodefile.RoleGenesis && nf.Role != nodefile.RoleMaster {
		return snap, "", usageError{fmt.Errorf("%s: node %s is a %s: only a master has an etcd member to snapshot", nodefile.Path, nf.Name, nf.Role)}
	}
	if nf.EtcdSnapshots == nil {
		return snap, "etcd snapshots are off (the site's cluster.etcdSnapshots.every is 0)", nil
	}
	cfg, err := etcdmember.ReadClientTLS(nodefile.PKIDir)
	if err != nil {
		return snap, "", err
	}
	url := etcdmember.ClientURL("127.0.0.1")
	c, err := etcdmember.Dial([]string{url}, cfg)
	if err != nil {
		return snap, "", err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, nodeSnapshotBound)
	defer cancel()
	d := etcdsnapshot.Dir{Path: layout.EtcdSnapshotDir, Keep: nf.EtcdSnapshots.Keep, Disk: etcdsnapshot.StatFS{}, Now: time.Now, Log: log}
	snap, err = d.Take(ctx, c.Maintenance(), url)
	return snap, "", err
}
