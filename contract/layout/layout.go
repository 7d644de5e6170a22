// Package layout is the node layout every side shares: partition labels,
// state and config paths, the stamp dir, the run dir and the names that
// several packages use. The image (builder), the agent (firstboot), the
// anchors (manifests, node) and the operator's tools (gen, ops) take them
// from here, so each has one definition; contract/nodefile owns the paths
// of the files kiln gen writes and the stamp dir.
package layout

import "github.com/kiln-project/kiln/internal/ignition"

// Partition and filesystem labels, which docs/architecture.md names.
const (
	// RootPartLabel is the prefix of a raw disk's root slot partitions,
	// KILN-ROOT-A and KILN-ROOT-B (contract/bootslot's Slot.PartLabel):
	// the boot chain finds the booted slot's root by its label, and the
	// agent the disk to put the state partition on by slot a's.
	RootPartLabel = "KILN-ROOT"
	// StatePartLabel names the state partition and its filesystem.
	// internal/ignition defines it, as the one part of storage a config
	// may name.
	StatePartLabel = ignition.StateLabel
	// ConfigDriveLabel names a drive that holds a node's config.ign.
	ConfigDriveLabel = "KILN-CONFIG"
)

// Directories of a node.
const (
	// LibDir holds what the image carries read-only: the catalog, the
	// image archives, the embedded config.
	LibDir = "/usr/lib/kiln"
	// VarDir is kiln's persistent directory, on the state partition.
	VarDir = "/var/lib/kiln"
	// RunDir holds what lasts one boot: the agent's status.
	RunDir = "/run/kiln"
	// StateMountPoint is where the agent mounts the state partition
	// (internal/ignition names it in what it rejects).
	StateMountPoint = ignition.StateMountPoint
)

// Files of a node.
const (
	// EmbeddedConfigPath is the config an image may carry baked in.
	EmbeddedConfigPath = LibDir + "/config.ign"
	// StateConfigPath is the config the agent keeps once it has one.
	StateConfigPath = VarDir + "/config.ign"
	// StateConfigHashPath holds the hash of the stored config, in the
	// form kiln.config.hash= takes (sha512-<hex>): what the node applied,
	// for the operator to read. It sits on the same partition as the
	// config, so a pinned boot hashes the config itself instead.
	StateConfigHashPath = StateConfigPath + ".sha512"
	// PrevConfigPath is the config a changed config replaced, kept with
	// its hash for the fallback a new config may name
	// (nodefile.NodeFile.FallbackConfigs).
	PrevConfigPath     = StateConfigPath + ".prev"
	PrevConfigHashPath = PrevConfigPath + ".sha512"
	// StatusPath is the agent's status; kiln firstboot --help names it.
	StatusPath = RunDir + "/status.json"
	// EtcdSnapshotDir holds a master's scheduled etcd snapshots, on the
	// state partition beside etcd's data (docs/operations.md).
	EtcdSnapshotDir = VarDir + "/etcd-snapshots"
	// FailGateSwitch, in a build made with the hidden test switch kiln
	// build --test-fail-health-gate, makes the role fail the health gate
	// of a trying boot on purpose: the upgrade scenario's bad image.
	FailGateSwitch = LibDir + "/test-fail-health-gate"
	// FirstBootFlag marks a boot that made the state partition, for the
	// units of a config that run once (ConditionPathExists=).
	FirstBootFlag = RunDir + "/first-boot"
)
