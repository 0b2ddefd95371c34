package crewlet

import "time"

// SeatHealth is what the health duty last concluded about an agent seat
// (docs/architecture.md, "Seat health"). Where several apply, the one
// highest in HealthStates is shown and the others are named in the cause.
type SeatHealth string

const (
	// HealthGone: the org has the seat, Temporal runs no workflow for it,
	// and that was seen on a list that answered. Terminal: the seat's open
	// tickets are failed.
	HealthGone SeatHealth = "gone"
	// HealthUnprovenTeardown: a node could not prove the seat's MCP servers
	// stopped after its tenure ended.
	HealthUnprovenTeardown SeatHealth = "unproven_teardown"
	// HealthUnplaceable: establishing, and no live node matches its placement.
	HealthUnplaceable SeatHealth = "unplaceable"
	// HealthEstablishing: establishing for longer than health.establishing_after.
	HealthEstablishing SeatHealth = "establishing_too_long"
	// HealthFailing: its last health.failing_turns turns all failed.
	HealthFailing SeatHealth = "failing"
	// HealthDeadLetters: health.dead_letters or more of its triggers were
	// dead-lettered within health.dead_letter_window.
	HealthDeadLetters SeatHealth = "dead_letters_rising"
	// HealthOverrunning: a turn runs longer than health.turn_overrun and
	// is not waiting on a ticket.
	HealthOverrunning SeatHealth = "turn_overrunning"
	// HealthBacklog: more mail waits than health.backlog, or the oldest
	// unanswered entry is older than health.oldest_unread.
	HealthBacklog SeatHealth = "backlog"
	// HealthHeld: a budget cap holds its turns, or every profile of its
	// pool is out (quarantined or cooling).
	HealthHeld SeatHealth = "held"
	// HealthPaused: paused by someone.
	HealthPaused SeatHealth = "paused"
	// HealthWaiting: a turn waits on a ticket (a seat or a person).
	HealthWaiting SeatHealth = "waiting"
	// HealthOK: none of the above.
	HealthOK SeatHealth = "ok"
	// HealthUnknown: the monitor has not classified the seat yet.
	HealthUnknown SeatHealth = "unknown"
)

// HealthStates lists the states in precedence order, most urgent first.
var HealthStates = []SeatHealth{HealthGone, HealthUnprovenTeardown, HealthUnplaceable, HealthEstablishing,
	HealthFailing, HealthDeadLetters, HealthOverrunning, HealthBacklog, HealthHeld, HealthPaused, HealthWaiting, HealthOK}

// Terminal reports whether a seat in state h will not answer the tickets
// it serves, so the health duty fails them.
func (h SeatHealth) Terminal() bool { return h == HealthGone }

// SeatHealthRow is a seat's health as the health duty last recorded it.
type SeatHealthRow struct {
	Seat  string     `json:"seat"`
	State SeatHealth `json:"state"`
	Cause string     `json:"cause"`
	// Since is when the seat entered State.
	Since time.Time `json:"since"`
	// CheckedAt is the duty's last pass that classified the seat.
	CheckedAt time.Time `json:"checked_at"`
}

// HealthTransition is one change of a seat's health.
type HealthTransition struct {
	Seat  string     `json:"seat"`
	From  SeatHealth `json:"from"`
	To    SeatHealth `json:"to"`
	Cause string     `json:"cause"`
	At    time.Time  `json:"at"`
}

// HealthOutput is what one pass of the health duty found.
type HealthOutput struct {
	Seats       int                `json:"seats"`
	Transitions []HealthTransition `json:"transitions,omitempty"`
	// Unknown is set when Temporal's list of seat workflows did not answer:
	// the pass classified nothing as gone.
	Unknown bool `json:"unknown,omitempty"`
	// TicketsFailed counts the open tickets of seats in a terminal state
	// that the pass failed (as counted just before).
	TicketsFailed int `json:"tickets_failed,omitempty"`
}
