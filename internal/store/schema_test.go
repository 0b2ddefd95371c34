package store_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/migrations"
)

// A build's first start on an empty database reports every migration it
// applied and the schema before and after; the next start applies nothing
// and stands where the first left it.
func TestMigrateReportsWhatItApplied(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Open(ctx, testenv.Database(t))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	first, err := st.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	build := store.BuildSchema()
	if first.Before != (store.SchemaVersion{}) || first.After != build || !slices.Equal(first.Applied, migrations.Names()) {
		t.Fatalf("first migrate: before %s, after %s, applied %v; want empty, %s, every migration", first.Before, first.After, first.Applied, build)
	}
	again, err := st.Migrate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.Before != build || again.After != build || len(again.Applied) != 0 {
		t.Fatalf("second migrate: before %s, after %s, applied %v; want %s twice, nothing applied", again.Before, again.After, again.Applied, build)
	}
	if got, err := st.CheckSchema(ctx); err != nil || got != build {
		t.Fatalf("CheckSchema = %s, %v; want %s", got, err, build)
	}
}

// A build runs on a database one schema release ahead of it (the previous
// build during a rolling upgrade, however many migrations that release
// added) and refuses one two releases ahead, naming both versions, before it
// applies anything.
func TestSchemaMoreThanOneReleaseAheadIsRefused(t *testing.T) {
	t.Parallel()
	build := store.BuildSchema()
	for _, tc := range []struct {
		name   string
		future map[string]int // migration → its release
		refuse string         // the database's version named, "" when allowed
	}{
		{name: "same release", future: map[string]int{"9001_same.sql": build.Release}},
		{name: "one release ahead, several migrations", future: map[string]int{
			"9001_next_a.sql": build.Release + 1, "9002_next_b.sql": build.Release + 1, "9003_next_c.sql": build.Release + 1}},
		{name: "two releases ahead", future: map[string]int{"9001_next.sql": build.Release + 1, "9002_after.sql": build.Release + 2},
			refuse: fmt.Sprintf("9002_after (schema release %d)", build.Release+2)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			url := testenv.MigratedDatabase(t)
			st := testenv.Store(t, url)
			conn, err := pgx.Connect(ctx, url)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			for name, release := range tc.future {
				if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (name, release) VALUES ($1, $2)`, name, release); err != nil {
					t.Fatal(err)
				}
			}
			if tc.refuse != "" {
				// The record of a migration this build knows goes missing:
				// had Migrate tried it again before refusing, it would fail
				// on what that migration already made, with another error.
				if _, err := conn.Exec(ctx, `DELETE FROM schema_migrations WHERE name = $1`, build.Migration); err != nil {
					t.Fatal(err)
				}
			}
			_, checkErr := st.CheckSchema(ctx)
			report, migrateErr := st.Migrate(ctx)
			if tc.refuse == "" {
				if checkErr != nil {
					t.Fatalf("CheckSchema: %v; want it allowed", checkErr)
				}
				if migrateErr != nil || !report.After.Ahead(build) || len(report.Applied) != 0 {
					t.Fatalf("Migrate = %+v, %v; want nothing applied and the schema ahead of the build", report, migrateErr)
				}
				return
			}
			for what, err := range map[string]error{"CheckSchema": checkErr, "Migrate": migrateErr} {
				if crewlet.ErrorCode(err) != crewlet.ECONFLICT {
					t.Fatalf("%s: %v; want %s", what, err, crewlet.ECONFLICT)
				}
				for _, want := range []string{"the database's schema is at " + tc.refuse, "this build knows up to " + build.String(), "docs/operations.md"} {
					if !strings.Contains(err.Error(), want) {
						t.Fatalf("%s: %q does not say %q", what, err, want)
					}
				}
			}
			if len(report.Applied) != 0 {
				t.Fatalf("refused Migrate applied %v", report.Applied)
			}
		})
	}
}

// A database migrated by a build from before the release column reads: its
// migrations are placed by this build's marks (one this build does not know
// falls after its last mark), and the next Migrate adds the column.
func TestSchemaFromBeforeTheReleaseColumn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.MigratedDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `ALTER TABLE schema_migrations DROP COLUMN IF EXISTS release`); err != nil {
		t.Fatal(err)
	}
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	build := store.BuildSchema()
	if got, err := st.CheckSchema(ctx); err != nil || got != build {
		t.Fatalf("CheckSchema = %s, %v; want %s", got, err, build)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (name) VALUES ('9001_unmarked.sql')`); err != nil {
		t.Fatal(err)
	}
	report, err := st.Migrate(ctx)
	want := store.SchemaVersion{Migration: "9001_unmarked.sql", Release: migrations.Release("9001_unmarked.sql")}
	if err != nil || report.Before != want || len(report.Applied) != 0 {
		t.Fatalf("Migrate = %+v, %v; want it to run on %s and apply nothing", report, err, want)
	}
	var nulls int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM schema_migrations WHERE release IS NULL`).Scan(&nulls); err != nil {
		t.Fatalf("read the release column Migrate adds: %v", err)
	}
	if nulls != len(migrations.Names())+1 {
		t.Fatalf("%d rows without a release; want every row recorded before the column (%d)", nulls, len(migrations.Names())+1)
	}
}
