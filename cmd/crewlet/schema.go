package main

import (
	"log/slog"

	"github.com/crewlet/crewlet/internal/store"
)

// logSchema says what a process's start did to the schema: the migrations
// it applied, or that it runs as the older build on a newer schema.
func logSchema(log *slog.Logger, r store.MigrateReport) {
	build := store.BuildSchema()
	if len(r.Applied) > 0 {
		log.Info("migrations_applied", "names", r.Applied, "schema_before", r.Before.String(), "schema_after", r.After.String())
	}
	if r.After.Ahead(build) {
		log.Warn("schema_ahead_of_build", "schema", r.After.String(), "build", build.String(),
			"hint", "a newer build migrated this database; this build runs on it for one release, during a rolling upgrade or after a downgrade "+`(docs/operations.md, "Upgrades and downgrades")`)
	}
}
