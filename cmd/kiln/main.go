// Command kiln bakes immutable Kubernetes node images and turns a booted
// image into a genesis node, a master or a worker on first boot.
//
// This package is CLI wiring only: flags, subcommands and exit codes. The
// work lives in the packages each subcommand calls.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// version is set at link time: -ldflags "-X main.version=...".
var version = "dev"

// exitUsage is returned for bad flags or bad input files; exitFailure for
// everything else.
const (
	exitFailure = 1
	exitUsage   = 2
)

// usageError marks an error the operator can fix by changing the command
// line or an input file.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func main() {
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
	if err := root.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "kiln:", err)
		var ue usageError
		if errors.As(err, &ue) {
			os.Exit(exitUsage)
		}
		os.Exit(exitFailure)
	}
}

// subcommands is the list of everything kiln can do, one file each.
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
		newPauseCmd(),
	}
}
