package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the pki subcommand lands.
func newPKICmd() *cobra.Command {
	return &cobra.Command{
		Use:   "pki",
		Short: "(not yet implemented)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("pki: not implemented yet") },
	}
}
