package nodeops

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kiln-project/kiln/contract/removednodes"
	"github.com/kiln-project/kiln/gen/pki"
)

// writeKubeletClient writes node's kubelet client certificate, issued
// at issued as kiln issues them (NotBefore five minutes earlier), into
// a PKI directory, and returns its credential ID.
func writeKubeletClient(t *testing.T, dir, node string, issued time.Time) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore: issued.Add(-5 * time.Minute), NotAfter: issued.Add(24 * time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, filepath.FromSlash(KubeletClientStem(node))+".crt")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return removednodes.CredentialID(der)
}

// A removed node is admitted back only with a certificate issued after
// its removal; nothing else changes the list.
func TestAdmit(t *testing.T) {
	removed := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	at := "removed=2026-03-01T10:00:00Z"
	other := "X509SHA256=" + strings.Repeat("c", 64)
	for _, tc := range []struct {
		name    string
		list    map[string]string // nil: no ConfigMap
		issued  time.Time         // zero: no certificate in the PKI
		want    string            // w1's entry after; "(id)" is the certificate's ID
		wantErr string
		wantIs  error
	}{
		{name: "renewed after the removal", list: map[string]string{"w1": at}, issued: removed.Add(time.Hour),
			want: at + " (id)"},
		{name: "renewed in the second of the removal", list: map[string]string{"w1": at}, issued: removed,
			want: at + " (id)"},
		{name: "beside a credential admitted before", list: map[string]string{"w1": at + " " + other}, issued: removed.Add(time.Hour),
			want: at + " " + other + " (id)"},
		{name: "admitted already", list: map[string]string{"w1": at + " (id)"}, issued: removed.Add(time.Hour),
			want: at + " (id)"},
		{name: "the certificate of before the removal", list: map[string]string{"w1": at}, issued: removed.Add(-24 * time.Hour),
			want:    at,
			wantErr: "kubelet-client.crt: issued 2026-02-28T10:00:00Z, before the removal at 2026-03-01T10:00:00Z: run kiln pki renew --node w1 and kiln gen first"},
		{name: "a node not removed", list: map[string]string{"w2": at}, issued: removed.Add(time.Hour),
			wantIs: removednodes.ErrNotRemoved, wantErr: "has no entry for w1"},
		{name: "nothing removed", issued: removed.Add(time.Hour), wantIs: removednodes.ErrNotRemoved},
		{name: "no certificate", list: map[string]string{"w1": at}, want: at, wantIs: fs.ErrNotExist},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			id := "(no certificate)"
			if !tc.issued.IsZero() {
				id = writeKubeletClient(t, dir, "w1", tc.issued)
			}
			var objs []runtime.Object
			if tc.list != nil {
				data := map[string]string{}
				for k, v := range tc.list {
					data[k] = strings.ReplaceAll(v, "(id)", id)
				}
				objs = append(objs, removedList(data))
			}
			kube := fake.NewClientset(objs...)
			var log []string
			a := &Admitter{PKI: pki.Store{Dir: dir}, Kube: kube, Log: func(f string, args ...any) { log = append(log, fmt.Sprintf(f, args...)) }}
			err := a.Admit(context.Background(), "w1")
			switch {
			case tc.wantErr == "" && tc.wantIs == nil && err != nil:
				t.Fatalf("Admit: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Admit: %v, want an error with %q", err, tc.wantErr)
			case tc.wantIs != nil && !errors.Is(err, tc.wantIs):
				t.Fatalf("Admit: %v, want %v", err, tc.wantIs)
			case err == nil && len(log) != 1:
				t.Errorf("log %q, want one line", log)
			}
			e, listed := listedRemoved(t, kube, "w1")
			if want := strings.ReplaceAll(tc.want, "(id)", id); listed != (tc.want != "") || (listed && e.String() != want) {
				t.Errorf("w1's entry %q (listed %v), want %q", e, listed, want)
			}
			if tc.list == nil {
				if l, _ := removednodes.Read(context.Background(), kube); len(l) != 0 {
					t.Errorf("admit wrote a list: %v", l)
				}
			}
		})
	}
}
