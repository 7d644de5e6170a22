package firstboot

import (
	"context"
	"fmt"
	"sync"

	"github.com/coreos/go-systemd/v22/dbus"
	"golang.org/x/sys/unix"

	"github.com/kiln-project/kiln/internal/command"
)

// HostSystem runs commands on the node (command.Host) and sets its
// hostname.
type HostSystem struct{ command.Host }

// SetHostname sets the kernel hostname for this boot.
func (HostSystem) SetHostname(name string) error { return unix.Sethostname([]byte(name)) }

// DBusSystemd talks to systemd over its private socket, which works
// before the D-Bus daemon is up. It connects at its first call, not
// before the agent starts: during udev's coldplug connecting can hold
// the agent's first line back by tens of seconds (docs/measurements.md),
// and the state
// partition and the stored config need no systemd.
type DBusSystemd struct {
	once sync.Once
	conn *dbus.Conn
	err  error
}

// NewDBusSystemd returns a systemd client that connects when first used.
func NewDBusSystemd() *DBusSystemd { return &DBusSystemd{} }

func (s *DBusSystemd) connection(ctx context.Context) (*dbus.Conn, error) {
	s.once.Do(func() {
		if s.conn, s.err = dbus.NewSystemdConnectionContext(ctx); s.err != nil {
			s.err = fmt.Errorf("connecting to systemd: %w", s.err)
		}
	})
	return s.conn, s.err
}

// Close ends the connection, if there is one.
func (s *DBusSystemd) Close() {
	if s.conn != nil {
		s.conn.Close()
	}
}

// Reload is systemctl daemon-reload.
func (s *DBusSystemd) Reload(ctx context.Context) error {
	c, err := s.connection(ctx)
	if err != nil {
		return err
	}
	return c.ReloadContext(ctx)
}

// Enable links units into the targets their [Install] sections name.
func (s *DBusSystemd) Enable(ctx context.Context, units []string) error {
	c, err := s.connection(ctx)
	if err != nil {
		return err
	}
	_, _, err = c.EnableUnitFilesContext(ctx, units, false, true)
	return err
}

// Disable removes units' [Install] links.
func (s *DBusSystemd) Disable(ctx context.Context, units []string) error {
	c, err := s.connection(ctx)
	if err != nil {
		return err
	}
	_, err = c.DisableUnitFilesContext(ctx, units, false)
	return err
}

// Start queues a start job without waiting for it.
func (s *DBusSystemd) Start(ctx context.Context, unit string) error {
	c, err := s.connection(ctx)
	if err != nil {
		return err
	}
	_, err = c.StartUnitContext(ctx, unit, "replace", nil)
	return err
}
