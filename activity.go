package crewlet

import "time"

// Activity names. Workflows refer to activities by these names so that the
// workflows package never imports the activities package.
const (
	ActivityAttach        = "Attach"
	ActivitySetSeatStatus = "SetSeatStatus"
	ActivityReadMail      = "ReadMail"
	ActivityAckMail       = "AckMail"
	ActivityRunTurn       = "RunTurn"
)

// FencedErrorType is the Temporal application error type of an activity
// refused because the epoch it carried is no longer the seat's.
const FencedErrorType = "seat_fenced"

// AttachInput starts a tenure for a seat on the node that runs the activity.
type AttachInput struct {
	Handle string `json:"handle"`
}

// AttachOutput is the new tenure.
type AttachOutput struct {
	Epoch      int64     `json:"epoch"`
	Node       string    `json:"node"`
	AcquiredAt time.Time `json:"acquired_at"`
}

// SeatStatusInput records a seat's lifecycle status, fenced by epoch.
type SeatStatusInput struct {
	Handle string `json:"handle"`
	Epoch  int64  `json:"epoch"`
	Status string `json:"status"`
}

// ReadMailInput asks for the next entries of a seat's mailbox.
type ReadMailInput struct {
	Handle   string `json:"handle"`
	Epoch    int64  `json:"epoch"`
	Consumer string `json:"consumer"`
	Max      int    `json:"max"`
	// ClearAwake lowers the seat's awake flag when the mailbox is empty, so the
	// next publish signals wake; set it when the seat will sleep on an empty read.
	ClearAwake bool `json:"clear_awake"`
}

// ReadMailOutput lists the entries read, by reference only.
type ReadMailOutput struct {
	Mail []MailRef `json:"mail"`
	Lag  int64     `json:"lag"`
}

// AckMailInput marks entries handled, fenced by epoch.
type AckMailInput struct {
	Handle    string   `json:"handle"`
	Epoch     int64    `json:"epoch"`
	StreamIDs []string `json:"stream_ids"`
}

// TurnInput runs one turn over a batch of mailbox entries.
type TurnInput struct {
	Handle  string    `json:"handle"`
	Epoch   int64     `json:"epoch"`
	TurnID  string    `json:"turn_id"`
	WorkKey string    `json:"work_key"`
	Mail    []MailRef `json:"mail"`
}

// TurnOutput says what the turn did with each trigger.
type TurnOutput struct {
	// Answered are the event ids the turn ran for.
	Answered []string `json:"answered"`
	// Skipped are event ids the completion ledger already held, or whose
	// entries no longer exist; the seat acks them without running anything.
	Skipped []string `json:"skipped"`
	Replies int      `json:"replies"`
}
