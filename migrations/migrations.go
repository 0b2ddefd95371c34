// Package migrations holds crewlet's Postgres schema as numbered SQL files,
// embedded in the binary.
package migrations

import (
	"embed"
	"io/fs"
	"sort"
)

// Files holds every NNNN_name.sql migration; they apply in name order.
//
//go:embed *.sql
var Files embed.FS

// Releases marks where each schema release ends: the last migration each
// release shipped, oldest first. Migrations after the last mark belong to the
// next release; cutting a release appends its last migration here. A build
// runs on a database at most one release ahead of its own, and a migration
// is additive unless marked (docs/operations.md, "Upgrades and downgrades").
var Releases = []string{
	"0029_ticket_notify.sql", // every migration before the release rule
}

// Names returns every migration's file name in apply order.
func Names() []string {
	names, err := fs.Glob(Files, "*.sql")
	if err != nil {
		panic(err) // a constant pattern: it cannot be malformed
	}
	sort.Strings(names)
	return names
}

// Release is the schema release that ships the migration named name, by the
// marks this build knows: 1 for the first.
func Release(name string) int {
	for i, mark := range Releases {
		if name <= mark {
			return i + 1
		}
	}
	return len(Releases) + 1
}
