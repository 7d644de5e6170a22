package etcdsnapshot

import (
	"context"
	"errors"
	"fmt"
)

// Source is one member Pull may take a snapshot from.
type Source struct {
	Name     string // the master, for messages
	Endpoint string // its client URL
	Member   Member // a client of that endpoint alone
}

// Pull saves a snapshot to path from the first of sources that answers
// a status call and streams a whole snapshot, saying which it tries and
// why each before failed. A path that exists is refused before any
// member is asked (ErrExists).
func Pull(ctx context.Context, sources []Source, path string, log Logf) (Snapshot, error) {
	if len(sources) == 0 {
		return Snapshot{}, errors.New("no etcd member to take a snapshot from")
	}
	if err := refuseExisting(path); err != nil {
		return Snapshot{}, err
	}
	var errs []error
	for _, s := range sources {
		st, err := statusOf(ctx, s.Member, s.Endpoint)
		if err != nil {
			log("master %s (%s): %v", s.Name, s.Endpoint, err)
			errs = append(errs, fmt.Errorf("master %s: %w", s.Name, err))
			continue
		}
		log("master %s (%s): etcd %s, database %s at revision %d; taking a snapshot", s.Name, s.Endpoint, st.Version, bytesOf(uint64(max(st.DbSize, 0))), st.Header.GetRevision())
		snap, err := save(ctx, s.Member, path, st.Header.GetRevision())
		switch {
		case err == nil:
			return snap, nil
		case errors.Is(err, ErrExists), ctx.Err() != nil:
			return Snapshot{}, err
		}
		log("master %s: %v", s.Name, err)
		errs = append(errs, fmt.Errorf("master %s: %w", s.Name, err))
	}
	return Snapshot{}, fmt.Errorf("no master gave a snapshot: %w", errors.Join(errs...))
}
