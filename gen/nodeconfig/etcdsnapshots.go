package nodeconfig

import (
	"fmt"
	"time"

	"github.com/coreos/ignition/v2/config/v3_5/types"

	"github.com/kiln-project/kiln/contract/layout"
	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/gen/site"
)

// The units of a master's scheduled etcd snapshots. Every master
// snapshots its own member rather than the leader alone: the member
// whose disk dies may be the leader, no election has to be followed, and
// each master's snapshots sit on its own state partition, so losing one
// disk loses one master's copies. They are in the master's config, not
// the image, because the schedule is the site's.
const (
	SnapshotService = "kiln-etcd-snapshot.service"
	SnapshotTimer   = "kiln-etcd-snapshot.timer"
)

// snapshotBound bounds one snapshot run; the command bounds its own
// work a little inside it (cmd/kiln).
const snapshotBound = 15 * time.Minute

// snapshotUnits are master n's snapshot service and timer, none when the
// site turns snapshots off or n is a worker.
func snapshotUnits(s *site.Site, n site.Node) []types.Unit {
	every := s.Cluster.EtcdSnapshots.Interval()
	if !n.IsMaster() || every == 0 {
		return nil
	}
	service := fmt.Sprintf(`# written by kiln gen from the site file (cluster.etcdSnapshots)
[Unit]
Description=kiln etcd snapshot: this master's etcd member to %[1]s
Documentation=file:///usr/share/doc/kiln/operations.md
ConditionPathExists=!%[2]s
After=kiln-role.service

# Low priority and bounded: a snapshot reads the whole database, and
# etcd on the same disk comes first.
[Service]
Type=oneshot
ExecStart=%[3]s etcd snapshot --node
TimeoutStartSec=%[4]d
Nice=19
IOSchedulingClass=idle
`, layout.EtcdSnapshotDir, nodefile.RemovedStamp, nodefile.KilnBinary, int(snapshotBound.Seconds()))
	// OnBootSec is short so that a master rebooted more often than
	// every still takes snapshots; Persistent= is for calendar timers
	// only, which every is not.
	timer := fmt.Sprintf(`# written by kiln gen from the site file (cluster.etcdSnapshots)
[Unit]
Description=kiln etcd snapshot every %[1]s

[Timer]
OnBootSec=%[2]d
OnUnitActiveSec=%[3]d
RandomizedDelaySec=%[4]d

[Install]
WantedBy=timers.target
`, s.Cluster.EtcdSnapshots.Every, int(min(every, 10*time.Minute).Seconds()), int(every.Seconds()), int(min(every/10, 5*time.Minute).Seconds()))
	yes := true
	return []types.Unit{
		{Name: SnapshotService, Contents: &service},
		{Name: SnapshotTimer, Contents: &timer, Enabled: &yes},
	}
}
