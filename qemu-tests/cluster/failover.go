package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync"

	"k8s.io/client-go/kubernetes"
)

// FailoverClient is an admin client that moves to the next apiserver
// when the one it asks gives no answer: a loaded TCG master can keep
// accepting connections and time out every request for minutes while
// another master answers. It starts with the kubeconfig's current
// context and, after a request fails in transport or with 503/504, sends
// the next requests to the next of apiservers (addresses, tried in
// order, round the list). kiln gen's kubeconfig names the discovery name
// as every context's TLS server name, so one transport fits every
// master. logf (may be nil) hears each move.
func FailoverClient(adminKubeconfig []byte, apiservers []string, dial func(ctx context.Context, network, addr string) (net.Conn, error), logf func(format string, args ...any)) (kubernetes.Interface, error) {
	if len(apiservers) == 0 {
		return nil, fmt.Errorf("failover client: no apiserver address")
	}
	_, rc, err := NetnsClient(adminKubeconfig, "", dial)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(rc.Host)
	if err != nil {
		return nil, fmt.Errorf("admin kubeconfig: server %q: %w", rc.Host, err)
	}
	port := u.Port()
	if port == "" {
		port = "443"
	}
	f := &failover{current: -1, logf: logf}
	for i, a := range apiservers {
		f.hosts = append(f.hosts, net.JoinHostPort(a, port))
		if f.hosts[i] == u.Host {
			f.current = i
		}
	}
	if f.current < 0 { // the current context is none of them: start with the first
		f.current = 0
	}
	rc.Wrap(func(rt http.RoundTripper) http.RoundTripper { return failoverTransport{rt, f} })
	return kubernetes.NewForConfig(rc)
}

// failover is the state a FailoverClient's transports share: the hosts
// and which one is current.
type failover struct {
	hosts []string
	logf  func(format string, args ...any)

	mu      sync.Mutex
	current int
}

// failoverTransport sends each request to the current host; one that
// gets no answer moves current on.
type failoverTransport struct {
	next http.RoundTripper
	f    *failover
}

// WrappedRoundTripper lets client-go reach the transport underneath
// (it warns of every timed-out request it cannot cancel otherwise).
func (t failoverTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

func (t failoverTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	t.f.mu.Lock()
	i := t.f.current
	t.f.mu.Unlock()
	r := req.Clone(req.Context())
	r.URL.Host, r.Host = t.f.hosts[i], ""
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		t.f.moveOn(i, err.Error())
	} else if resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusGatewayTimeout {
		t.f.moveOn(i, resp.Status)
	}
	return resp, err
}

// moveOn makes the host after i current, unless another request already
// moved on from i.
func (f *failover) moveOn(i int, why string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.current != i || len(f.hosts) == 1 {
		return
	}
	f.current = (i + 1) % len(f.hosts)
	if f.logf != nil {
		f.logf("admin client: %s gave no answer (%s): the next requests go to %s", f.hosts[i], why, f.hosts[f.current])
	}
}
