// Package servingcert approves the kubelets' serving certificate requests
// (signer kubernetes.io/kubelet-serving) that the site vouches for, and
// denies the others with the reason. A DHCP node's address is unknown
// when kiln gen issues certificates, so its kubelet asks the cluster for
// one (serverTLSBootstrap) once it has an address; the controller-manager
// signs only what is approved, and the apiserver checks every kubelet's
// certificate against the address it dials. The masters' anchor runs the
// Approver.
package servingcert

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"slices"
	"strings"
	"time"

	certificatesv1 "k8s.io/api/certificates/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Site is every node of the site by name with its static address, ""
// for a DHCP node (a master's node file, SiteNodes).
type Site map[string]string

// Reasons the Approver gives on the conditions it adds.
const (
	ApprovedReason = "KilnSiteMatch"
	DeniedReason   = "KilnSiteMismatch"
)

// Pending is a request the Approver leaves for a later round: the Node
// it comes from is not registered yet, or lists no address yet.
type Pending struct{ Why string }

func (p *Pending) Error() string { return p.Why }

// Check says why the request may not be approved ("" when it may): it
// must come from a node of the site for its own name, ask for a server
// certificate only, name that node alone and, as addresses, only those
// its Node reports: the site's static address for a static node; for a
// DHCP node addresses that no other node of the site has and no other
// Node reports. nodes are the cluster's Nodes. A *Pending error means
// the answer must wait for the Node.
func Check(csr *certificatesv1.CertificateSigningRequest, site Site, nodes []corev1.Node) (string, error) {
	name, ok := strings.CutPrefix(csr.Spec.Username, "system:node:")
	if !ok || !slices.Contains(csr.Spec.Groups, "system:nodes") {
		return fmt.Sprintf("requested by %s, not by a node", csr.Spec.Username), nil
	}
	static, inSite := site[name]
	if !inSite {
		return fmt.Sprintf("node %s is not in the site", name), nil
	}
	req, why := parse(csr.Spec.Request)
	if why != "" {
		return why, nil
	}
	if req.Subject.CommonName != csr.Spec.Username || !slices.Equal(req.Subject.Organization, []string{"system:nodes"}) {
		return fmt.Sprintf("subject %q is not system:node:%s in system:nodes", req.Subject, name), nil
	}
	if why := checkUsages(csr.Spec.Usages); why != "" {
		return why, nil
	}
	if len(req.EmailAddresses) > 0 || len(req.URIs) > 0 {
		return "asks for e-mail or URI names", nil
	}
	for _, d := range req.DNSNames {
		if d != name {
			return fmt.Sprintf("asks for the name %q, not only %s", d, name), nil
		}
	}
	if len(req.IPAddresses) == 0 {
		return "names no address", nil
	}
	if static != "" {
		for _, ip := range req.IPAddresses {
			if ip.String() != static {
				return fmt.Sprintf("asks for %s; the site gives %s %s", ip, name, static), nil
			}
		}
		return "", nil
	}
	return checkDHCP(name, req.IPAddresses, site, nodes)
}

// checkDHCP checks a DHCP node's addresses against its Node and every
// other node's.
func checkDHCP(name string, ips []net.IP, site Site, nodes []corev1.Node) (string, error) {
	i := slices.IndexFunc(nodes, func(n corev1.Node) bool { return n.Name == name })
	if i < 0 {
		return "", &Pending{fmt.Sprintf("Node %s is not registered yet", name)}
	}
	own := addresses(nodes[i])
	if len(own) == 0 {
		return "", &Pending{fmt.Sprintf("Node %s reports no address yet", name)}
	}
	// One address per family, the one the apiserver dials: a node that
	// reports spare addresses gets no certificate to hold them with.
	var v4, v6 int
	for _, ip := range ips {
		if ip.To4() != nil {
			v4++
		} else {
			v6++
		}
	}
	if v4 > 1 || v6 > 1 {
		return fmt.Sprintf("asks for %d IPv4 and %d IPv6 addresses; a node has one of each at most", v4, v6), nil
	}
	for _, ip := range ips {
		a := ip.String()
		if !slices.Contains(own, a) {
			return fmt.Sprintf("asks for %s, which Node %s does not report (it reports %s)", a, name, strings.Join(own, ", ")), nil
		}
		for other, addr := range site {
			if other != name && addr == a {
				return fmt.Sprintf("asks for %s, the site's address of %s", a, other), nil
			}
		}
		for _, n := range nodes {
			if n.Name != name && slices.Contains(addresses(n), a) {
				return fmt.Sprintf("asks for %s, which Node %s reports", a, n.Name), nil
			}
		}
	}
	return "", nil
}

