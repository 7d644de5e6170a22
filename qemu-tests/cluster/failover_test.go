package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"testing"
)

// A request that gets no answer sends the next one to the next master,
// round the list, through the admin kubeconfig kiln gen writes.
func TestFailoverClientMovesToTheNextMaster(t *testing.T) {
	tp := ThreeNodes()
	pkiDir := filepath.Join(t.TempDir(), "pki")
	if _, err := Configs(tp.Site(), pkiDir); err != nil {
		t.Fatal(err)
	}
	admin, err := AdminKubeconfig(tp.Site(), pkiDir)
	if err != nil {
		t.Fatal(err)
	}
	masters := tp.MasterIPs()
	var dialed []string
	refused := errors.New("test dialer: not connecting")
	kube, err := FailoverClient(admin, masters, func(_ context.Context, _, addr string) (net.Conn, error) {
		dialed = append(dialed, addr)
		return nil, refused
	}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := kube.Discovery().ServerVersion(); err == nil {
			t.Fatal("ServerVersion answered through a dialer that connects nowhere")
		}
	}
	want := []string{masters[0] + ":6443", masters[1] + ":6443", masters[0] + ":6443"}
	if fmt.Sprint(dialed) != fmt.Sprint(want) {
		t.Fatalf("dialed %v, want %v (current context first, then the next master, round)", dialed, want)
	}
	if _, err := FailoverClient(admin, nil, nil, nil); err == nil {
		t.Error("a failover client with no apiserver was made")
	}
}

// Which answers move the client on: none at all, and the apiserver's own
// "unavailable" and "timed out"; any other status is an answer.
func TestFailoverTransportMovesOnNoAnswer(t *testing.T) {
	tests := []struct {
		status int
		err    error
		moves  bool
	}{
		{status: http.StatusOK},
		{status: http.StatusNotFound},
		{status: http.StatusInternalServerError},
		{status: http.StatusServiceUnavailable, moves: true},
		{status: http.StatusGatewayTimeout, moves: true},
		{err: context.DeadlineExceeded, moves: true},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprint(tc.status, tc.err), func(t *testing.T) {
			f := &failover{hosts: []string{"10.0.0.1:6443", "10.0.0.2:6443"}}
			var asked string
			rt := failoverTransport{roundTrip(func(r *http.Request) (*http.Response, error) {
				asked = r.URL.Host
				if tc.err != nil {
					return nil, tc.err
				}
				return &http.Response{StatusCode: tc.status, Status: http.StatusText(tc.status), Body: http.NoBody}, nil
			}), f}
			req, _ := http.NewRequest("GET", "https://kube-apiserver.kiln.internal:6443/version", nil)
			if resp, err := rt.RoundTrip(req); err == nil {
				resp.Body.Close()
			}
			if asked != "10.0.0.1:6443" {
				t.Fatalf("asked %s, want the current host 10.0.0.1:6443", asked)
			}
			if moved := f.current == 1; moved != tc.moves {
				t.Fatalf("moved on: %v, want %v", moved, tc.moves)
			}
		})
	}
}

type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
