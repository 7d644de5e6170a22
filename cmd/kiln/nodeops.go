package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kiln-project/kiln/contract/removednodes"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/ops/nodeops"
)

// The operator's commands against a running cluster, from the site file
// and the PKI kiln gen keeps.

func newNodeCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "node",
		Short: "List, remove and admit back the nodes of a running cluster (from the operator's machine or a master)",
		Long: `Operate on a running cluster with what kiln gen wrote: the site file names every
master's address, the PKI holds the admin and etcd client certificates. Each
command tries the site's masters in turn: the first whose apiserver is ready
(/readyz within 10 s), and etcd at every master's client URL (port 2379).
Run them from the operator's machine or from any master that has the site file
and the PKI. See docs/operations.md.`,
	}
	cmd.AddCommand(newNodeListCmd(), newNodeRemoveCmd(), newNodeAdmitCmd())
	return cmd
}

// clusterFlags are the flags every node command takes.
type clusterFlags struct{ site, pki string }

// load reads the site file and checks the PKI directory is there; both
// are the operator's to fix (usage errors).
func (f *clusterFlags) load() (*site.Site, pki.Store, error) {
	s, err := loadSite(f.site)
	if err != nil {
		return nil, pki.Store{}, err
	}
	if fi, err := os.Stat(f.pki); err != nil || !fi.IsDir() {
		return nil, pki.Store{}, usageError{fmt.Errorf("--pki %s: not a directory: give the PKI directory kiln gen keeps for this site", f.pki)}
	}
	return s, pki.Store{Dir: f.pki}, nil
}

func (f *clusterFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVarP(&f.site, "file", "f", "", "the site file (required)")
	cmd.Flags().StringVar(&f.pki, "pki", "pki", "the PKI directory kiln gen keeps")
	cmd.MarkFlagRequired("file")
}

func newNodeListCmd() *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "list -f SITE --pki DIR",
		Short: "List every node with its role, address, readiness, etcd membership, version and certificate expiry",
		Long: `List the site's nodes (in file order), the cluster's Nodes the site does not
name, and etcd members that belong to no node, one line each:

  NAME         the node
  ROLE         genesis, master or worker: the site's; for a Node the site does
               not name, master when it has the master label
               (` + manifests.MasterLabel + `), else "?" (a
               kubelet sets kiln.dev/role on itself: it is not read)
  ADDRESS      the site's static address, else the Node's InternalIP
  READY        the Node's Ready condition: Ready, NotReady, Unknown, or "no Node"
  ETCD         voter, learner or none (from etcd's member list, matched by the
               node's name or peer URL); "(no answer)" when that member does
               not answer a status call within 5 s
  KILN         the kiln version (agent and image) the node runs, which its
               role publishes on its Node every boot (annotation
               kiln.dev/version); "-" for a node that has not
  KUBELET      the kubelet's version as the Node reports it
  CERT-EXPIRY  the day the first of the node's own certificates in the PKI
               expires (kiln pki check lists them all)

Then a line per problem and note. kiln node list exits 1 when there is a
problem: a master of the site without an etcd member, a member that is stale
(named for a master at another peer URL, or for a worker, or for no node at
all), or an apiserver or etcd that could not be reached (what the other told
is still listed, "?" where a column is unknown). Notes name, among others, a
Node whose role has not said it finished on the boot its kubelet reports
(annotation kiln.dev/role-done), which kiln upgrade's health gate waits for,
and a node's last answer to kiln upgrade (a rollback, a stage it refused).`,
		Example: `  kiln node list -f site.yaml --pki pki/`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, st, err := f.load()
			if err != nil {
				return err
			}
			log := func(format string, args ...any) { fmt.Fprintf(cmd.ErrOrStderr(), format+"\n", args...) }
			l := &nodeops.Lister{Site: s, CertExpiry: nodeops.CertExpiry(s, st), Now: time.Now()}
			l.Kube, l.KubeErr = nodeops.ConnectAPI(ctx, s, st, "", 0, log)
			etcd, err := nodeops.ConnectEtcd(s, st, "")
			if err != nil {
				l.EtcdErr = err
			} else {
				defer etcd.Close()
				l.Etcd = etcd
			}
			listing := l.List(ctx)
			if err := listing.Write(cmd.OutOrStdout()); err != nil {
				return err
			}
			return listing.Err()
		},
	}
	f.add(cmd)
	return cmd
}

