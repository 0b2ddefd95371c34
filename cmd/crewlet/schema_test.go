package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// `crewlet migrate` says what it applied and where the schema went; every
// server command runs on a schema one release newer than its build and
// refuses one two releases newer, naming both versions, before it serves.
func TestServerCommandsRefuseASchemaTwoReleasesNewer(t *testing.T) {
	testenv.Stack(t)
	suffix := testenv.Suffix()
	pgEnv := "CREWLET_TEST_PG_" + strings.ToUpper(suffix)
	url := testenv.Database(t)
	t.Setenv(pgEnv, url)
	org := writeOrg(t, "acme", "crewlet-acme-"+suffix, pgEnv, "cto")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	build := store.BuildSchema()

	var out bytes.Buffer
	if err := run(ctx, []string{"migrate", "--config", org}, &out, io.Discard); err != nil {
		t.Fatalf("migrate a new database: %v", err)
	}
	for _, want := range []string{"applied 0001_seats.sql", "applied " + build.Migration, "schema empty -> " + build.String()} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("migrate output:\n%s\nwant %q", out.String(), want)
		}
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	next := fmt.Sprintf("9001_next (schema release %d)", build.Release+1)
	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (name, release) VALUES ('9001_next.sql', $1)`, build.Release+1); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	if err := run(ctx, []string{"migrate", "--config", org}, &out, io.Discard); err != nil {
		t.Fatalf("migrate on a schema one release newer: %v", err)
	}
	for _, want := range []string{"up to date at " + next, "ahead of this build (" + build.String() + ")"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("migrate output:\n%s\nwant %q", out.String(), want)
		}
	}

	if _, err := conn.Exec(ctx, `INSERT INTO schema_migrations (name, release) VALUES ('9002_after.sql', $1)`, build.Release+2); err != nil {
		t.Fatal(err)
	}
	after := fmt.Sprintf("9002_after (schema release %d)", build.Release+2)
	for _, cmd := range []string{"migrate", "api", "worker", "serve"} {
		err := run(ctx, []string{cmd, "--config", org}, io.Discard, io.Discard)
		if crewlet.ErrorCode(err) != crewlet.ECONFLICT {
			t.Fatalf("%s on a schema two releases newer: %v; want %s", cmd, err, crewlet.ECONFLICT)
		}
		for _, want := range []string{"the database's schema is at " + after, "this build knows up to " + build.String(), "Run a build that knows 9002_after or newer"} {
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("%s: %q does not say %q", cmd, err, want)
			}
		}
	}
}

// A process whose start migrated says so in one line, naming what it applied
// and the schema before and after; one that runs on a newer schema warns.
func TestStartLogsWhatItDidToTheSchema(t *testing.T) {
	build := store.BuildSchema()
	ahead := store.SchemaVersion{Migration: "9001_next.sql", Release: build.Release + 1}
	for _, tc := range []struct {
		name   string
		report store.MigrateReport
		want   []string
	}{
		{name: "applied", report: store.MigrateReport{After: build, Applied: []string{"0001_seats.sql", build.Migration}},
			want: []string{"msg=migrations_applied", "0001_seats.sql", build.Migration, "schema_before=empty", `schema_after="` + build.String()}},
		{name: "ahead", report: store.MigrateReport{Before: ahead, After: ahead},
			want: []string{"msg=schema_ahead_of_build", `schema="` + ahead.String(), `build="` + build.String()}},
		{name: "up to date", report: store.MigrateReport{Before: build, After: build}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			logSchema(slog.New(slog.NewTextHandler(&buf, nil)), tc.report)
			if len(tc.want) == 0 && buf.Len() != 0 {
				t.Fatalf("logged %q; want nothing", buf.String())
			}
			for _, want := range tc.want {
				if !strings.Contains(buf.String(), want) {
					t.Fatalf("logged %q; want %q", buf.String(), want)
				}
			}
		})
	}
}
