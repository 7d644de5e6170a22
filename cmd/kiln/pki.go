package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/spf13/cobra"
)

func newPKICmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pki",
		Short: "Check and renew the cluster's certificates",
		Long: `Check and renew the PKI directory kiln gen keeps (CAs, service-account key,
every certificate). After renewing, run kiln gen again and re-feed the nodes.`,
	}
	cmd.AddCommand(newPKICheckCmd(), newPKIRenewCmd())
	return cmd
}

func newPKICheckCmd() *cobra.Command {
	var dir, sitePath, warn, root string
	var node bool
	cmd := &cobra.Command{
		Use:   "check [--pki DIR] [--site SITE] [--warn 30d] | --node [--root /]",
		Short: "List every certificate with its expiry; fail on anything wrong in the PKI",
		Long: `List every certificate of the PKI directory with its subject, issuer and
expiry, then report every problem at once, one line each naming the file, and
exit 1 if there is any: a key that does not belong to its certificate, half a
pair, a file that does not parse, a missing, garbage or mismatched sa.key or
sa.pub, a certificate signed by a CA that is not the PKI's, one that has
expired or expires within --warn, a file where a directory is expected or the
other way round. With --site, also every certificate the site expects that is
missing or no longer what the site asks for (subject, SANs, usages, lifetime,
CA): the same rules by which kiln gen reuses a certificate or re-issues it.

With --node, on a node: list the certificates that node holds (` + nodefile.PKIDir + `,
the client certificates of ` + nodefile.KubeconfigDir + `/*.conf, and the
kubelet's renewed client certificate,
` + kubeletCertDir + `/kubelet-client-current.pem) with their expiry, and exit 1
when one has expired or expires within --warn.`,
		Example: `  kiln pki check --pki pki/ --site site.yaml
  kiln pki check --node              # on a node, as root`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var within time.Duration
			if warn != "" {
				var err error
				if within, err = site.ParseDuration(warn); err != nil {
					return usageError{fmt.Errorf("--warn %q: %w", warn, err)}
				}
			}
			if node {
				if cmd.Flags().Changed("pki") || sitePath != "" {
					return usageError{errors.New("--node reads the node's own certificates: it takes no --pki or --site")}
				}
				return checkNode(cmd.OutOrStdout(), root, within)
			}
			var s *site.Site
			if sitePath != "" {
				var err error
				if s, err = loadSite(sitePath); err != nil {
					return err
				}
			}
			infos, problems, err := pki.Store{Dir: dir}.Check(s, within)
			if errors.Is(err, pki.ErrNoPKI) {
				return usageError{err}
			}
			if err != nil {
				return err
			}
			printInfos(cmd.OutOrStdout(), infos, within)
			if err := problems.Err(); err != nil {
				return fmt.Errorf("PKI in %s: %w", dir, err)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "pki", "pki", "the PKI directory")
	cmd.Flags().StringVarP(&sitePath, "site", "f", "", "the site file to check the certificates against")
	cmd.Flags().StringVar(&warn, "warn", "", "report certificates expiring within this time (default: each one's renew window, its last 30 days or last third)")
	cmd.Flags().BoolVar(&node, "node", false, "check the certificates of the node kiln runs on, not a PKI directory")
	cmd.Flags().StringVar(&root, "root", "/", "with --node: the node's root directory")
	return cmd
}

// kubeletCertDir is where the kubelet keeps the client certificates it
// renewed (its --cert-dir default).
const kubeletCertDir = "/var/lib/kubelet/pki"

// checkNode is kiln pki check --node.
func checkNode(w io.Writer, root string, warn time.Duration) error {
	infos, problems := pki.CheckNode(root, pki.NodePaths{
		PEM:         []string{nodefile.PKIDir, kubeletCertDir + "/kubelet-client-current.pem"},
		Kubeconfigs: []string{nodefile.KubeconfigDir + "/*.conf"},
	}, warn, time.Now())
	if len(infos) == 0 && len(problems) == 0 {
		return fmt.Errorf("no certificate under %s: not a kiln node, or its config was not applied", root)
	}
	printInfos(w, infos, warn)
	if err := problems.Err(); err != nil {
		return fmt.Errorf("certificates of this node: %w", err)
	}
	return nil
}

// printInfos is the table of certificates, each marked when it has
// expired or expires within warn (0: its renew window).
func printInfos(w io.Writer, infos []pki.Info, warn time.Duration) {
	now := time.Now()
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CERTIFICATE\tSUBJECT\tISSUER\tEXPIRES\tLEFT\t")
	for _, i := range infos {
		window := warn
		if window == 0 {
			window = pki.RenewWindow(i.NotAfter.Sub(i.NotBefore))
		}
		left, mark := i.Remaining(now), ""
		switch {
		case left <= 0:
			mark = "EXPIRED"
		case left <= window:
			mark = "renew soon"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%dd %s\t\n", i.Stem, i.Subject, i.Issuer, i.NotAfter.UTC().Format(time.DateOnly), int(left.Hours()/24), mark)
	}
	tw.Flush()
}

func newPKIRenewCmd() *cobra.Command {
	var dir, sitePath, within, node string
	cmd := &cobra.Command{
		Use:   "renew -f SITE [--pki DIR] [--within 30d | --node NAME]",
		Short: "Renew leaf certificates close to expiry, or one node's now, under the same CAs",
		Long: `Re-issue every leaf certificate of the site that expires within the given
time: a new key and certificate under the same CA, with the site's current
names and lifetime. The old pair is copied to DIR/backup/<UTC time>/ first,
then replaced. CAs are never renewed (every node trusts them). kiln gen
itself re-issues a leaf that drifted from the site or entered its renew
window (its last 30 days, or last third); renew does it earlier, for
everything within --within. Then run kiln gen to put the new certificates
in the configs and re-feed the nodes. Kubelet client
certificates also renew themselves on a running node (docs/security.md).

With --node NAME, re-issue that node's own certificates (its kubelet client
and serving certificates; a master's apiserver, etcd and agent certificates
too) now, whatever their expiry: for a node removed with kiln node remove
before kiln node admit lets it back in, or one whose config or disk may be in
other hands.`,
		Example: `  kiln pki renew -f site.yaml --pki pki/ --within 30d
  kiln pki renew -f site.yaml --pki pki/ --node w1`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if node != "" && cmd.Flags().Changed("within") {
				return usageError{errors.New("--node renews that node's certificates whatever their expiry: it takes no --within")}
			}
			d, err := site.ParseDuration(within)
			if err != nil {
				return usageError{fmt.Errorf("--within %q: %w", within, err)}
			}
			s, err := loadSite(sitePath)
			if err != nil {
				return err
			}
			st := pki.Store{Dir: dir}
			var renewed []string
			if node != "" {
				renewed, err = st.RenewNode(s, node)
			} else {
				renewed, err = st.Renew(s, d)
			}
			for _, stem := range renewed {
				fmt.Fprintf(cmd.OutOrStdout(), "renewed %s\n", stem)
			}
			switch {
			case errors.Is(err, pki.ErrUnknownNode):
				return usageError{err}
			case err == nil && len(renewed) == 0 && node != "":
				fmt.Fprintf(cmd.OutOrStdout(), "%s has no certificate in %s yet: kiln gen issues them\n", node, dir)
			case err == nil && len(renewed) == 0:
				fmt.Fprintf(cmd.OutOrStdout(), "nothing expires within %s\n", within)
			}
			return pkiError(err)
		},
	}
	cmd.Flags().StringVarP(&sitePath, "file", "f", "", "the site file (required)")
	cmd.Flags().StringVar(&dir, "pki", "pki", "the PKI directory")
	cmd.Flags().StringVar(&within, "within", "30d", "renew what expires within this time")
	cmd.Flags().StringVar(&node, "node", "", "renew this node's certificates now, whatever their expiry")
	cmd.MarkFlagRequired("file")
	return cmd
}
