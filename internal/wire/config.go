package wire

import (
	"time"

	"github.com/crewlet/crewlet/internal/config"
)

// ConfigApplyRequest is the body of POST /config: an org file to apply as
// the next revision.
type ConfigApplyRequest struct {
	// Document is the org file, YAML.
	Document string `json:"document"`
	// Restart says the operator will restart every process, which an apply
	// that changes a cold key needs.
	Restart bool `json:"restart,omitempty"`
}

// ConfigReport is what an apply did.
type ConfigReport struct {
	// Revision is the revision now active: the new one, or the one already
	// active when the document was the same.
	Revision  int64     `json:"revision"`
	AppliedBy string    `json:"applied_by"`
	AppliedAt time.Time `json:"applied_at"`
	// Unchanged is set when the document was the active revision's: no
	// revision was added.
	Unchanged bool `json:"unchanged,omitempty"`
	// Changes lists each changed key and its class; empty for the first
	// revision.
	Changes []config.Change `json:"changes"`
	// NeedsRestart lists the cold keys that change: the processes run
	// without them until they restart.
	NeedsRestart []string `json:"needs_restart,omitempty"`
}

// ConfigState is GET /config: the active revision and which revision each
// process runs.
type ConfigState struct {
	Revision  int64           `json:"revision"`
	Digest    string          `json:"digest"`
	AppliedBy string          `json:"applied_by"`
	AppliedAt time.Time       `json:"applied_at"`
	Changes   []config.Change `json:"changes"`
	Processes []ConfigProcess `json:"processes"`
	// Document is the active org file, with the values written inline
	// that may be secrets shown as <redacted> (config.RedactDocument).
	Document string `json:"document"`
	// Redacted are the paths of those values (roles.dev.mcp[0].env[1]).
	Redacted []string `json:"redacted,omitempty"`
}

// ConfigProcess is which revision one server process runs.
type ConfigProcess struct {
	Process  string `json:"process"`
	Kind     string `json:"kind"`
	Revision int64  `json:"revision"`
	// NeedsRestart lists the cold keys of the active revision the process
	// runs without.
	NeedsRestart []string `json:"needs_restart,omitempty"`
	// Problem says why the process does not run the active revision.
	Problem   string    `json:"problem,omitempty"`
	StartedAt time.Time `json:"started_at"`
	SeenAt    time.Time `json:"seen_at"`
}

// SpawnRequest is the body of POST /seats/spawn.
type SpawnRequest struct {
	// Role is the role whose pool the seat is spawned from.
	Role string `json:"role"`
}

// SpawnedSeat is a seat just spawned.
type SpawnedSeat struct {
	Handle string `json:"handle"`
	Role   string `json:"role"`
}

// PoolView is one role's spawn pool (GET /pools).
type PoolView struct {
	Role          string `json:"role"`
	MaxSeats      int    `json:"max_seats"`
	Live          int    `json:"live"`
	Free          int    `json:"free"`
	Reclaimable   int    `json:"reclaimable"`
	IdleReapAfter string `json:"idle_reap_after"`
	// Seats are the live spawned seats of the role.
	Seats []string `json:"seats"`
}
