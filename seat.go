package crewlet

import "time"

// SeatKind says whether a seat runs turns (agent) or only has a mailbox read
// by people (human).
type SeatKind string

const (
	SeatAgent SeatKind = "agent"
	SeatHuman SeatKind = "human"
)

// SeatStatus is where a seat workflow is in its life
// (docs/architecture.md, "The seat workflow").
type SeatStatus string

const (
	StatusEstablishing SeatStatus = "establishing"
	StatusIdle         SeatStatus = "idle"
	StatusRunning      SeatStatus = "running"
	StatusPaused       SeatStatus = "paused"
	StatusDraining     SeatStatus = "draining"
	StatusDrained      SeatStatus = "drained"
	StatusMoving       SeatStatus = "moving"
	StatusStopped      SeatStatus = "stopped"
	// StatusUnplaceable is a seat no node took: its placements were
	// refused (no live node matches it) or every node placed on refused
	// the tenure, and it waits, backing off, for the next try or a wake
	// (a node joining sends one). Its state's Unplaceable and LastError
	// say since when and why.
	StatusUnplaceable SeatStatus = "unplaceable"
	// StatusAbsent is how a seat whose workflow does not run is shown; no
	// workflow reports it.
	StatusAbsent SeatStatus = "absent"
)

// HostLostRequest is the payload of the host_lost signal: the node
// incarnation that is gone, and who says so. A seat hosted elsewhere
// ignores it.
type HostLostRequest struct {
	Node string `json:"node"`
	By   string `json:"by"`
}

// PauseRequest is the payload of the pause signal.
type PauseRequest struct {
	StopTurn bool   `json:"stop_turn"`
	Reason   string `json:"reason"`
	By       string `json:"by"`
}

// ResumeRequest is the payload of the resume signal.
type ResumeRequest struct {
	By string `json:"by"`
}

// DrainRequest is the payload of the drain signal.
type DrainRequest struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
}

// MoveRequest is the payload of the move signal: release the seat
// voluntarily and establish it on another node than ExcludeNode.
type MoveRequest struct {
	ExcludeNode string `json:"exclude_node"`
	Reason      string `json:"reason"`
	By          string `json:"by"`
}

// StopRequest is the payload of the stop signal: the seat left the org.
type StopRequest struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
}

// PauseHold records who paused a seat, when and why.
type PauseHold struct {
	By       string    `json:"by"`
	Reason   string    `json:"reason"`
	StopTurn bool      `json:"stop_turn"`
	Since    time.Time `json:"since"`
}

// DrainHold records who asked a seat to drain, when and why.
type DrainHold struct {
	By     string    `json:"by"`
	Reason string    `json:"reason"`
	Since  time.Time `json:"since"`
}

// UnplaceableHold is a seat's run of failed establish attempts: since
// when no node took it, how many attempts failed, how many back-off waits
// it has taken (each twice the last, up to a minute), and when it tries
// again at the latest. The reason is the seat's LastError.
type UnplaceableHold struct {
	Since    time.Time `json:"since"`
	Attempts int       `json:"attempts"`
	Waits    int       `json:"waits"`
	Retry    time.Time `json:"retry,omitempty"`
}

// CurrentTurn describes the turn a seat is running.
type CurrentTurn struct {
	ID        string    `json:"id"`
	WorkKey   string    `json:"work_key"`
	Triggers  int       `json:"triggers"`
	StartedAt time.Time `json:"started_at"`
	// OnBusy is what the seat does with mail that arrives while this turn
	// runs (the role's on_busy when it started); "" is enqueue.
	OnBusy string `json:"on_busy,omitempty"`
	// Interrupts counts the turns over these triggers that new mail
	// interrupted before this one; InterruptSent is set once this one was
	// asked to stop for new mail.
	Interrupts    int  `json:"interrupts,omitempty"`
	InterruptSent bool `json:"interrupt_sent,omitempty"`
	// Progress is the turn's own answer to its state query; the seat does
	// not track rounds, so it is filled in by whoever asks (GET /seats/{h}).
	Progress *TurnProgress `json:"progress,omitempty"`
}

// TurnProgress is the answer of a Turn workflow's state query.
type TurnProgress struct {
	// Thread is the trigger being answered (0-based) of Threads.
	Thread  int `json:"thread"`
	Threads int `json:"threads"`
	// Round is the round in flight in that thread; Rounds counts the
	// turn's model calls so far, against MaxRounds.
	Round     int `json:"round"`
	Rounds    int `json:"rounds"`
	MaxRounds int `json:"max_rounds"`
	// StopRequested names who asked the turn to stop, once someone did.
	StopRequested string `json:"stop_requested,omitempty"`
	// InterruptRequested is set once new mail asked the turn to stop at
	// its next round boundary (on_busy: interrupt).
	InterruptRequested bool `json:"interrupt_requested,omitempty"`
	// Waiting is the ticket the turn waits on, while it waits.
	Waiting *TicketWaiting `json:"waiting,omitempty"`
	// Approval is the approval the turn waits on, while it waits.
	Approval *ApprovalWaiting `json:"approval,omitempty"`
	// Profile is the profile the turn runs on.
	Profile string `json:"profile,omitempty"`
	// Held says which profiles of its pool the turn waits for, and until
	// when, while none can take it.
	Held *ProfileHold `json:"held,omitempty"`
}

// TicketWaiting is a turn's wait on a ticket, as its state query tells it.
type TicketWaiting struct {
	Ticket string    `json:"ticket"`
	Kind   string    `json:"kind"`
	Since  time.Time `json:"since"`
	Until  time.Time `json:"until"`
}

// SeatCounters are running totals carried across continue-as-new.
type SeatCounters struct {
	Turns         int64 `json:"turns"`
	Triggers      int64 `json:"triggers"`
	Skipped       int64 `json:"skipped"`
	Failures      int64 `json:"failures"`
	Establishes   int64 `json:"establishes"`
	ContinuedRuns int64 `json:"continued_runs"`
	// BusyRejected counts triggers answered "busy" (on_busy: reject);
	// Interrupted counts turns new mail interrupted (on_busy: interrupt).
	BusyRejected int64 `json:"busy_rejected,omitempty"`
	Interrupted  int64 `json:"interrupted,omitempty"`
}

// SeatState is the answer to the state query.
type SeatState struct {
	Handle    string       `json:"handle"`
	Role      string       `json:"role"`
	Status    SeatStatus   `json:"status"`
	Epoch     int64        `json:"epoch"`
	Node      string       `json:"node"`
	HostQueue string       `json:"host_queue,omitempty"`
	Pause     *PauseHold   `json:"pause,omitempty"`
	Drain     *DrainHold   `json:"drain,omitempty"`
	Turn      *CurrentTurn `json:"turn,omitempty"`
	// Budget is the token cap that holds the seat's turns until its window
	// turns; nil when none does.
	Budget *BudgetHold `json:"budget_hold,omitempty"`
	// Unplaceable is set from an establish attempt that failed until one
	// succeeds: no node took the seat (status unplaceable while it backs
	// off). It is carried across continue-as-new, so the back-off goes on
	// where it was.
	Unplaceable *UnplaceableHold `json:"unplaceable,omitempty"`
	// QueuedMail is the number of entries the last mailbox read left unread;
	// an estimate, refreshed on every read.
	QueuedMail int64  `json:"queued_mail"`
	LastError  string `json:"last_error,omitempty"`
	// FailedTurn is the turn whose failure LastError reports: a turn
	// recorded failed and acked. It is kept until a turn succeeds.
	FailedTurn string       `json:"failed_turn,omitempty"`
	Counters   SeatCounters `json:"counters"`
}