func newNodeRemoveCmd() *cobra.Command {
	var f clusterFlags
	var o nodeops.Options
	cmd := &cobra.Command{
		Use:   "remove NAME -f SITE --pki DIR [--timeout 5m]",
		Short: "Take a node out of the cluster: cordon, drain, leave etcd, delete the Node",
		Long: `Take the node NAME out of the cluster, in named steps that each print their
name, their place in the run and what they did: for a master, a check that its
etcd member can go (refused, before anything changes, when that would leave no
master or etcd without quorum; the refusal says why and what to do), then the
node is cordoned and drained (as kubectl drain, bounded by --timeout), leaves
etcd, is marked removed so its kiln-leave service stops it for good, is listed
in the ConfigMap ` + removednodes.Namespace + `/` + removednodes.Name + ` (the cluster's admission policy
then refuses its credentials any certificate request and any write to a Node),
and its Node is deleted. Its certificates still read what the Node authorizer
lets them until they expire: Kubernetes cannot revoke a client certificate.
To bring it back: kiln pki renew --node NAME, kiln gen, kiln node admit NAME,
then re-image it.

Every step is idempotent: a second run finishes what an interrupted one started.
NAME may be a node of the site, a Node of the cluster or an etcd member's name.
The apiserver used is another master's: a removed master's apiserver stops
with its etcd member. While no other master's is ready, they are tried again
for up to ` + nodeops.ConnectWait.String() + ` (a busy master can miss one probe); a master's own is
used only when it is the site's one master.

A master also leaves when it is removed through the API (its Node deleted or
its master label taken off): kiln-leave removes its etcd member itself.

Exit status: 1 when kiln refuses or a step fails (the message names the step),
2 for a usage error (an unknown node, a missing site file or PKI directory).
See docs/operations.md.`,
		Example: `  kiln node remove w1 -f site.yaml --pki pki/
  kiln node remove m2 -f site.yaml --pki pki/ --timeout 10m --delete-emptydir-data`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if name == "" {
				return usageError{errors.New("the node name is empty")}
			}
			if o.Timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s: must be more than 0", o.Timeout)}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, st, err := f.load()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			log := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
			r := &nodeops.Remover{Site: s, Log: log, Options: o}
			if r.Kube, err = nodeops.ConnectAPI(ctx, s, st, name, nodeops.ConnectWait, log); err != nil {
				return err
			}
			etcd, err := nodeops.ConnectEtcd(s, st, name)
			if err != nil {
				r.EtcdErr = err
			} else {
				defer etcd.Close()
				r.Etcd = etcd
			}
			err = r.Remove(ctx, name)
			if errors.Is(err, nodeops.ErrUnknownNode) {
				return usageError{err}
			}
			return err
		},
	}
	f.add(cmd)
	cmd.Flags().DurationVar(&o.Timeout, "timeout", nodeops.DefaultTimeout, "bound on the drain: past it a node that is not Ready is removed without it")
	cmd.Flags().DurationVar(&o.LeaveTimeout, "leave-timeout", nodeops.DefaultLeaveTimeout, "bound on the wait for a running node to say it stopped its kubelet and pods")
	cmd.Flags().BoolVar(&o.DeleteEmptyDirData, "delete-emptydir-data", false, "also evict pods with emptyDir volumes; their data is lost (kubectl drain's flag)")
	cmd.Flags().BoolVar(&o.EvictUnmanaged, "evict-unmanaged", false, "also evict pods no controller manages; nothing re-creates them (kubectl drain --force)")
	return cmd
}

func newNodeAdmitCmd() *cobra.Command {
	var f clusterFlags
	cmd := &cobra.Command{
		Use:   "admit NAME -f SITE --pki DIR",
		Short: "Let a removed node back in with the new kubelet client certificate in the PKI",
		Long: `Let the node NAME, which kiln node remove took out, back into the cluster: add
the credential ID of its kubelet client certificate in the PKI
(DIR/nodes/NAME/kubelet-client.crt) to its entry in the ConfigMap
` + removednodes.Namespace + `/` + removednodes.Name + `, so the admission policy lets that certificate request
certificates and write its Node again. The masters' anchor admits the
certificates the node's kubelet renews it into.

Refused when that certificate was issued before the removal: run
kiln pki renew --node NAME and kiln gen first, then boot the machine with the
new config. A node that is not listed as removed is an error, and nothing
changes.

Exit status: 1 when kiln refuses or the cluster cannot be reached, 2 for a
usage error. See docs/operations.md.`,
		Example: `  kiln pki renew -f site.yaml --pki pki/ --node w1
  kiln gen -f site.yaml --pki pki/ ...
  kiln node admit w1 -f site.yaml --pki pki/`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if name == "" {
				return usageError{errors.New("the node name is empty")}
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			s, st, err := f.load()
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			log := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
			a := &nodeops.Admitter{PKI: st, Log: log}
			if a.Kube, err = nodeops.ConnectAPI(ctx, s, st, "", nodeops.ConnectWait, log); err != nil {
				return err
			}
			err = a.Admit(ctx, name)
			if errors.Is(err, removednodes.ErrNotRemoved) || errors.Is(err, fs.ErrNotExist) {
				return usageError{fmt.Errorf("%w (nothing changed)", err)}
			}
			return err
		},
	}
	f.add(cmd)
	return cmd
}
