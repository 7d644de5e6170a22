package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/kiln-project/kiln/pki"
	"github.com/kiln-project/kiln/site"
	"github.com/spf13/cobra"
)

func newPKICmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "pki",
		Short: "List and renew the cluster's certificates",
		Long: `Inspect and renew the PKI directory kiln gen keeps (CAs, service-account key,
every certificate). After renewing, run kiln gen again and re-feed the nodes.`,
	}
	cmd.AddCommand(newPKICheckCmd(), newPKIRenewCmd())
	return cmd
}

func newPKICheckCmd() *cobra.Command {
	var dir, warn string
	cmd := &cobra.Command{
		Use:   "check [--pki DIR]",
		Short: "Print every certificate with its expiry; fail if any has expired",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			within, err := site.ParseDuration(warn)
			if err != nil {
				return usageError{fmt.Errorf("--warn %q: %w", warn, err)}
			}
			infos, err := pki.Store{Dir: dir}.Check()
			if err != nil {
				return err
			}
			if len(infos) == 0 {
				return usageError{fmt.Errorf("no certificates in %s", dir)}
			}
			now := time.Now()
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "CERTIFICATE\tSUBJECT\tISSUER\tEXPIRES\tLEFT\t")
			expired := 0
			for _, i := range infos {
				left, mark := i.Remaining(now), ""
				switch {
				case left <= 0:
					mark, expired = "EXPIRED", expired+1
				case left <= within:
					mark = "renew soon"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%dd %s\t\n", i.Stem, i.Subject, i.Issuer, i.NotAfter.UTC().Format(time.DateOnly), int(left.Hours()/24), mark)
			}
			tw.Flush()
			if expired > 0 {
				return fmt.Errorf("%d certificate(s) have expired: kiln pki renew", expired)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "pki", "pki", "the PKI directory")
	cmd.Flags().StringVar(&warn, "warn", "30d", "mark certificates expiring within this time")
	return cmd
}

func newPKIRenewCmd() *cobra.Command {
	var dir, sitePath, within string
	cmd := &cobra.Command{
		Use:   "renew -f SITE [--pki DIR] [--within 30d]",
		Short: "Renew leaf certificates close to expiry under the same CAs",
		Long: `Re-issue every leaf certificate of the site that expires within the given
time: a new key and certificate under the same CA, with the site's current
names and lifetime. The old pair is moved to DIR/backup/<time>/ first. CAs are
not renewed. Then run kiln gen to put the new certificates in the configs.`,
		Example: `  kiln pki renew -f site.yaml --pki pki/ --within 30d`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			d, err := site.ParseDuration(within)
			if err != nil {
				return usageError{fmt.Errorf("--within %q: %w", within, err)}
			}
			s, err := loadSite(sitePath)
			if err != nil {
				return err
			}
			renewed, err := pki.Store{Dir: dir}.Renew(s, d)
			for _, stem := range renewed {
				fmt.Fprintf(cmd.OutOrStdout(), "renewed %s\n", stem)
			}
			if err == nil && len(renewed) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "nothing expires within %s\n", within)
			}
			return pkiError(err)
		},
	}
	cmd.Flags().StringVarP(&sitePath, "file", "f", "", "the site file (required)")
	cmd.Flags().StringVar(&dir, "pki", "pki", "the PKI directory")
	cmd.Flags().StringVar(&within, "within", "30d", "renew what expires within this time")
	cmd.MarkFlagRequired("file")
	return cmd
}