// addresses are a Node's internal and external addresses.
func addresses(n corev1.Node) []string {
	var out []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			out = append(out, a.Address)
		}
	}
	return out
}

func parse(data []byte) (*x509.CertificateRequest, string) {
	b, _ := pem.Decode(data)
	if b == nil || b.Type != "CERTIFICATE REQUEST" {
		return nil, "the request is not a PEM certificate request"
	}
	req, err := x509.ParseCertificateRequest(b.Bytes)
	if err != nil {
		return nil, "the request does not parse: " + err.Error()
	}
	if err := req.CheckSignature(); err != nil {
		return nil, "the request's signature does not verify: " + err.Error()
	}
	return req, ""
}

// checkUsages allows a serving certificate's usages and requires server
// auth.
func checkUsages(usages []certificatesv1.KeyUsage) string {
	allowed := []certificatesv1.KeyUsage{certificatesv1.UsageDigitalSignature, certificatesv1.UsageKeyEncipherment, certificatesv1.UsageServerAuth}
	for _, u := range usages {
		if !slices.Contains(allowed, u) {
			return fmt.Sprintf("asks for the usage %q", u)
		}
	}
	if !slices.Contains(usages, certificatesv1.UsageServerAuth) {
		return "does not ask for server auth"
	}
	return ""
}

// Approver answers the pending kubelet serving requests.
type Approver struct {
	Kube kubernetes.Interface
	// Site reads the site's nodes, each round: the node file can change
	// only with a new config, but a read error must not stop the loop.
	Site func() (Site, error)
	Log  func(format string, args ...any)
}

// Reconcile answers every pending request once: approved, denied with
// the reason, or left for a later round (logged).
func (a *Approver) Reconcile(ctx context.Context) error {
	csrs, err := a.Kube.CertificatesV1().CertificateSigningRequests().List(ctx, metav1.ListOptions{
		FieldSelector: "spec.signerName=" + certificatesv1.KubeletServingSignerName})
	if err != nil {
		return fmt.Errorf("listing serving certificate requests: %w", err)
	}
	var pending []certificatesv1.CertificateSigningRequest
	for _, c := range csrs.Items {
		if c.Spec.SignerName == certificatesv1.KubeletServingSignerName && !answered(c) {
			pending = append(pending, c)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	site, err := a.Site()
	if err != nil {
		return fmt.Errorf("reading the site's nodes: %w", err)
	}
	nodes, err := a.Kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing Nodes: %w", err)
	}
	for _, c := range pending {
		why, wait := Check(&c, site, nodes.Items)
		if wait != nil {
			a.log("serving certificate request %s of %s: waiting: %v", c.Name, c.Spec.Username, wait)
			continue
		}
		if err := a.answer(ctx, c, why); err != nil {
			return err
		}
	}
	return nil
}

func (a *Approver) answer(ctx context.Context, c certificatesv1.CertificateSigningRequest, why string) error {
	cond := certificatesv1.CertificateSigningRequestCondition{
		Type: certificatesv1.CertificateApproved, Status: corev1.ConditionTrue, Reason: ApprovedReason,
		Message: "kiln: the site names this node and these addresses", LastUpdateTime: metav1.Now(),
	}
	if why != "" {
		cond.Type, cond.Reason, cond.Message = certificatesv1.CertificateDenied, DeniedReason, "kiln: "+why
	}
	c.Status.Conditions = append(c.Status.Conditions, cond)
	_, err := a.Kube.CertificatesV1().CertificateSigningRequests().UpdateApproval(ctx, c.Name, &c, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or changed: the next round sees it as it is
	}
	if err != nil {
		return fmt.Errorf("answering serving certificate request %s: %w", c.Name, err)
	}
	if why != "" {
		a.log("denied serving certificate request %s of %s: %s", c.Name, c.Spec.Username, why)
	} else {
		a.log("approved serving certificate request %s of %s", c.Name, c.Spec.Username)
	}
	return nil
}

// answered reports whether a request is approved, denied or failed.
func answered(c certificatesv1.CertificateSigningRequest) bool {
	return slices.ContainsFunc(c.Status.Conditions, func(cond certificatesv1.CertificateSigningRequestCondition) bool {
		return cond.Type == certificatesv1.CertificateApproved || cond.Type == certificatesv1.CertificateDenied || cond.Type == certificatesv1.CertificateFailed
	})
}

func (a *Approver) log(format string, args ...any) {
	if a.Log != nil {
		a.Log(format, args...)
	}
}

// Run reconciles every interval until ctx ends; a failed round is logged
// and tried again.
func (a *Approver) Run(ctx context.Context, interval time.Duration) {
	for {
		if err := a.Reconcile(ctx); err != nil {
			a.log("%v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
