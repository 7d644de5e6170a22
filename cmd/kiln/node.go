package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/kiln-project/kiln/contract/upgradeask"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kiln-project/kiln/builder/imageseed"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/contract/nodelabels"
	"github.com/kiln-project/kiln/contract/removednodes"
	"github.com/kiln-project/kiln/firstboot"
	"github.com/kiln-project/kiln/firstboot/leave"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/anchor"
	"github.com/kiln-project/kiln/node/catalog"
	"github.com/kiln-project/kiln/node/kilnnet"
	"github.com/kiln-project/kiln/node/netcheck"
	"github.com/kiln-project/kiln/node/servingcert"
)

// The subcommands below run on nodes: in the image's units and in the
// kiln container image.

func newRoleCmd() *cobra.Command {
	var root string
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "role",
		Short: "Make this node what /etc/kiln/node.json says (run by kiln-role.service)",
		Long: `Do the node's role, after kiln firstboot applied its config.

genesis: refuse if etcd already answers at another master of the site; write
etcd's and the apiserver's static pods (on the state partition), the node-local
CoreDNS and the kubelet config; start the kubelet; wait for the apiserver through
the discovery name; give its own Node the pod network's first block when no Node
has a pod CIDR yet and write the CNI configuration for it; once the apiserver is
ready, write the controller-manager's and the scheduler's; apply the add-ons
(kiln-net CNI, kube-proxy, cluster DNS) by server-side apply; label the node;
validate with a pod that resolves the kubernetes service and whose logs are
read back. Later boots bring the control plane back in order: the kubelet
starts with etcd alone, the apiserver once the local etcd member reads through
quorum ("waiting for etcd quorum on <address>" every 30 s) and it is this
master's turn: the master whose etcd member leads starts first, the others once
another master's apiserver is ready (at most 5 min later), so that after a
whole-cluster power cut one apiserver at a time runs its costly start; the
controller-manager and scheduler once the apiserver is ready (beside other
etcd members, both readiness checks leave out the hook that reconciles the
RBAC defaults the cluster already has); then wait for Ready. A wait that
passes --wait starts the next components anyway.

Every role records its Node's pod CIDR on the state partition
(/var/lib/kiln/pod-cidr) and writes the CNI configuration from it before the
kubelet starts on every later boot.
A genesis node whose cluster already exists (another master's etcd answers)
joins it as a master instead.

master: wait until another master's etcd answers (refused at once when its
certificates are from another site's CAs), then until a master's Node is Ready
and cluster DNS serves (the cluster has finished its own bootstrap) and this
node's images are in;
join etcd as a learner, start it, get it promoted; only then start the
apiserver, and the controller-manager and scheduler once it is ready (in that
order on every later boot too), label the node and wait for Ready.
Each phase is stamped on the state partition when done: a join cut short by a
power cut resumes from the first unstamped phase.

worker: write the kubelet config and node-local DNS and start the kubelet.

Ends with "kiln-firstboot: done role=<role>" or "kiln-firstboot: error: ...".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := firstboot.RunRole(ctx, root, cmd.OutOrStdout(), firstboot.HostSystem{}, wait, version); err != nil {
				return reportedError{err} // the agent's final line said it
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "root of the node (for tests)")
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Minute, "bound on each wait for the cluster (apiserver, node Ready, validation pod)")
	return cmd
}

// containerdBound is how long kiln images import, started beside
// containerd, waits for containerd to accept connections.
const containerdBound = 5 * time.Minute

func newImagesCmd() *cobra.Command {
	images := &cobra.Command{Use: "images", Short: "The container images baked into this node image"}
	var (
		root     string
		parallel int
	)
	imp := &cobra.Command{
		Use:   "import",
		Short: "Import the baked image archives into containerd (run by kiln-images.service)",
		Long: `Import the archives listed in /usr/lib/kiln/images.json into containerd's
k8s.io namespace, skipping those imported before (containerd's store is on the
state partition). A node imports the images its role (from /etc/kiln/node.json)
can run: a worker has no control-plane image. The pause sandbox and the images
of the node's static pods come first; then it tells systemd it is ready (the
kubelet is ordered after it) and imports the add-ons' images. On a boot after
the first the static pods' images are stamped as imported: it tells systemd at
once, then checks containerd. It waits up to ` + containerdBound.String() + ` for containerd's socket.
Up to --parallel archives are imported at once (containerd unpacks each on one
core).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cat, err := catalog.Read(root + catalog.Path)
			if err != nil {
				return err
			}
			node, err := nodefile.Read(root + nodefile.Path)
			if err != nil {
				return err
			}
			mine, boot := cat.ForRole(node.Role)
			// kiln-images.service is Type=notify: the kubelet, ordered
			// after it, starts once its static pods' images are in.
			ready := func() { daemon.SdNotify(false, daemon.SdNotifyReady) }
			ctr := catalog.AfterContainerd(command.Host{}, root+catalog.ContainerdSocket, containerdBound)
			return mine.Import(cmd.Context(), root, ctr, cmd.OutOrStdout(), boot, parallel, ready)
		},
	}
	imp.Flags().StringVar(&root, "root", "", "root of the node (for tests)")
	imp.Flags().IntVar(&parallel, "parallel", runtime.NumCPU(), "how many archives to import at once (default: the node's CPUs)")
	images.AddCommand(imp, newSeedCmd())
	return images
}

func newSeedCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "seed",
		Short: "Plant the image's ready-made containerd store on the state partition (run by kiln-seed.service)",
		Long: `Mount the containerd seed baked into this node image (` + imageseed.Image + `,
read-only on ` + imageseed.MountDir + `) and, when containerd's store (` + imageseed.Store + `,
on the state partition) is not yet planted from it, plant it: containerd's
metadata and the images' manifests and configs are copied, every unpacked
image layer becomes a link into the mounted seed. The node's pods then start
without importing their images. A store containerd has run on that holds
another seed's images, or images a kiln without seeds imported, is moved whole
into a kiln-replaced-<time> directory inside the store (nothing is deleted).
Runs before containerd on every boot; a store planted from this seed is left
as it is.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			start := time.Now()
			out := cmd.OutOrStdout()
			logf := func(f string, a ...any) { fmt.Fprintf(out, "kiln-seed: "+f+"\n", a...) }
			p := &imageseed.Planter{Root: root, Sys: command.Host{}, Log: logf}
			res, err := p.Plant(cmd.Context())
			switch {
			case errors.Is(err, imageseed.ErrNoSeed):
				logf("%v: kiln images import imports every image", err)
				return nil
			case err != nil:
				return err
			case res.Planted:
				logf("containerd's store planted from the image's seed: %d images, %d layers linked, in %s",
					len(res.Seed.Images), len(res.Seed.Snapshots), time.Since(start).Round(time.Millisecond))
			default:
				logf("containerd's store is this image's seed (%d images)", len(res.Seed.Images))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "root of the node (for tests)")
	return cmd
}

func newNetCmd() *cobra.Command {
	var server, dir, clusterCIDR string
	var interval time.Duration
	cmd := &cobra.Command{
		Use:   "net --server URL --cluster-cidr CIDR",
		Short: "kiln-net: keep this node's CNI configuration, pod routes and pod forwarding rules (DaemonSet)",
		Long: `kiln-net, the kiln-net DaemonSet's container (host network, NODE_NAME set from
spec.nodeName). On this node it keeps, every --interval and on every Node event:

  - the CNI configuration (--conf-dir/` + kilnnet.ConfName + `): bridge kiln0 with
    host-local IPAM on the pod CIDR the controller-manager gave this Node; the
    bridge does not masquerade;
  - one route per other Node's pod CIDR (inside --cluster-cidr) via that Node's
    InternalIP, with route protocol 0x4b (75); it removes only routes of that
    protocol, when their Node is gone: an operator's routes are never touched;
  - iptables (the nft backend, as the node's): chain KILN-FORWARD accepting
    forwarding from and to --cluster-cidr, jumped to from the first rule of
    FORWARD (put back first when Docker or anything inserts above it), and chain
    KILN-POSTROUTING (nat) masquerading only traffic from --cluster-cidr that
    leaves it, so pods on different nodes see each other's addresses.

When it stops it leaves the routes and rules in place for the running pods.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			node := os.Getenv("NODE_NAME")
			if node == "" {
				return usageError{fmt.Errorf("NODE_NAME is not set (the DaemonSet sets it from spec.nodeName)")}
			}
			cidr, err := netip.ParsePrefix(clusterCIDR)
			if err != nil {
				return usageError{fmt.Errorf("--cluster-cidr: %w", err)}
			}
			kube, err := inClusterVia(server)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			logf := func(f string, a ...any) { fmt.Fprintf(cmd.OutOrStdout(), f+"\n", a...) }
			return kilnnet.Run(ctx, kilnnet.Config{Kube: kube, Node: node, ConfDir: dir, ClusterCIDR: cidr, Interval: interval,
				Routes: kilnnet.IPRoutes{IPv6: cidr.Addr().Is6()}, Firewall: kilnnet.Iptables{}, Log: logf})
		},
	}
	cmd.Flags().StringVar(&server, "server", "", "apiserver URL (the discovery name)")
	cmd.Flags().StringVar(&dir, "conf-dir", manifests.CNIConfDir, "CNI configuration directory")
	cmd.Flags().StringVar(&clusterCIDR, "cluster-cidr", "", "the cluster pod CIDR (the site's podCIDR): routed between nodes, accepted in FORWARD, masqueraded only when leaving it")
	cmd.Flags().DurationVar(&interval, "interval", 30*time.Second, "how often to re-check the configuration, routes and rules")
	cmd.MarkFlagRequired("server")
	cmd.MarkFlagRequired("cluster-cidr")
	return cmd
}

