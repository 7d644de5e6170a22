package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/kiln-project/kiln/firstboot"
	"github.com/kiln-project/kiln/firstboot/hostkeys"
	"github.com/spf13/cobra"
)

func newFirstbootCmd() *cobra.Command {
	var root string
	var once, noSystemd bool
	cmd := &cobra.Command{
		Use:   "firstboot",
		Short: "Apply the node's Ignition config (run by kiln-firstboot.service on every boot)",
		Long: `Find, validate and apply this node's Ignition config (spec 3.0 to 3.5).

Sources, first hit wins: the copy stored on the state partition (label
KILN-STATE), a config embedded in the image (/usr/lib/kiln/config.ign), QEMU
fw_cfg opt/com.coreos/config, the kernel argument ignition.config.url=
(http, https, tftp; ${mac}, ${uuid}, ${hostname} are substituted), and a
config drive labelled KILN-CONFIG holding config.ign. With none, the agent says
so on the console and waits: it never guesses a role. A config from http, tftp
or a config drive is used only when the kernel argument
kiln.config.hash=sha512-<hex> pins it (or the image spec's
configTrust.allowUnverified allows it). With kiln.config.hash= the stored copy
is used only when it is the pinned config; otherwise the pinned config is
taken from the other sources and replaces it, and when it cannot be had the
agent stops and changes nothing. A state partition another machine made is
not used, nor one without a record of its machine unless the kernel command
line has kiln.state.adopt=1.

On the first boot it creates the state partition (on the disk the config
labels KILN-STATE, else in the boot disk's free space), stores the config
there and applies it; every later boot re-applies the stored copy. An invalid
config prints its validation report and changes nothing.

It ends with exactly one console line, "kiln-firstboot: done source=<name>" or
"kiln-firstboot: error: <reason>", and writes /run/kiln/status.json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			agent := &firstboot.Agent{Root: root, Console: cmd.OutOrStdout(), Sys: firstboot.HostSystem{}, Wait: 5 * time.Second, Version: version}
			if once {
				agent.Wait = 0
			}
			if !noSystemd {
				sd := firstboot.NewDBusSystemd()
				defer sd.Close()
				agent.Systemd = sd
			}
			return runAgent(ctx, agent)
		},
	}
	cmd.AddCommand(newRoleCmd(), newBootSlotCmd(), newUpgradeServiceCmd(), newHostKeysCmd(), newLeaveWatchCmd())
	cmd.Flags().StringVar(&root, "root", "/", "root of the node to configure (for tests)")
	cmd.Flags().BoolVar(&once, "once", false, "do not wait for a config: fail when there is none")
	cmd.Flags().BoolVar(&noSystemd, "no-systemd", false, "write units but do not reload, enable or start them (no running systemd)")
	return cmd
}

// runAgent's error has already been printed as the agent's final line.
func runAgent(ctx context.Context, a *firstboot.Agent) error {
	if err := a.Run(ctx); err != nil {
		return reportedError{err}
	}
	return nil
}

func newHostKeysCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "host-keys",
		Short: "Install the node's SSH host keys, made once and kept on the state partition (run by ssh.service)",
		Long: `Copy the SSH host keys kept in /var/lib/kiln/ssh (on the state partition)
into /etc/ssh, which the image rebuilds on every boot, making only the ones
missing there: a node keeps its host keys across reboots. A key the node's
Ignition config wrote into /etc/ssh is left as it is. ssh.service runs this
after kiln-firstboot, in place of Debian's ssh-keygen -A; without a state
partition the keys live in RAM and are new each boot.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			made, err := hostkeys.Installer{Root: root}.Install()
			if err != nil {
				return err
			}
			if len(made) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "kiln-firstboot: SSH host keys made: %s\n", strings.Join(made, ", "))
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&root, "root", "/", "root of the node (for tests)")
	return cmd
}
