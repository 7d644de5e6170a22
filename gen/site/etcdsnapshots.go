package site

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/kiln-project/kiln/contract/nodefile"
	"github.com/kiln-project/kiln/internal/validation"
)

// EtcdSnapshots is the masters' schedule of etcd snapshots
// (docs/operations.md, "etcd snapshots"): every master snapshots its own
// etcd member onto its state partition Every so often and keeps the Keep
// newest. Every 0 (or "0s") turns them off.
type EtcdSnapshots struct {
	Every SnapshotInterval `json:"every,omitempty"`
	// Keep is nil when the site leaves it out; 0 is refused rather than
	// read as "keep none".
	Keep *int `json:"keep,omitempty"`
}

// SnapshotInterval is cluster.etcdSnapshots.every as the site gives it:
// a duration ("1h", "30m", "1d") or 0. A YAML number is kept as its text,
// so a wrong value comes back from validation naming the field rather
// than from decoding, which names none.
type SnapshotInterval string

// UnmarshalJSON takes a string or a bare number.
func (i *SnapshotInterval) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err == nil {
		*i = SnapshotInterval(s)
		return nil
	}
	*i = SnapshotInterval(bytes.TrimSpace(data))
	return nil
}

// Defaults and bounds of cluster.etcdSnapshots.
const (
	DefaultSnapshotEvery = "1h"
	DefaultSnapshotKeep  = 24
	// MinSnapshotEvery keeps a snapshot, which reads the whole database,
	// from running back to back on a large one.
	MinSnapshotEvery = 5 * time.Minute
)

func (e *EtcdSnapshots) setDefaults() {
	if e.Every == "" {
		e.Every = DefaultSnapshotEvery
	}
	if e.Keep == nil {
		keep := DefaultSnapshotKeep
		e.Keep = &keep
	}
}

// Interval is how often each master takes a snapshot, 0 when they are
// off (valid after Load).
func (e EtcdSnapshots) Interval() time.Duration {
	d, _ := ParseDuration(string(e.Every))
	return d
}

// Schedule is what a master's node file carries: nil when snapshots
// are off.
func (e EtcdSnapshots) Schedule() *nodefile.EtcdSnapshots {
	d := e.Interval()
	if d == 0 || e.Keep == nil {
		return nil
	}
	return &nodefile.EtcdSnapshots{Every: d.String(), Keep: *e.Keep}
}

func (e EtcdSnapshots) validate(l *validation.List, p validation.Path) {
	d, err := ParseDuration(string(e.Every))
	switch {
	case err == nil && d == 0:
		return
	case err != nil || d < 0:
		l.Addf(p.Field("every").String(), "must be a duration such as 1h, 30m or 1d, or 0 to turn snapshots off, got %q", e.Every)
	case d < MinSnapshotEvery:
		l.Addf(p.Field("every").String(), "%s is more often than every %s, the shortest interval kiln takes (a snapshot reads the whole database); 0 turns snapshots off", e.Every, MinSnapshotEvery)
	}
	if e.Keep != nil && *e.Keep < 1 {
		l.Addf(p.Field("keep").String(), "must be at least 1, got %d: to turn snapshots off, set every: 0", *e.Keep)
	}
}
