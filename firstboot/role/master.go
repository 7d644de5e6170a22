package role

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/command"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/manifests"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// masterPhases join the control plane: wait until a master of the site
// answers, start the kubelet (it registers the Node through that
// cluster while the join waits), wait until the cluster has settled (a
// master's Node Ready, cluster DNS serving) and the node's images are
// in, join etcd as a learner and get promoted, and only then start the
// apiserver, controller-manager and scheduler; the anchors take over
// once the node carries the master label.
func (n *Node) masterPhases() []phase {
	u := n.units()
	j := u.join
	notJoined := func() bool { return !u.env.stamped("master/etcd-join") }
	return []phase{
		{Name: "wait-cluster", RunIf: notJoined, Run: j.waitForCluster},
		{Name: "kubelet", RunIf: notJoined, Run: j.startKubeletBeforeJoin},
		{Name: "wait-settled", RunIf: notJoined, Run: j.waitSettled},
		{Name: "images", RunIf: notJoined, Run: func(ctx context.Context) error { return waitImages(ctx, j.sys, j.wait, j.env.log) }},
		{Name: "etcd-join", Once: true, Run: j.etcdJoin},
		{Name: "start", Run: u.plane.start},
		{Name: "apiserver", Run: u.plane.waitOwnAPIServer},
		{Name: "label", Once: true, Run: u.master.labelSelf},
		{Name: "node-ready", Run: u.master.waitSelfReady},
		{Name: "publish-version", Run: u.kubelet.publishVersion},
		{Name: "role-done", Run: u.kubelet.publishRoleDone},
	}
}

// masterJoin owns a master's way into an existing cluster, before its
// control plane starts: the wait for another master's etcd (answering
// genesis surveys meanwhile), the kubelet started ahead of the join, the
// wait for the cluster to settle, the node's images, and the etcd join.
type masterJoin struct {
	env    nodeEnv
	survey surveyor
	beacon *waitingBeacon
	api    clients
	cni    *podNetwork
	files  nodeFiles
	etcd   etcdJoiner
	sys    command.Runner
	wait   time.Duration
	port   int // the masters' etcd port
	// answering are the addresses of the masters whose etcd answered.
	answering []string
}

// waitForCluster waits, saying so every 30 s, until another master's
// etcd answers. A master never bootstraps; a certificate the cluster
// rejects, or a cluster whose certificate this node's CA did not sign
// (a config from another site's PKI), ends the wait at once, before
// anything is added to etcd. Meanwhile a master with no etcd member
// answers genesis surveys on its etcd port (beacon.go), so a genesis
// node powered on beside it rules it out at once. The wait has no
// bound: the cluster's genesis node ends it, and the console names what
// is missing.
func (j *masterJoin) waitForCluster(ctx context.Context) error {
	cfg, err := j.env.etcdClientTLS()
	if err != nil {
		return err
	}
	if len(j.env.otherMasters()) == 0 {
		return fmt.Errorf("the node file lists no other master to join")
	}
	defer j.beacon.stop()
	return retry.Wait(ctx, "the cluster (its genesis node bootstraps it; this master joins it)", retry.NoBound, j.env.log, func(ctx context.Context) error {
		j.beacon.start()
		s := j.survey.survey(ctx, cfg)
		if len(s.answering) > 0 {
			j.answering = nil
			for _, m := range s.answering {
				j.answering = append(j.answering, m.Address)
			}
			return nil
		}
		if err := s.foreign(); err != nil {
			return retry.Final(err)
		}
		if err := s.doubt(); err != nil {
			return err
		}
		return fmt.Errorf("no master's etcd answers yet")
	})
}

// beforeJoin are the static pods a master holds back until its etcd
// member is added: etcd needs the member list the add returns, and the
// rest need etcd.
var beforeJoin = append([]string{"etcd"}, afterPromotion...)

// startKubeletBeforeJoin starts the kubelet with the node-local DNS and
// no control-plane pod, as kubeadm's join starts it before its etcd
// member: the Node registers through the cluster that answered, gets
// its pod CIDR and its DaemonSet pods (kiln-net, kube-proxy) while the
// join waits for the cluster to settle, instead of after it. The anchors
// select the master label, which the node gets only once its own
// apiserver serves. The etcd-join phase hands this kubelet etcd's pod.
func (j *masterJoin) startKubeletBeforeJoin(ctx context.Context) error {
	return j.files.startNode(ctx, j.env.params(etcdmember.Membership{}), beforeJoin)
}

