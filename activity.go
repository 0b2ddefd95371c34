package crewlet

import "time"

// PlaceSeatInput asks for a node to establish a seat on.
type PlaceSeatInput struct {
	Handle string `json:"handle"`
	// Exclude lists node incarnations not to choose (just lost, or being left).
	Exclude []string `json:"exclude,omitempty"`
}

// PlaceSeatOutput is the chosen node, already reserved for the seat. When
// that node is the one that ran the placement, it attached the seat there
// and then: Attached is the new tenure, or AttachError why it could not
// start one; the seat runs no Attach activity on the host queue.
type PlaceSeatOutput struct {
	Node        string        `json:"node"`
	HostQueue   string        `json:"host_queue"`
	Attached    *AttachOutput `json:"attached,omitempty"`
	AttachError string        `json:"attach_error,omitempty"`
}

// HoldInput keeps a tenure: the activity heartbeats on the host for as long
// as the node hosts the seat at that epoch, so a lost host shows up as a
// heartbeat timeout within seconds, even for an idle seat.
type HoldInput struct {
	Tenure
}

// DetachInput ends a tenure voluntarily on its host.
type DetachInput struct {
	Tenure
	Reason string `json:"reason"`
}

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
	Tenure
	Status string `json:"status"`
}

// ReadMailInput asks for the next entries of a seat's mailbox.
type ReadMailInput struct {
	Tenure
	Consumer string `json:"consumer"`
	Max      int    `json:"max"`
	// ClearAwake lowers the seat's awake flag when the mailbox is empty, so the
	// next publish signals wake; set it when the seat will sleep on an empty read.
	ClearAwake bool `json:"clear_awake"`
	// NewOnly reads only entries never delivered: a read while a turn runs
	// must not take back that turn's own pending triggers.
	NewOnly bool `json:"new_only,omitempty"`
	// LastError is the seat's last error, recorded as the reason of an entry
	// dead-lettered by this read.
	LastError string `json:"last_error,omitempty"`
	// Prepare asks the read to prepare the turn of what it read too
	// (PrepareTurn, in the same step), answered in Prepared: one local
	// activity where a seat below node-liveness 6 ran two.
	Prepare bool `json:"prepare,omitempty"`
}

// ReadMailOutput lists the entries read, by reference only.
type ReadMailOutput struct {
	Mail []MailRef `json:"mail"`
	Lag  int64     `json:"lag"`
	// Prepared is PrepareTurn's answer for Mail, when the input asked for
	// it and the read found mail.
	Prepared *PrepareTurnOutput `json:"prepared,omitempty"`
}

// PrepareTurnInput asks which of the entries read still need a turn.
type PrepareTurnInput struct {
	Tenure
	Mail []MailRef `json:"mail"`
}

// PrepareTurnOutput splits the entries: Run still need a turn; Skipped are
// finished already (the completion ledger holds them) or gone, and are only
// acked.
type PrepareTurnOutput struct {
	Run     []MailRef `json:"run"`
	Skipped []MailRef `json:"skipped"`
	// OnBusy is the seat's role's on_busy as the turn starts: what the seat
	// does with mail that arrives while the turn runs. "" is enqueue.
	OnBusy string `json:"on_busy,omitempty"`
}

