package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the firstboot subcommand lands.
func newFirstbootCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "firstboot",
		Short: "(not yet implemented)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("firstboot: not implemented yet") },
	}
}
