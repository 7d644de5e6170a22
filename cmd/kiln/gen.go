package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the gen subcommand lands.
func newGenCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "gen",
		Short: "(not yet implemented)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("gen: not implemented yet") },
	}
}
