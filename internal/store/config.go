package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/wire"
)

// ConfigRevision is one applied org file.
type ConfigRevision struct {
	Revision  int64
	Document  string
	Digest    string
	AppliedBy string
	AppliedAt time.Time
	Changes   []config.Change
}

// configApplyLock serialises applies: two at once would both compute their
// report against the same base.
const configApplyLock = 0x63726577_636667 // "crew" "cfg"

// ActiveConfig returns the active revision, the highest; ok is false when
// none was ever applied.
func (s *Store) ActiveConfig(ctx context.Context) (rev ConfigRevision, ok bool, err error) {
	rev, err = s.configRevision(ctx, `ORDER BY revision DESC LIMIT 1`)
	if errors.Is(err, pgx.ErrNoRows) {
		return rev, false, nil
	}
	return rev, err == nil, err
}

// ActiveConfigNumber returns the active revision's number, 0 when none was
// ever applied: the one read a process makes every beat.
func (s *Store) ActiveConfigNumber(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(revision), 0) FROM config_revisions`).Scan(&n); err != nil {
		return 0, fmt.Errorf("read active config revision: %w", schemaMissing(err))
	}
	return n, nil
}

// ConfigDigestApplied reports whether a document with this digest was ever
// applied.
func (s *Store) ConfigDigestApplied(ctx context.Context, digest string) (bool, error) {
	var found bool
	err := s.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM config_revisions WHERE digest = $1)`, digest).Scan(&found)
	if err != nil {
		return false, fmt.Errorf("look up config digest: %w", schemaMissing(err))
	}
	return found, nil
}

func (s *Store) configRevision(ctx context.Context, tail string, args ...any) (ConfigRevision, error) {
	var r ConfigRevision
	var changes []byte
	err := s.pool.QueryRow(ctx, `SELECT revision, document, digest, applied_by, applied_at, changes FROM config_revisions `+tail, args...).
		Scan(&r.Revision, &r.Document, &r.Digest, &r.AppliedBy, &r.AppliedAt, &changes)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return r, err
		}
		return r, fmt.Errorf("read config revision: %w", schemaMissing(err))
	}
	if err := json.Unmarshal(changes, &r.Changes); err != nil {
		return r, fmt.Errorf("read config revision %d changes: %w", r.Revision, err)
	}
	return r, nil
}

// ApplyConfig stores a document as the next revision, provided the active
// revision is still base (0: none yet): the changes were computed against
// it. Another apply in between is a conflict, to be computed again.
func (s *Store) ApplyConfig(ctx context.Context, base int64, document, digest, by string, changes []config.Change) (ConfigRevision, error) {
	if changes == nil {
		changes = []config.Change{}
	}
	encoded, err := json.Marshal(changes)
	if err != nil {
		return ConfigRevision{}, err
	}
	rev := ConfigRevision{Document: document, Digest: digest, AppliedBy: by, Changes: changes}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(configApplyLock)); err != nil {
			return err
		}
		var active int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(revision), 0) FROM config_revisions`).Scan(&active); err != nil {
			return err
		}
		if active != base {
			return crewlet.Errorf(crewlet.ECONFLICT, "revision %d was applied while this one was checked against %d; apply again", active, base)
		}
		rev.Revision = active + 1
		return tx.QueryRow(ctx, `
			INSERT INTO config_revisions (revision, document, digest, applied_by, changes) VALUES ($1, $2, $3, $4, $5)
			RETURNING applied_at`, rev.Revision, document, digest, by, encoded).Scan(&rev.AppliedAt)
	})
	if err != nil {
		if crewlet.ErrorCode(err) == crewlet.ECONFLICT {
			return ConfigRevision{}, err
		}
		return ConfigRevision{}, fmt.Errorf("store config revision: %w", schemaMissing(err))
	}
	return rev, nil
}

// ReportConfigProcess records which revision a process runs now.
func (s *Store) ReportConfigProcess(ctx context.Context, p wire.ConfigProcess) error {
	if p.NeedsRestart == nil {
		p.NeedsRestart = []string{}
	}
	_, err := s.pool.Exec(ctx, `
		INSERT INTO config_processes (process, kind, revision, needs_restart, problem) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (process) DO UPDATE SET revision = $3, needs_restart = $4, problem = $5, seen_at = now()`,
		p.Process, p.Kind, p.Revision, p.NeedsRestart, p.Problem)
	if err != nil {
		return fmt.Errorf("record config revision of %s: %w", p.Process, schemaMissing(err))
	}
	return nil
}

// ConfigProcesses lists the processes seen within liveWithin.
func (s *Store) ConfigProcesses(ctx context.Context, liveWithin time.Duration) ([]wire.ConfigProcess, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT process, kind, revision, needs_restart, problem, started_at, seen_at FROM config_processes
		WHERE seen_at > now() - make_interval(secs => $1) ORDER BY process`, liveWithin.Seconds())
	if err != nil {
		return nil, fmt.Errorf("list config processes: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (wire.ConfigProcess, error) {
		var p wire.ConfigProcess
		err := r.Scan(&p.Process, &p.Kind, &p.Revision, &p.NeedsRestart, &p.Problem, &p.StartedAt, &p.SeenAt)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("list config processes: %w", err)
	}
	return out, nil
}

// SetNodeSeatsDigest records the seats a node's current revision names.
func (s *Store) SetNodeSeatsDigest(ctx context.Context, incarnation, digest string) error {
	if _, err := s.pool.Exec(ctx, `UPDATE nodes SET seats_digest = $2 WHERE incarnation = $1`, incarnation, digest); err != nil {
		return fmt.Errorf("record seats digest of %s: %w", incarnation, schemaMissing(err))
	}
	return nil
}
