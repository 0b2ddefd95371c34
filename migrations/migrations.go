// Package migrations holds crewlet's Postgres schema as numbered SQL files,
// embedded in the binary.
package migrations

import "embed"

// Files holds every NNNN_name.sql migration; they apply in name order.
//
//go:embed *.sql
var Files embed.FS
