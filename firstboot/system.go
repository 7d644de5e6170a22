package firstboot

import (
	"context"
	"fmt"
	"os/exec"
	"strings"

	"github.com/coreos/go-systemd/v22/dbus"
	"golang.org/x/sys/unix"
)

// HostSystem runs commands on the node and sets its hostname.
type HostSystem struct{}

// Run runs a command; on failure the error carries its output.
func (HostSystem) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// SetHostname sets the kernel hostname for this boot.
func (HostSystem) SetHostname(name string) error { return unix.Sethostname([]byte(name)) }

// DBusSystemd talks to systemd over its private socket, which works
// before the D-Bus daemon is up.
type DBusSystemd struct{ conn *dbus.Conn }

// NewDBusSystemd connects to the running systemd.
func NewDBusSystemd(ctx context.Context) (*DBusSystemd, error) {
	c, err := dbus.NewSystemdConnectionContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("connecting to systemd: %w", err)
	}
	return &DBusSystemd{conn: c}, nil
}

// Close ends the connection.
func (s *DBusSystemd) Close() { s.conn.Close() }

// Reload is systemctl daemon-reload.
func (s *DBusSystemd) Reload(ctx context.Context) error { return s.conn.ReloadContext(ctx) }

// Enable links units into the targets their [Install] sections name.
func (s *DBusSystemd) Enable(ctx context.Context, units []string) error {
	_, _, err := s.conn.EnableUnitFilesContext(ctx, units, false, true)
	return err
}

// Disable removes units' [Install] links.
func (s *DBusSystemd) Disable(ctx context.Context, units []string) error {
	_, err := s.conn.DisableUnitFilesContext(ctx, units, false)
	return err
}

// Start queues a start job without waiting for it.
func (s *DBusSystemd) Start(ctx context.Context, unit string) error {
	_, err := s.conn.StartUnitContext(ctx, unit, "replace", nil)
	return err
}
