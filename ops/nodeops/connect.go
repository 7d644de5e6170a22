package nodeops

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"slices"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/retry"
	"github.com/kiln-project/kiln/node/clustercheck"
	"github.com/kiln-project/kiln/node/etcdmember"
)

// Bounds of reaching a master: its apiserver's /readyz, and every API
// call after.
const (
	probeBound = 10 * time.Second
	callBound  = 20 * time.Second
)

// EtcdClientStem is the PKI's client certificate the commands use for
// etcd: the apiserver's, the one the QEMU tests use too.
const EtcdClientStem = "apiserver-etcd-client"

// byPreference lists the site's masters in the order the commands try
// them: the site's (genesis first), with avoid (the node being removed,
// whose apiserver goes when its etcd member does) last.
func byPreference(s *site.Site, avoid string) []site.Node {
	ms := s.Masters()
	slices.SortStableFunc(ms, func(a, b site.Node) int {
		switch {
		case a.Name == avoid && b.Name != avoid:
			return 1
		case b.Name == avoid && a.Name != avoid:
			return -1
		}
		return 0
	})
	return ms
}

// ConnectAPI reaches the first master whose apiserver is ready, with the
// operator's admin.kubeconfig exactly as kiln gen writes it (the
// master's context: its address, the discovery name as TLS server
// name), trying each master of the site in turn, avoid last. It says
// which master answers and why each one before did not. While none is
// ready, the masters are tried again in rounds within wait (or ctx): a
// busy master can miss one probe's bound, and a cluster just back from a
// power cut has no ready apiserver for minutes. wait 0 is one round.
//
// A master being removed (avoid) is used only when it is the site's one
// master: its apiserver answers nothing but errors once its etcd member
// is gone, and the steps after that one need an apiserver.
func ConnectAPI(ctx context.Context, s *site.Site, st pki.Store, avoid string, wait time.Duration, log Logf) (kubernetes.Interface, error) {
	data, err := nodeconfig.AdminKubeconfigFor(s, st)
	if err != nil {
		return nil, fmt.Errorf("the admin kubeconfig from the PKI in %s: %w", st.Dir, err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, fmt.Errorf("the admin kubeconfig: %w", err)
	}
	ms := byPreference(s, avoid)
	others := slices.DeleteFunc(slices.Clone(ms), func(m site.Node) bool { return m.Name == avoid })
	removingMaster := len(others) < len(ms) && len(others) > 0
	if removingMaster {
		ms = others
	}
	aside := readyzAside(s)
	if wait <= 0 {
		kube, err := firstReady(ctx, s, kc, ms, aside, log)
		if err != nil {
			return nil, fmt.Errorf("no apiserver of the site %s is ready: %w", s.File, err)
		}
		return kube, nil
	}
	var kube kubernetes.Interface
	var last error
	round := 0
	_ = retry.WaitEvery(ctx, "a ready apiserver", wait, retryConnect, nil, func(ctx context.Context) error {
		round++
		kube, last = firstReady(ctx, s, kc, ms, aside, log)
		if last == nil {
			return nil
		}
		if round == 1 {
			if removingMaster {
				log("apiserver: waiting up to %s for another master than %s (its apiserver stops with its etcd member)", wait, avoid)
			} else {
				log("apiserver: waiting up to %s for a ready apiserver", wait)
			}
		}
		return last
	})
	switch {
	case last == nil:
		return kube, nil
	case removingMaster:
		return nil, fmt.Errorf("no other master's apiserver than %s's is ready (within %s): removing master %s needs one, as its own stops with its etcd member: %w",
			avoid, wait, avoid, last)
	}
	return nil, fmt.Errorf("no apiserver of the site %s is ready (within %s): %w", s.File, wait, last)
}

// ConnectWait is how long the commands that change the cluster wait for
// a ready apiserver, and retryConnect the pause between two rounds.
const (
	ConnectWait  = 5 * time.Minute
	retryConnect = 5 * time.Second
)

// firstReady is a client of the first of masters whose apiserver is
// ready (the readiness checks aside left out), or every master's error.
func firstReady(ctx context.Context, s *site.Site, kc *clientcmdapi.Config, masters []site.Node, aside []string, log Logf) (kubernetes.Interface, error) {
	var errs []error
	for _, m := range masters {
		kube, err := connectMaster(ctx, s, kc, m, aside, log)
		if err == nil {
			return kube, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

// readyzAside are the readiness checks a master's apiserver may still
// fail and be used: in a site of more than one master, the RBAC
// defaults' post-start hook (clustercheck.RBACDefaultsHook), as the
// masters' own agents leave it aside. The cluster has those roles in
// etcd since its genesis, and the hook, run again on every start, keeps
// a restored master's apiserver unready for minutes after it serves.
func readyzAside(s *site.Site) []string {
	if len(s.Masters()) > 1 {
		return []string{clustercheck.RBACDefaultsHook}
	}
	return nil
}

// connectMaster is a client of master m's apiserver once its /readyz
// (the checks aside left out) answers within probeBound.
func connectMaster(ctx context.Context, s *site.Site, kc *clientcmdapi.Config, m site.Node, aside []string, log Logf) (kubernetes.Interface, error) {
	url := nodeconfig.APIServerURL(s, m)
	rc, err := clientcmd.NewNonInteractiveClientConfig(*kc, nodeconfig.OperatorContext(s, pki.AdminStem, m), &clientcmd.ConfigOverrides{}, nil).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("the admin kubeconfig, master %s: %w", m.Name, err)
	}
	rc.Timeout = callBound
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("the admin kubeconfig, master %s: %w", m.Name, err)
	}
	pctx, cancel := context.WithTimeout(ctx, probeBound)
	err = clustercheck.APIServerReady(pctx, kube, aside...)
	cancel()
	if err != nil {
		log("apiserver: master %s (%s) is not ready within %s: %s", m.Name, url, probeBound, retry.OneLine(err))
		return nil, fmt.Errorf("master %s (%s): %w", m.Name, url, err)
	}
	log("apiserver: using master %s (%s)", m.Name, url)
	return kube, nil
}

// ConnectEtcd is a client for the site's etcd at every master's client
// URL (avoid last), with the etcd CA and the apiserver's etcd client
// certificate from the PKI. It connects lazily: a member that does not
// answer shows in the first call.
func ConnectEtcd(s *site.Site, st pki.Store, avoid string) (*etcdmember.Client, error) {
	cfg, err := EtcdTLS(st)
	if err != nil {
		return nil, err
	}
	var eps []string
	for _, m := range byPreference(s, avoid) {
		eps = append(eps, etcdmember.ClientURL(m.IP().String()))
	}
	return etcdmember.Dial(eps, cfg)
}

// EtcdTLS is the client side of the operator's etcd connections: the
// etcd CA and the apiserver's etcd client certificate from the PKI.
func EtcdTLS(st pki.Store) (*tls.Config, error) {
	p, err := st.Pair(EtcdClientStem)
	if err != nil {
		return nil, fmt.Errorf("the etcd client certificate: %w", err)
	}
	ca, err := st.Cert(pki.EtcdCA.Stem)
	if err != nil {
		return nil, fmt.Errorf("the etcd CA: %w", err)
	}
	cfg, err := etcdmember.ClientTLS(p.Cert, p.Key, ca)
	if err != nil {
		return nil, fmt.Errorf("the PKI in %s: %w", st.Dir, err)
	}
	return cfg, nil
}

// CertExpiry is when the first of node n's own certificates in the PKI
// expires (those kiln gen puts in its config, pki.NodeLeaves).
func CertExpiry(s *site.Site, st pki.Store) func(site.Node) (time.Time, error) {
	return func(n site.Node) (time.Time, error) {
		var first time.Time
		for _, l := range pki.NodeLeaves(s, n) {
			data, err := st.Cert(l.Stem)
			if err != nil {
				return time.Time{}, err
			}
			b, _ := pem.Decode(data)
			if b == nil {
				return time.Time{}, fmt.Errorf("%s.crt: no PEM certificate", l.Stem)
			}
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return time.Time{}, fmt.Errorf("%s.crt: %w", l.Stem, err)
			}
			if first.IsZero() || c.NotAfter.Before(first) {
				first = c.NotAfter
			}
		}
		return first, nil
	}
}

// MasterReady is nil when master name's own apiserver is ready, asked at
// its address with the admin credentials (the readiness checks of
// readyzAside left out): the health gate's apiserver check of a master,
// from the operator's machine.
func MasterReady(ctx context.Context, s *site.Site, st pki.Store, name string) error {
	i := slices.IndexFunc(s.Masters(), func(m site.Node) bool { return m.Name == name })
	if i < 0 {
		return fmt.Errorf("%s is not a master of the site %s", name, s.File)
	}
	m := s.Masters()[i]
	data, err := nodeconfig.AdminKubeconfigFor(s, st)
	if err != nil {
		return fmt.Errorf("the admin kubeconfig from the PKI in %s: %w", st.Dir, err)
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("the admin kubeconfig: %w", err)
	}
	_, err = connectMaster(ctx, s, kc, m, readyzAside(s), func(string, ...any) {})
	return err
}
