package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/migrations"
)

// SchemaVersion is where a schema stands: its newest migration and the schema
// release that shipped it (migrations.Releases).
type SchemaVersion struct {
	// Migration is the newest migration's file name, "" for none.
	Migration string
	Release   int
}

func (v SchemaVersion) String() string {
	if v.Migration == "" {
		return "empty"
	}
	return fmt.Sprintf("%s (schema release %d)", strings.TrimSuffix(v.Migration, ".sql"), v.Release)
}

// Ahead reports whether v holds migrations that build does not know.
func (v SchemaVersion) Ahead(build SchemaVersion) bool { return v.Migration > build.Migration }

// MigrateReport is what Migrate found and did.
type MigrateReport struct {
	Before, After SchemaVersion
	// Applied names the migrations applied, in order.
	Applied []string
}

// BuildSchema is the newest schema this build knows.
func BuildSchema() SchemaVersion {
	names := migrations.Names()
	last := names[len(names)-1]
	return SchemaVersion{Migration: last, Release: migrations.Release(last)}
}

// CheckSchema refuses, with ECONFLICT naming both versions, a database whose
// schema is more than one release ahead of this build; it writes nothing.
// One release ahead is the previous build's place during a rolling upgrade
// and after a one-release downgrade, which the additive rule keeps working.
func (s *Store) CheckSchema(ctx context.Context) (SchemaVersion, error) {
	v, _, err := readSchema(ctx, s.pool)
	if err != nil {
		return v, err
	}
	return v, schemaTooNew(v, BuildSchema())
}

func schemaTooNew(db, build SchemaVersion) error {
	if db.Release <= build.Release+1 {
		return nil
	}
	return crewlet.Errorf(crewlet.ECONFLICT,
		"the database's schema is at %s, this build knows up to %s: a build runs only on a schema at most one release newer than its own. "+
			"Run a build that knows %s or newer, or, to go back further, restore the database from a backup taken before the upgrade "+
			`(docs/operations.md, "Upgrades and downgrades")`,
		db, build, strings.TrimSuffix(db.Migration, ".sql"))
}

// readSchema returns the database's schema version and the migrations it
// holds. A migration recorded without its release (by a build before the
// release column) is placed by this build's marks; the release is read
// through to_jsonb so that a table without the column reads too.
func readSchema(ctx context.Context, q querier) (SchemaVersion, map[string]bool, error) {
	var v SchemaVersion
	have := map[string]bool{}
	var name string
	var release *int
	rows, err := q.Query(ctx, `SELECT name, (to_jsonb(m) ->> 'release')::int FROM schema_migrations m`)
	if err == nil {
		_, err = pgx.ForEachRow(rows, []any{&name, &release}, func() error {
			have[name] = true
			rel := migrations.Release(name)
			if release != nil {
				rel = *release
			}
			v.Migration, v.Release = max(v.Migration, name), max(v.Release, rel)
			return nil
		})
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: nothing migrated yet
		return SchemaVersion{}, have, nil
	}
	if err != nil {
		return SchemaVersion{}, nil, fmt.Errorf("read the schema version: %w", err)
	}
	return v, have, nil
}