// waitSettled waits, saying so every 30 s, until a master that answered
// serves the API, its Node is Ready and cluster DNS has a ready endpoint:
// the cluster has finished its own bootstrap. A member added before that
// turns a genesis node's one-member etcd into a two-member quorum while
// both machines are at their busiest, and every write of the bootstrap
// then waits for the joiner: on one-vCPU machines the genesis's
// apiserver may never become ready once the learner is promoted, and a
// join as soon as the genesis's Node is Ready makes its cluster DNS
// start minutes later.
func (j *masterJoin) waitSettled(ctx context.Context) error {
	var masters []nodefile.Member
	for _, m := range j.env.otherMasters() {
		if slices.Contains(j.answering, m.Address) {
			masters = append(masters, m)
		}
	}
	kubelet, _ := j.api.kubelet() // nil: no CNI seeding while waiting
	return retry.Wait(ctx, "the cluster settled (a master's Node Ready, cluster DNS serving)", j.wait, j.env.log, func(ctx context.Context) error {
		err := firstSettledMaster(ctx, masters, j.api.kubeAt)
		if err != nil && kubelet != nil {
			j.cni.seedCNI(ctx, kubelet) // the Node is Ready once it has its pod CIDR
		}
		return err
	})
}

// firstSettledMaster is nil once one of masters, asked through its own
// apiserver, reports its Node Ready and a ready endpoint of cluster DNS;
// otherwise the first master's reason.
func firstSettledMaster(ctx context.Context, masters []nodefile.Member, kubeAt func(address string) (kubernetes.Interface, error)) error {
	_, err := firstMaster(ctx, masters, kubeAt, func(ctx context.Context, kube kubernetes.Interface, m nodefile.Member) error {
		if err := clustercheck.NodeReady(ctx, kube, m.Name, time.Time{}); err != nil {
			return err
		}
		return clustercheck.ServiceReady(ctx, kube, metav1.NamespaceSystem, manifests.ClusterDNSService)
	})
	return err
}

// firstMaster is the first of masters for which check, given a client of
// that master's own apiserver, is nil; otherwise an error with the first
// master's reason.
func firstMaster(ctx context.Context, masters []nodefile.Member, kubeAt func(address string) (kubernetes.Interface, error),
	check func(context.Context, kubernetes.Interface, nodefile.Member) error) (nodefile.Member, error) {
	var doubt error
	for _, m := range masters {
		kube, err := kubeAt(m.Address)
		if err == nil {
			err = check(ctx, kube, m)
		}
		if err == nil {
			return m, nil
		}
		if doubt == nil {
			doubt = fmt.Errorf("master %s (%s): %w", m.Name, m.Address, err)
		}
	}
	if doubt == nil {
		doubt = fmt.Errorf("no master to ask")
	}
	return nodefile.Member{}, doubt
}

// imagesUnit imports the node's images; it reports ready (active) once
// the pause sandbox and the static pods' images are in, and the kubelet
// is ordered after it.
const imagesUnit = "kiln-images.service"

// waitImages waits, within bound, until the kubelet can start at once, so the learner
// this node adds next starts within its bound instead of waiting for the
// import, which on a slow machine takes minutes.
func waitImages(ctx context.Context, sys command.Runner, bound time.Duration, log func(string, ...any)) error {
	return retry.Wait(ctx, "the node's images ("+imagesUnit+")", bound, log, func(ctx context.Context) error {
		out, err := sys.Run(ctx, "systemctl", "is-active", imagesUnit)
		switch state := strings.TrimSpace(string(out)); {
		case err == nil:
			return nil
		case state == "failed":
			return retry.Final(fmt.Errorf("%s failed: journalctl -u %s says why", imagesUnit, imagesUnit))
		case state != "":
			return fmt.Errorf("%s is %s", imagesUnit, state)
		default:
			return err
		}
	})
}

// etcdJoin joins the etcd of the masters that answered: on a boot that
// resumes a join a power cut interrupted, it waits for them again first.
func (j *masterJoin) etcdJoin(ctx context.Context) error {
	if len(j.answering) == 0 { // resumed after a power cut mid-join
		if err := j.waitForCluster(ctx); err != nil {
			return err
		}
	}
	cfg, err := j.env.etcdClientTLS()
	if err != nil {
		return err
	}
	c, err := connectCluster(j.answering, j.port, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	return j.etcd.join(ctx, c)
}