// MaintenanceOutput is what one maintenance pass did.
type MaintenanceOutput struct {
	MailboxesAbsent   []string `json:"mailboxes_absent,omitempty"`
	MailboxesReturned []string `json:"mailboxes_returned,omitempty"`
	MailboxesRetired  []string `json:"mailboxes_retired,omitempty"`
	// SweepWaitsFor is the live nodes whose org file names other seats: the
	// sweep waited for them to agree, stamping and retiring nothing.
	SweepWaitsFor []string `json:"sweep_waits_for,omitempty"`
	LedgerTrimmed int64    `json:"ledger_trimmed"`
	// ScheduleFiresTrimmed is the org schedules' recorded fires that aged
	// out with the ledger.
	ScheduleFiresTrimmed int64 `json:"schedule_fires_trimmed"`
	EntriesTrimmed       int64 `json:"entries_trimmed"`
	TurnsTrimmed         int64 `json:"turns_trimmed"`
	TicketsExpired       int   `json:"tickets_expired"`
	AuditTrimmed         int64 `json:"audit_trimmed"`
	// EvalUsageTrimmed are replays' charges older than any eval budget
	// window.
	EvalUsageTrimmed int64 `json:"eval_usage_trimmed"`
	// EvalRunsTrimmed are eval runs, with their results, finished longer
	// ago than evals.retention.
	EvalRunsTrimmed int64 `json:"eval_runs_trimmed"`
	// Rows deleted by the retention of each other kind of record.
	MessagesTrimmed       int64 `json:"messages_trimmed"`
	ConversationsTrimmed  int64 `json:"conversations_trimmed"`
	SummariesTrimmed      int64 `json:"summaries_trimmed"`
	EventsTrimmed         int64 `json:"events_trimmed"`
	DiaryTrimmed          int64 `json:"diary_trimmed"`
	EpisodesTrimmed       int64 `json:"episodes_trimmed"`
	CounterpartiesTrimmed int64 `json:"counterparties_trimmed"`
	NodesTrimmed          int64 `json:"nodes_trimmed"`
	// Entries of human seats' mailboxes past mailbox.human_keep, and dead
	// letters past mailbox.dead_letter_keep, moved from Redis to Postgres.
	HumanEntriesArchived int64 `json:"human_entries_archived"`
	DeadLettersArchived  int64 `json:"dead_letters_archived"`
	// RetiredUnread are the unhandled entries of retired mailboxes, moved
	// to the dead letters before the mailboxes went.
	RetiredUnread int64 `json:"retired_unread"`

	// HealthTransitionsTrimmed are seat health transitions past
	// maintenance.event_retention.
	HealthTransitionsTrimmed int64 `json:"health_transitions_trimmed"`
	// Settled tickets, decided approvals and a person's read mail past
	// their retention, and diary entries past a seat's
	// maintenance.diary_max_per_seat.
	TicketsTrimmed      int64 `json:"tickets_trimmed"`
	ApprovalsTrimmed    int64 `json:"approvals_trimmed"`
	PersonMailTrimmed   int64 `json:"person_mail_trimmed"`
	DiaryOverCapTrimmed int64 `json:"diary_over_cap_trimmed"`
}

// ReconcileReport is what one pass of the reconcile duty did, by seat
// handle.
type ReconcileReport struct {
	// RowsCreated and MailboxesCreated are the seats whose Postgres row or
	// mailbox (registry entry or Redis stream) the pass had to create.
	RowsCreated      []string `json:"rows_created,omitempty"`
	MailboxesCreated []string `json:"mailboxes_created,omitempty"`
	// Started is the agent seats that had no running workflow.
	Started []string `json:"started,omitempty"`
	// Stopped is the seats the org lacks whose workflows were told to stop.
	Stopped []string `json:"stopped,omitempty"`
	// Repaired is the seats whose workflow ran on another task queue, proven
	// this deployment's, and was restarted on ours.
	Repaired []string `json:"repaired,omitempty"`
	// Deferred is what the pass left for a later one, each with why.
	Deferred []ReconcileDeferral `json:"deferred,omitempty"`
	// Nudged is the seats sent an idle nudge.
	Nudged []string `json:"nudged,omitempty"`
	// Reaped is the spawned seats reaped before the pass, idle with
	// nothing open; the pass, or the next, stops their workflows.
	Reaped []string `json:"reaped,omitempty"`
}

// ReconcileDeferral is one thing a reconcile pass did not do, and why.
type ReconcileDeferral struct {
	// Seats are the handles concerned; empty when it is the whole step.
	Seats  []string `json:"seats,omitempty"`
	Action string   `json:"action"`
	Reason string   `json:"reason"`
	// WaitFor is the live incarnations the pass waits for, when that is
	// the reason.
	WaitFor []string `json:"wait_for,omitempty"`
}

// Empty reports whether the pass changed and deferred nothing.
func (r ReconcileReport) Empty() bool {
	return len(r.RowsCreated)+len(r.MailboxesCreated)+len(r.Started)+len(r.Stopped)+len(r.Repaired)+
		len(r.Deferred)+len(r.Nudged) == 0
}

// AckMailInput marks entries handled, fenced by epoch.
type AckMailInput struct {
	Tenure
	StreamIDs []string `json:"stream_ids"`
}

// SeatMove is one seat a rebalance pass asked to move.
type SeatMove struct {
	Handle string `json:"handle"`
	From   string `json:"from"`
}

// RebalanceOutput is what one rebalance pass did and found.
type RebalanceOutput struct {
	Moves       []SeatMove `json:"moves"`
	Unplaceable []string   `json:"unplaceable,omitempty"`
}
