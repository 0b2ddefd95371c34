package crewlet

import "time"

// Inputs of the workflows that code outside them starts: a seat (the seat
// client starts and wakes it) and a person's ticket notes. They are here,
// not beside the workflows, so the client that starts them needs no import
// of the workflow code. Their JSON is in recorded histories: never rename
// a field.

// SeatInput starts or continues a seat workflow.
type SeatInput struct {
	Handle string `json:"handle"`
	Role   string `json:"role"`
	// ReadBatch is the most mailbox entries one read takes; 0 means 16.
	ReadBatch int `json:"read_batch,omitempty"`
	// HeartbeatTimeout is the host heartbeat timeout: how long a host may
	// stay silent before the seat re-establishes elsewhere. 0 means 3s.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// ReleaseWait bounds how long a voluntary release (move, drain) waits for
	// the turn in flight before it cancels it. 0 means 30s.
	ReleaseWait time.Duration `json:"release_wait,omitempty"`
	// RetryBackoff caps the wait after a failed turn (2s, 4s, ...). 0 means 10s.
	RetryBackoff time.Duration `json:"retry_backoff,omitempty"`
	// Backstop is how long an idle seat waits for a wake before it reads
	// its mailbox anyway, should every wake signal have been lost. 0 means
	// 1h.
	Backstop time.Duration `json:"backstop,omitempty"`
	// Carry is the state handed over by continue-as-new; nil on a first start.
	Carry *SeatCarry `json:"carry,omitempty"`
}

// SeatCarry is what a seat keeps across continue-as-new.
type SeatCarry struct {
	State    SeatState `json:"state"`
	Attached bool      `json:"attached"`
	// Move is a move request not yet carried out.
	Move *MoveRequest `json:"move,omitempty"`
	// Exclude lists nodes the next placement avoids (a host just lost).
	Exclude []string `json:"exclude,omitempty"`
	// WakePending is a wake that arrived before the hand-over.
	WakePending bool `json:"wake_pending"`
}

// PersonNotesInput starts a person's notes workflow; Pending carries the
// ticket changes not yet written across continue-as-new.
type PersonNotesInput struct {
	Person  string   `json:"person"`
	Pending []string `json:"pending,omitempty"`
}
