package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/crewlet/crewlet"
)

// Deployment is one crewlet deployment: a company on a Temporal namespace and
// task queue. A database belongs to exactly one (migration 0015).
type Deployment struct {
	Company   string
	Namespace string
	TaskQueue string
	// CreatedAt is when the deployment claimed the database; a claim ignores it.
	CreatedAt time.Time
}

func (d Deployment) same(o Deployment) bool {
	return d.Company == o.Company && d.Namespace == o.Namespace && d.TaskQueue == o.TaskQueue
}

func (d Deployment) describe() string {
	return fmt.Sprintf("company %q (Temporal namespace %q, task queue %q)", d.Company, d.Namespace, d.TaskQueue)
}

// ClaimDeployment records d as the deployment the database belongs to when
// none is recorded yet, and refuses with ECONFLICT, naming both, when another
// one is. Claiming again as the same deployment changes nothing. Two processes
// claiming an empty database at once insert one row between them (the table
// has a one-value key); the other compares against it.
//
// A database that predates migration 0015 (the dev stack's shared one) holds
// data but no row: the first server process started after the upgrade claims
// it, so upgrading needs no manual step.
func (s *Store) ClaimDeployment(ctx context.Context, d Deployment) error {
	if _, err := s.pool.Exec(ctx, `
		INSERT INTO deployment (company, namespace, task_queue) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO NOTHING`, d.Company, d.Namespace, d.TaskQueue); err != nil {
		return fmt.Errorf("claim database for company %s: %w", d.Company, schemaMissing(err))
	}
	// A statement of its own: it sees a row another process inserted while
	// ours waited on the key, which the INSERT's snapshot does not.
	got, ok, err := s.RecordedDeployment(ctx)
	if err != nil {
		return err
	}
	if !ok {
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "the database's deployment record is missing after claiming it; run `crewlet migrate` first")
	}
	return deploymentConflict(got, d)
}

// CheckDeployment refuses, as ClaimDeployment does, a database another
// deployment claimed, but writes nothing: a database no deployment claimed
// yet, or one not yet migrated to 0015, passes. Server processes call it
// before migrating, so a migration never touches another company's database.
func (s *Store) CheckDeployment(ctx context.Context, d Deployment) error {
	got, ok, err := s.RecordedDeployment(ctx)
	if err != nil || !ok {
		return err
	}
	return deploymentConflict(got, d)
}

// RecordedDeployment returns the deployment that claimed the database; ok is
// false when none has yet, or the database predates migration 0015.
func (s *Store) RecordedDeployment(ctx context.Context) (Deployment, bool, error) {
	var d Deployment
	err := s.pool.QueryRow(ctx, `SELECT company, namespace, task_queue, created_at FROM deployment`).
		Scan(&d.Company, &d.Namespace, &d.TaskQueue, &d.CreatedAt)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return Deployment{}, false, nil
	case err != nil:
		return Deployment{}, false, fmt.Errorf("read the database's deployment: %w", err)
	}
	return d, true, nil
}

// deploymentConflict is nil when ours is the recorded deployment, else the
// refusal that names both and says what to do.
func deploymentConflict(recorded, ours Deployment) error {
	if recorded.same(ours) {
		return nil
	}
	return crewlet.Errorf(crewlet.ECONFLICT,
		"this database belongs to %s since %s, not to %s that this process runs: "+
			"two deployments on one database place seats on each other's nodes and share their mailbox registry. "+
			"Give each company its own database (postgres.url_env names the variable holding its URL); "+
			"if this is the same company moved to another namespace or task queue, stop its processes and clear the claim (docs/operations.md)",
		recorded.describe(), recorded.CreatedAt.UTC().Format(time.RFC3339), ours.describe())
}
