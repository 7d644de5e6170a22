package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/firstboot/source"
	"github.com/kiln-project/kiln/gen/nodeconfig"
	"github.com/kiln-project/kiln/gen/pki"
	"github.com/kiln-project/kiln/gen/site"
	"github.com/kiln-project/kiln/internal/outdir"
	"github.com/spf13/cobra"
)

func newGenCmd() *cobra.Command {
	var sitePath, pkiDir, outDir string
	cmd := &cobra.Command{
		Use:   "gen -f SITE --pki DIR -o DIR",
		Short: "Render the cluster PKI and one Ignition config per node from a site file",
		Long: `Turn a site file (the whole cluster, described once) into what each node needs
at first boot.

The PKI directory holds the cluster's CAs, the service-account key and every
certificate; keep it safe and keep it. A second run issues what is missing (for
example for a node added to the site file) and reuses every certificate that is
still what the site asks for: signed by its CA, not expired nor within its
renew window (its last 30 days, or last third), with the same subject, SANs,
usages and lifetime. Any other leaf is re-issued, saying which field drifted,
its old pair copied to DIR/backup/<time>/ first. A CA is never re-issued: an
expired or missing CA, a key that does not parse or belong to its certificate,
half a pair, a bad sa.key or sa.pub stop the run before anything is written
(exit status 2), every problem named with its file; see kiln pki check.

The output directory gets, all or nothing (a failed run leaves it as it was):

  ` + nodeconfig.NodesDir + `/<name>.ign     the node's Ignition config (spec ` + nodeconfig.IgnitionSpec + `): hostname, networkd
                       file, SSH keys, its certificates and kubeconfigs, the seed
                       discovery zone and ` + nodefile.Path + ` (role, cluster)
  ` + nodeconfig.NodesDir + `/<name>.ign` + nodeconfig.HashSuffix + `
                       its sha512 (also printed), for the kernel argument
                       ` + source.HashArg + `= that a node fetching its config over
                       http or tftp needs (see docs/security.md)
  ` + nodeconfig.AdminKubeconfig + `     the operator's credentials (group ` + nodefile.ClusterAdminsGroup + `,
                       which RBAC binds to cluster-admin): one context per master,
                       the genesis node's current
  ` + nodeconfig.SuperAdminKubeconfig + `
                       break-glass credentials (system:masters, which RBAC cannot
                       refuse), laid out like the admin's; never on a node
  ` + outdir.MarkerName + `         the list of the files above: what a later run may replace

The output directory is replaced as a whole, so kiln gen replaces it only when
it is missing, empty or its own earlier output (listed in its ` + outdir.MarkerName + `), and
never when it is, holds or lies inside the PKI directory, or holds the site file
or the current directory: anything else is refused, with nothing touched.

The PKI directory keeps (files are added and re-issued, never removed; a
re-issued pair's old files go to backup/<time>/; a worker has the kubelet's
two pairs of nodes/<node>/, a master all six):

` + pkiLayout() + `
A worker's config holds no CA key, no etcd key and no service-account key.
Feed each node its config: fw_cfg, ignition.config.url=, a ` + source.ConfigDriveLabel + ` drive,
or embedded in the image (see docs/site.md).`,
		Example: `  kiln gen -f examples/site.yaml --pki pki/ -o out/site/`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := loadSite(sitePath)
			if err != nil {
				return err
			}
			res, err := nodeconfig.Generate(s, pki.Store{Dir: pkiDir}, outDir)
			w := cmd.OutOrStdout()
			printChanges(w, res.PKI)
			if err != nil {
				return pkiError(outputError(err))
			}
			if len(res.PKI.Issued)+len(res.PKI.Reissued) == 0 {
				fmt.Fprintf(w, "PKI in %s: nothing missing, nothing issued\n", pkiDir)
			}
			for _, n := range res.Nodes {
				fmt.Fprintf(w, "wrote %s %s=%s\n", n.Path, source.HashArg, n.Hash)
				if n.Replaced != "" {
					fmt.Fprintf(w, "  changed: it replaces %s, which the node may fall back to\n", n.Replaced)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVarP(&sitePath, "file", "f", "", "the site file (required)")
	cmd.Flags().StringVar(&pkiDir, "pki", "pki", "the PKI directory to reuse and complete")
	cmd.Flags().StringVarP(&outDir, "output", "o", "out/site", "where the node configs and admin.kubeconfig go")
	cmd.MarkFlagRequired("file")
	return cmd
}

// printChanges says what kiln gen did to the PKI, a line per certificate.
func printChanges(w io.Writer, ch pki.Changes) {
	for _, stem := range ch.Issued {
		fmt.Fprintf(w, "issued %s\n", stem)
	}
	for _, r := range ch.Reissued {
		fmt.Fprintf(w, "reissued %s\n", r)
	}
	for _, n := range ch.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
}

// loadSite reads a site file; problems in the file are usage errors.
func loadSite(path string) (*site.Site, error) {
	s, err := site.Load(path)
	if err != nil {
		return nil, inputError(err)
	}
	return s, nil
}

// pkiLayout is the PKI directory's files for kiln gen --help, from the
// lists kiln gen issues them from.
func pkiLayout() string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	for _, line := range pki.Layout() {
		fmt.Fprintf(w, "  %s\n", line)
	}
	w.Flush()
	return b.String()
}
