package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// Placeholder until the build subcommand lands.
func newBuildCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "build",
		Short: "(not yet implemented)",
		RunE:  func(*cobra.Command, []string) error { return errors.New("build: not implemented yet") },
	}
}
