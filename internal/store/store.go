// Package store is crewlet's Postgres access: seats and their epochs, the
// transcript, the completion ledger and the mailbox registry.
package store

import (
	"context"
	"fmt"
	"io/fs"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/migrations"
)

// Store wraps a pgx pool.
type Store struct {
	pool *pgxpool.Pool
}

// Open connects to Postgres and checks the connection.
func Open(ctx context.Context, url string) (*Store, error) {
	return OpenTraced(ctx, url, nil)
}

// OpenTraced is Open with every query reported to tracer (nil traces
// none): how a benchmark counts the queries a pass costs.
func OpenTraced(ctx context.Context, url string, tracer pgx.QueryTracer) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", redactURL(err, url))
	}
	cfg.ConnConfig.Tracer = tracer
	if !strings.Contains(url, "pool_max_conns") {
		// A worker runs many seats' short steps at once; pgx's default of
		// max(4, CPUs) queues them behind each other on a small machine.
		cfg.MaxConns = max(cfg.MaxConns, 16)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open postgres: %w", redactURL(err, url))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect postgres: %w", redactURL(err, url))
	}
	return &Store{pool: pool}, nil
}

// Dedicated returns a Store on a small pool of its own, to the same
// database: for a loop that must not wait behind the work it watches. A
// node's presence beat on the shared pool waited for a connection while
// placements held every one waiting on their lock, and the node fenced
// itself for want of a free connection.
func (s *Store) Dedicated(ctx context.Context, conns int32) (*Store, error) {
	cfg := s.pool.Config()
	cfg.MaxConns, cfg.MinConns = conns, min(cfg.MinConns, conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open a dedicated postgres pool: %w", err)
	}
	return &Store{pool: pool}, nil
}

// redactURL keeps a connection URL (which may hold a password) out of errors.
func redactURL(err error, url string) error {
	if url == "" || !strings.Contains(err.Error(), url) {
		return err
	}
	return fmt.Errorf("%s", strings.ReplaceAll(err.Error(), url, "<url>"))
}

// Close releases the pool.
func (s *Store) Close() { s.pool.Close() }

// Ping checks that Postgres answers.
func (s *Store) Ping(ctx context.Context) error { return s.pool.Ping(ctx) }

// migrationLockKey is the advisory lock held while migrating, so two processes
// starting at once apply each migration once.
const migrationLockKey = 0x63726577 // "crew"

// Migrate applies every embedded migration not yet applied, in name order,
// each in its own transaction, under a Postgres advisory lock, recording the
// schema release of each. It reports the schema version before and after and
// what it applied; re-running it applies nothing. A database more than one
// release ahead of this build is refused (CheckSchema) before anything is
// applied.
func (s *Store) Migrate(ctx context.Context) (MigrateReport, error) {
	var report MigrateReport
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey); err != nil {
		return report, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLockKey) //nolint:errcheck // the lock also ends with the session

	// release is NULL on rows applied before it existed.
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		name text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());
		ALTER TABLE schema_migrations ADD COLUMN IF NOT EXISTS release integer`); err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	before, have, err := readSchema(ctx, conn)
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	report.Before, report.After = before, before
	if err := schemaTooNew(before, BuildSchema()); err != nil {
		return report, err
	}
	for _, name := range migrations.Names() {
		if have[name] {
			continue
		}
		body, err := fs.ReadFile(migrations.Files, name)
		if err != nil {
			return report, fmt.Errorf("migrate %s: %w", name, err)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name, release) VALUES ($1, $2)`, name, migrations.Release(name))
			return err
		})
		if err != nil {
			return report, fmt.Errorf("migrate %s: %w", name, err)
		}
		report.Applied = append(report.Applied, name)
		report.After = SchemaVersion{Migration: max(report.After.Migration, name), Release: max(report.After.Release, migrations.Release(name))}
	}
	return report, nil
}

// schemaMissing turns "relation does not exist" into an error that says what to do.
func schemaMissing(err error) error {
	if err != nil && strings.Contains(err.Error(), "does not exist") && strings.Contains(err.Error(), "relation") {
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "the database schema is missing; run `crewlet migrate` first")
	}
	return err
}
