// Command kiln bakes immutable Kubernetes node images and turns a booted
// image into a genesis node, a master or a worker on first boot.
//
// This package is CLI wiring only: flags, subcommands and exit codes. The
// work lives in the packages each subcommand calls.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=...".
var version = "dev"

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one command line and returns the process's exit code, so
// that every command's deferred cleanups have run before kiln exits.
func run(args []string, stdout, stderr io.Writer) int {
	started := false
	root := newRootCmd()
	onRun(root, func() { started = true })
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
	var reported reportedError
	if err != nil && !errors.As(err, &reported) {
		fmt.Fprintln(stderr, "kiln:", err)
	}
	return exitCode(err, started)
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "kiln",
		Short: "Bake immutable bare-metal Kubernetes node images and bring nodes up from them",
		Long: `kiln bakes bootable node images (ISO, raw GPT disk, PXE) that carry everything a
Kubernetes node needs, air-gapped, and configures each node on first boot from
an Ignition (spec v3) config.

Typical workflow:
  kiln build -f images/node.yaml -o out/          bake the node image
  kiln gen -f site.yaml --pki pki/ -o out/site/    render per-node Ignition configs
  boot each machine from the image with its config`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	root.AddCommand(subcommands()...)
	return root
}

// onRun makes every command under c call f as its RunE starts, that is
// once cobra has accepted the command line.
func onRun(c *cobra.Command, f func()) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			f()
			return run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		onRun(sub, f)
	}
}

// subcommands is the list of everything kiln can do.
func subcommands() []*cobra.Command {
	return []*cobra.Command{
		newBuildCmd(),
		newGenCmd(),
		newPKICmd(),
		newFirstbootCmd(),
		newImagesCmd(),
		newNetCmd(),
		newAnchorCmd(),
		newCheckCmd(),
		newNodeCmd(),
		newUpgradeCmd(),
		newEtcdCmd(),
		newServeCmd(),
	}
}
