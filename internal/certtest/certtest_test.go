package certtest

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A client trusting the CA alone reaches the server by each name the
// certificate was made for, and by no other.
func TestServingCertificateVerifiesForItsHosts(t *testing.T) {
	s, err := NewServing("127.0.0.1", "registry.test")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{s.Cert}}
	srv.StartTLS()
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	for _, tc := range []struct {
		serverName string
		ok         bool
	}{{"127.0.0.1", true}, {"registry.test", true}, {"other.test", false}} {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.Pool(), ServerName: tc.serverName}}
		resp, err := (&http.Client{Transport: tr}).Get("https://127.0.0.1:" + port + "/")
		if err == nil {
			resp.Body.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("server name %s: %v, want ok=%v", tc.serverName, err, tc.ok)
		}
		tr.CloseIdleConnections()
	}
}
