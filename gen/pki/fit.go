package pki

import (
	"bytes"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	cfconfig "github.com/cloudflare/cfssl/config"
)

// RenewWindow is how long before its expiry a certificate of the given
// lifetime is due for renewal: its last 30 days, or its last third when
// that is shorter, so that a short-lived certificate is not due at birth.
func RenewWindow(lifetime time.Duration) time.Duration {
	return min(30*day, lifetime/3)
}

func lifetime(c *x509.Certificate) time.Duration { return c.NotAfter.Sub(c.NotBefore) }

// expiry says how cert stands against now: expired, or expiring within
// window; "" when neither.
func expiry(cert *x509.Certificate, now time.Time, window time.Duration) string {
	left := cert.NotAfter.Sub(now)
	switch {
	case left <= 0:
		return "expired on " + date(cert.NotAfter)
	case left <= window:
		return fmt.Sprintf("expires on %s, in %s, within the renew window of %s", date(cert.NotAfter), about(left), days(window))
	}
	return ""
}

func isCA(stem string) bool {
	return slices.ContainsFunc(CAs, func(ca CA) bool { return ca.Stem == stem })
}

// caWayOut is what an operator can do about a CA kiln cannot use: kiln
// never re-issues one, since every node trusts it.
func caWayOut(st Store, stem string) string {
	return fmt.Sprintf("kiln never re-issues a CA, which every node trusts: restore %s.crt and %s.key from your copy of the PKI, or start a new PKI (move %s away, run kiln gen, re-feed every node)",
		stem, stem, st.Dir)
}

// caProblems says why a CA on disk cannot sign: it is not a CA, or it
// has expired.
func (st Store) caProblems(ca CA, cert *x509.Certificate, now time.Time) Problems {
	path := st.path(ca.Stem, ".crt")
	var ps Problems
	if !cert.IsCA || !cert.BasicConstraintsValid {
		ps.add(Problem{path, "not a CA certificate: " + caWayOut(st, ca.Stem)})
	}
	if !cert.NotAfter.After(now) {
		ps.add(Problem{path, fmt.Sprintf("the CA expired on %s: %s", date(cert.NotAfter), caWayOut(st, ca.Stem))})
	}
	return ps
}

// signedBy says whether ca signed cert.
func signedBy(cert, ca *x509.Certificate) bool {
	return bytes.Equal(cert.RawIssuer, ca.RawSubject) && cert.CheckSignatureFrom(ca) == nil
}

// misfit lists why cert is not the certificate l asks for now, signed by
// ca (nil: not known) with the given lifetime: each reason names the
// field, as it is and as the site asks. Expiry is not judged here.
func misfit(l Leaf, cert, ca *x509.Certificate, life time.Duration) []string {
	var why []string
	if ca != nil && !signedBy(cert, ca) {
		why = append(why, foreign(cert, ca, l.CA.Stem))
	}
	if cert.IsCA {
		why = append(why, "it is a CA, the site asks for a leaf")
	}
	if got, want := cert.Subject.String(), l.subject().String(); got != want {
		why = append(why, fmt.Sprintf("subject was %q, the site asks for %q", got, want))
	}
	if d := diff(certSANs(cert), l.sans()); d != "" {
		why = append(why, "SANs drifted: the certificate "+d)
	}
	if got, want := usageNames(cert.KeyUsage, cert.ExtKeyUsage), l.usageNames(); got != want {
		why = append(why, fmt.Sprintf("usages were %s, the site asks for %s", got, want))
	}
	if got := lifetime(cert); got != life {
		why = append(why, fmt.Sprintf("lifetime was %s, the site asks for %s", days(got), days(life)))
	}
	return why
}

func foreign(cert, ca *x509.Certificate, caStem string) string {
	if cert.Issuer.String() == ca.Subject.String() {
		return fmt.Sprintf("signed by another key than %s.crt's (a CA of the same name %q, not the one that signs it now)", caStem, ca.Subject.String())
	}
	return fmt.Sprintf("signed by %q, not by the CA that signs it now, %s.crt (%q)", cert.Issuer.String(), caStem, ca.Subject.String())
}

func (l Leaf) subject() pkix.Name { return pkix.Name{CommonName: l.CN, Organization: l.Orgs} }

// sans are l's subject alternative names as certSANs renders them.
func (l Leaf) sans() []string {
	out := make([]string, 0, len(l.Hosts))
	for _, h := range l.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		}
		out = append(out, h)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func certSANs(c *x509.Certificate) []string {
	out := append([]string{}, c.DNSNames...)
	out = append(out, c.EmailAddresses...)
	for _, ip := range c.IPAddresses {
		out = append(out, ip.String())
	}
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// diff says what was dropped from old and added in new, "" when they are
// the same; both sorted.
func diff(old, new []string) string {
	var dropped, added []string
	for _, o := range old {
		if _, found := slices.BinarySearch(new, o); !found {
			dropped = append(dropped, o)
		}
	}
	for _, n := range new {
		if _, found := slices.BinarySearch(old, n); !found {
			added = append(added, n)
		}
	}
	var parts []string
	if len(dropped) > 0 {
		parts = append(parts, "has "+strings.Join(dropped, ", ")+", which the site no longer names")
	}
	if len(added) > 0 {
		parts = append(parts, "lacks "+strings.Join(added, ", ")+", which the site now names")
	}
	return strings.Join(parts, "; ")
}

func (l Leaf) usageNames() string {
	ku, eku, _ := (&cfconfig.SigningProfile{Usage: l.usages()}).Usages()
	return usageNames(ku, eku)
}

// usageNames renders key usages in a fixed order, e.g. "[digital
// signature, key encipherment, server auth]".
func usageNames(ku x509.KeyUsage, eku []x509.ExtKeyUsage) string {
	var names []string
	for _, k := range []struct {
		bit  x509.KeyUsage
		name string
	}{
		{x509.KeyUsageDigitalSignature, "digital signature"}, {x509.KeyUsageContentCommitment, "content commitment"},
		{x509.KeyUsageKeyEncipherment, "key encipherment"}, {x509.KeyUsageDataEncipherment, "data encipherment"},
		{x509.KeyUsageKeyAgreement, "key agreement"}, {x509.KeyUsageCertSign, "cert sign"},
		{x509.KeyUsageCRLSign, "crl sign"}, {x509.KeyUsageEncipherOnly, "encipher only"}, {x509.KeyUsageDecipherOnly, "decipher only"},
	} {
		if ku&k.bit != 0 {
			names = append(names, k.name)
		}
	}
	var ext []string
	for _, e := range eku {
		switch e {
		case x509.ExtKeyUsageServerAuth:
			ext = append(ext, "server auth")
		case x509.ExtKeyUsageClientAuth:
			ext = append(ext, "client auth")
		default:
			ext = append(ext, fmt.Sprintf("extended usage %d", e))
		}
	}
	slices.Sort(ext)
	return "[" + strings.Join(append(names, slices.Compact(ext)...), ", ") + "]"
}

func date(t time.Time) string { return t.UTC().Format("2006-01-02 15:04 UTC") }

// days renders a duration exactly, in whole days when it is some, e.g.
// 365d.
func days(d time.Duration) string {
	if d%day == 0 {
		return fmt.Sprintf("%dd", d/day)
	}
	return d.String()
}

// about renders a duration to the day, or to the minute under two days.
func about(d time.Duration) string {
	if d > 2*day {
		return fmt.Sprintf("%dd", d.Round(day)/day)
	}
	return d.Round(time.Minute).String()
}

const day = 24 * time.Hour