func newCheckCmd() *cobra.Command {
	check := &cobra.Command{Use: "check", Short: "Checks run inside pods to validate a cluster (the kiln image)"}
	var retry time.Duration
	var status int
	var answer netcheck.Answer
	var servers, serversOf []string
	dns := &cobra.Command{
		Use:   "dns NAME",
		Short: "Resolve NAME with the pod's resolver and print the addresses",
		Long: `Resolve NAME with the pod's resolver and print the addresses.

With --want or --not it retries (within --retry) until the answer holds
every --want address and no --not address: the discovery name follows
the apiservers serving, so a check of that set waits here for it.

Each --server is asked as well, directly and over UDP only ("resolved
NAME at SERVER over UDP: ..."), and so is each address a --servers-of
name resolves to (a headless Service of DNS pods: their current pod IPs):
a DNS server's pod IP, or a ClusterIP, proves UDP between pods where the
pod's resolver might fall back to TCP.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			addrs, err := netcheck.Resolve(cmd.Context(), args[0], answer, retry, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "resolved %s: %v\n", args[0], addrs)
			servers := slices.Clone(servers)
			for _, name := range serversOf {
				addrs, err := netcheck.Resolve(cmd.Context(), name, netcheck.Answer{}, retry, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "resolved %s: %v\n", name, addrs)
				servers = append(servers, addrs...)
			}
			for _, server := range servers {
				addrs, err := netcheck.ResolveUDP(cmd.Context(), args[0], server, answer, retry, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "resolved %s at %s over UDP: %v\n", args[0], server, addrs)
			}
			return nil
		},
	}
	httpGet := &cobra.Command{
		Use:   "http URL...",
		Short: "GET each URL and print its answer (\"got URL: body\")",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, u := range args {
				body, err := netcheck.GetStatus(cmd.Context(), u, status, retry, cmd.ErrOrStderr())
				if err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "got %s: %s\n", u, body)
			}
			return nil
		},
	}
	httpGet.Flags().IntVar(&status, "status", http.StatusOK, "the HTTP status each URL must answer with (e.g. 403 for a refusal the check expects)")
	for _, c := range []*cobra.Command{dns, httpGet} {
		c.Flags().DurationVar(&retry, "retry", 0, "keep trying this long")
	}
	dns.Flags().StringSliceVar(&answer.Include, "want", nil, "an address the answer must hold (repeatable)")
	dns.Flags().StringSliceVar(&answer.Exclude, "not", nil, "an address the answer must not hold (repeatable)")
	dns.Flags().StringSliceVar(&servers, "server", nil, "also ask this DNS server (IP or IP:port) directly, over UDP only (repeatable)")
	dns.Flags().StringSliceVar(&serversOf, "servers-of", nil, "also ask each address this name resolves to, directly, over UDP only (repeatable)")
	var listen string
	serve := &cobra.Command{
		Use:   "serve",
		Short: "Answer every HTTP request with this pod's host name and the caller's address as seen here",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return netcheck.Serve(ctx, listen)
		},
	}
	serve.Flags().StringVar(&listen, "listen", ":8080", "address to listen on")
	check.AddCommand(dns, httpGet, serve)
	return check
}

func newAnchorCmd() *cobra.Command {
	var components []string
	var server, root string
	var cleanup, applyLabels, approveServing, keepRemoved bool
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "anchor --component NAME [--component NAME]...",
		Short: "Keep control-plane components' static pods (and the discovery zone) on this node (anchor DaemonSets)",
		Long: `Keep components anchored on this node, from an anchor DaemonSet's pod. The
masters' anchor (` + manifests.MastersAnchor + `) keeps all of them in one pod; the
other nodes' (` + manifests.OthersAnchor + `) the zone only.

--component etcd|kube-apiserver|kube-controller-manager|kube-scheduler renders
the component's static pod from /etc/kiln/node.json and the image's catalog and
keeps it in the kubelet's static pod directory (atomic writes, checked every
30 s), so the kubelet runs it with no apiserver. With --cleanup (the pod's
preStop hook) it moves the manifests to /var/lib/kiln/manifests-backup, in the
order given, within --timeout.

--component discovery keeps the node-local CoreDNS zone listing the ready
apiservers from the kubernetes Endpoints (every 10 s); it never writes an empty
zone.

--component may be repeated or take a comma-separated list.

--apply-node-labels (the masters' anchor) also applies, every 30 s, the labels
workers request on their Nodes (annotation ` + nodelabels.Annotation + `) that a
kubelet may not set itself, when this master's node file gives that worker the
label with that value (workerLabels, from the site), except the control-plane
role and node-restriction.kubernetes.io/ labels; it names every other request
in its log.

--approve-serving-certs (the masters' anchor) answers, every 5 s, the kubelets'
serving certificate requests (signer kubernetes.io/kubelet-serving, made by a
DHCP node's kubelet): approved when the node is in the site (siteNodes in this
master's node file), asks for its own name and, as addresses, only what its Node
reports (a static node: its site address) and no other node has; denied with
the reason otherwise.

--keep-removed-nodes (the masters' anchor) also admits, every 30 s, in the
removed-nodes ConfigMap (` + removednodes.Namespace + `/` + removednodes.Name + `), the
certificates issued to the kubelet of a node kiln node admit let back in on a
request made with a certificate its entry admits, so that its kubelet's
rotated client certificate is not refused.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := anchor.CheckComponents(components); err != nil {
				return usageError{fmt.Errorf("--component: %w", err)}
			}
			logf := func(f string, a ...any) { fmt.Fprintf(cmd.OutOrStdout(), f+"\n", a...) }
			h := anchor.Host{Root: root, Log: logf}
			if cleanup {
				ctx, cancel := context.WithTimeout(cmd.Context(), timeout)
				defer cancel()
				return h.CleanupAll(ctx, components, time.Now())
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			var kube kubernetes.Interface
			if slices.Contains(components, anchor.Discovery) || applyLabels || approveServing || keepRemoved {
				var err error
				if kube, err = inClusterVia(server); err != nil {
					return err
				}
			}
			if approveServing {
				site := func() (servingcert.Site, error) {
					f, err := nodefile.Read(filepath.Join(root, nodefile.Path))
					if err != nil {
						return nil, err
					}
					return f.SiteNodes, nil
				}
				go (&servingcert.Approver{Kube: kube, Site: site, Log: logf}).Run(ctx, 5*time.Second)
			}
			if applyLabels {
				site := func() (map[string]map[string]string, error) {
					f, err := nodefile.Read(filepath.Join(root, nodefile.Path))
					if err != nil {
						return nil, err
					}
					return f.WorkerLabels, nil
				}
				go (&nodelabels.Reconciler{Kube: kube, Site: site, Log: logf}).Run(ctx, 30*time.Second)
			}
			if keepRemoved {
				go (&removednodes.Reconciler{Kube: kube, Log: logf}).Run(ctx, 30*time.Second)
			}
			h.RunAll(ctx, components, kube)
			return nil
		},
	}
	cmd.Flags().StringSliceVar(&components, "component", nil, "an anchored component (repeat, or a comma-separated list)")
	cmd.Flags().StringVar(&server, "server", "", "apiserver URL (the discovery name), for the discovery anchor and the masters' anchor's --apply-node-labels, --approve-serving-certs and --keep-removed-nodes")
	cmd.Flags().BoolVar(&applyLabels, "apply-node-labels", false, "also apply the labels workers request on their Nodes that the site gives them")
	cmd.Flags().BoolVar(&approveServing, "approve-serving-certs", false, "also approve the kubelets' serving certificate requests that the site vouches for")
	cmd.Flags().BoolVar(&keepRemoved, "keep-removed-nodes", false, "also admit the rotated certificates of removed nodes admitted back")
	cmd.Flags().StringVar(&root, "root", "/", "where the host's paths are")
	cmd.Flags().BoolVar(&cleanup, "cleanup", false, "move the components' manifests to the backup directory and exit (preStop)")
	cmd.Flags().DurationVar(&timeout, "timeout", 20*time.Second, "bound on --cleanup")
	cmd.MarkFlagRequired("component")
	return cmd
}

// inClusterVia is the pod's service account, talking to the apiserver
// through the discovery name (the service VIP needs kube-proxy).
func inClusterVia(server string) (kubernetes.Interface, error) {
	if server == "" {
		return nil, usageError{fmt.Errorf("--server is required")}
	}
	const sa = "/var/run/secrets/kubernetes.io/serviceaccount"
	return kubernetes.NewForConfig(&rest.Config{Host: server, BearerTokenFile: sa + "/token",
		TLSClientConfig: rest.TLSClientConfig{CAFile: sa + "/ca.crt"}, Timeout: 30 * time.Second})
}

func newLeaveWatchCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "leave-watch",
		Short: "Stop this node for good once it is removed (run by kiln-leave.service)",
		Long: `Read this node's Node object every 10 s with the kubelet's credential. When
kiln node remove has marked it (annotation ` + nodefile.RemovedAnnotation + `), record the removal on the
state partition (` + nodefile.RemovedStamp + `), stop the kubelet and every pod (kubepods.slice),
say so on the console and answer on the Node (annotation ` + nodefile.LeftAnnotation + `). A node
with the record stays out on every later boot: kiln-role refuses to start, the
kubelet does not start. Re-image the machine with a blank state disk to bring
it back.

A master also leaves when two reads in a row find its Node deleted or without
the label ` + manifests.MasterLabel + ` (once its role had labelled it): it
removes its own etcd member first, through the other masters and only when etcd
keeps a quorum without it (a refusal is printed and tried again), then stops as
above, moves its control-plane manifests to ` + manifests.AnchorBackupDir + `
and wipes ` + manifests.EtcdDataDir + `. A master kiln node remove took out does the
same cleanup once etcd confirms its member is gone.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			console := func(format string, args ...any) { fmt.Fprintf(cmd.OutOrStdout(), "kiln-leave: "+format+"\n", args...) }
			w, err := leave.NewWatcher(root, firstboot.HostSystem{}, console)
			if err != nil {
				return err
			}
			return w.Run(ctx)
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "root of the node (for tests)")
	return cmd
}

func newBootSlotCmd() *cobra.Command {
	var root string
	var deadline time.Duration
	cmd := &cobra.Command{
		Use:   "slot",
		Short: "Conclude this boot's root slot and keep a trying boot's deadline (run by kiln-boot-slot.service)",
		Long: `Read the boot-state record GRUB left on the ESP (/kiln/grubenv) and conclude
what this boot of a disk node is (docs/upgrade.md):

- the active slot: nothing to do;
- the active slot after a trying boot of the other slot that was not marked
  good: clear the stage, keep why in the record, and say on the console
  "kiln: rolled back from <slot> to <slot>: <reason>";
- the trying boot of a staged slot: the role marks it good after its health
  gate (kiln firstboot role). This command keeps its deadline: if the boot has
  no verdict --deadline after the kernel started, whatever stopped the agent,
  it records "no verdict within <deadline> of the boot" and reboots, and GRUB
  boots the active slot.

A boot that names no slot (kiln.slot=: an ISO or PXE boot) has nothing to do.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return firstboot.RunBootSlot(ctx, root, cmd.OutOrStdout(), firstboot.HostSystem{}, deadline)
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "root of the node (for tests)")
	cmd.Flags().DurationVar(&deadline, "deadline", firstboot.TrialDeadline, "how long after the kernel started a trying boot may go without a verdict")
	return cmd
}

func newUpgradeServiceCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Act on kiln upgrade's ask on this node's Node (run by kiln-upgrade.service)",
		Long: `Watch this node's own Node, as its kubelet, for kiln upgrade's ask
(` + upgradeask.AskAnnotation + `), and act on each request once (docs/upgrade.md):

- fetch the build's vmlinuz, initrd.img and rootfs.squashfs from the ask's URL,
  check each against the ask's sha256, write the root into the slot this boot
  does not run and read it back, the kernel and initrd onto the ESP, and mark
  the slot staged for one try in the boot-state record;
- answer ` + upgradeask.StagedAnnotation + ` and reboot, or ` + upgradeask.FailedAnnotation + ` with
  why it could not stage (it keeps running its image);
- on the boots after, answer how the stage ended when it rolled back
  (` + upgradeask.RolledBackAnnotation + `) or never finished.

The last stage is kept in ` + firstboot.UpgradeStagePath + `. A node booted from
the ISO or by PXE has no root slots: it answers each ask that it cannot stage.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return firstboot.RunUpgrade(ctx, root, cmd.OutOrStdout(), firstboot.HostSystem{})
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "root of the node (for tests)")
	return cmd
}
