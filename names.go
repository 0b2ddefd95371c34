package crewlet

// The names Temporal records. Every workflow type, activity, signal, query,
// search attribute and application error type crewlet uses is named here
// and nowhere else, as <Kind><Name>: WorkflowSeat, ActivityReadMail,
// SignalWake, QueryState, SAStatus, ErrorTypeFenced. The string values are
// in the histories of running seats, in operators' `temporal` commands and
// in the replay corpus (workflows/testdata): renaming an identifier is
// free, changing a value is not.

// Workflow types.
const (
	// WorkflowSeat is the seat: one long-running workflow per seat.
	WorkflowSeat = "Seat"
	// WorkflowTurn is one turn, a child of its seat
	// (docs/architecture.md, "A turn").
	WorkflowTurn = "Turn"
	// WorkflowPersonNotes writes a person's ticket notes
	// (docs/architecture.md, "Delegation: tickets"): the changes of the
	// tickets a person opened that come together are written as one note in
	// their inbox, by one workflow per person.
	WorkflowPersonNotes = "PersonNotes"
	// WorkflowRebalance is one pass of the rebalance duty.
	WorkflowRebalance = "Rebalance"
	// WorkflowMaintenance is one pass of the maintenance duty.
	WorkflowMaintenance = "Maintenance"
	// WorkflowHealth is one pass of the health duty.
	WorkflowHealth = "Health"
	// WorkflowReconcile is one pass of the reconcile duty.
	WorkflowReconcile = "Reconcile"
	// WorkflowScheduleFire is one fire of an org schedule
	// (docs/architecture.md, "Schedules"): it delivers the schedule's
	// message and stays open until the message is answered.
	WorkflowScheduleFire = "ScheduleFire"
	// WorkflowRemoteTicket serves one ticket to a remote A2A agent
	// (a2a:NAME; docs/operations.md, "Delegate to a remote agent"): it
	// sends the task, waits durably for the remote task's end, relays its
	// questions to the delegator and its answers back, and settles the
	// ticket once.
	WorkflowRemoteTicket = "RemoteTicket"
	// WorkflowEvalRun replays every turn of an eval dataset with one
	// change, a bounded number at once, and scores each replay
	// (docs/architecture.md, "Replay").
	WorkflowEvalRun = "EvalRun"
	// WorkflowReplayTurn runs one replay that may call read-only MCP tools
	// for real (live_read_only) on a worker node, where MCP servers may
	// run (docs/architecture.md, "Replay").
	WorkflowReplayTurn = "ReplayTurn"
)

// Activity names. Workflows refer to activities by these names so that the
// workflows package never imports the activities package.
const (
	// On the shared task queue (most as local activities).
	ActivityPlaceSeat     = "PlaceSeat"
	ActivitySetSeatStatus = "SetSeatStatus"
	ActivityReadMail      = "ReadMail"
	ActivityAckMail       = "AckMail"
	ActivityRebalance     = "Rebalance"
	ActivityPrepareTurn   = "PrepareTurn"
	ActivityMaintenance   = "Maintenance"
	ActivityHealth        = "Health"
	ActivityReconcile     = "Reconcile"
	// On the host queue of the node that hosts the seat.
	ActivityAttach = "Attach"
	ActivityHold   = "Hold"
	ActivityDetach = "Detach"

	// Activities of a turn. BeginTurn and FinishTurn are short
	// Postgres/Redis steps run as local activities; ModelRound runs on any
	// node; ToolCall runs on the seat's host queue, where its MCP children
	// live.
	ActivityBeginTurn  = "BeginTurn"
	ActivityModelRound = "ModelRound"
	ActivityToolCall   = "ToolCall"
	ActivityFinishTurn = "FinishTurn"
	// ActivityResolveWait ends a wait on a ticket and records the waiting
	// tool call's result; a local activity of the turn.
	ActivityResolveWait = "ResolveWait"
	// ActivityBusyMail applies the seat's busy policy to mail read while a
	// turn runs; ActivityInterruptTurn records a turn's interruption. Both
	// are local activities.
	ActivityBusyMail      = "BusyMail"
	ActivityInterruptTurn = "InterruptTurn"
	// ActivityEndApproval ends a wait on an approval whose time ran
	// out or whose turn was stopped, deciding it; a local activity of the
	// turn.
	ActivityEndApproval = "EndApproval"
	// ActivityReflect asks the model, once a turn answered and before it
	// finishes, what to keep in the seat's diary; on any node, like a model
	// round.
	ActivityReflect = "Reflect"
	// ActivityDeadLetterMail moves triggers that can never succeed to the
	// dead letters at once; a local activity of the seat.
	ActivityDeadLetterMail = "DeadLetterMail"
	// ActivityCheckBudget asks, for a seat whose turns a budget cap holds,
	// whether it still does; a local activity of the seat.
	ActivityCheckBudget = "CheckBudget"
	// ActivityAcquireProfile picks the profile a turn runs on and takes a
	// slot of it, or says why none can take the turn; a local activity of
	// the turn.
	ActivityAcquireProfile = "AcquireProfile"
	// ActivityReleaseProfile gives back a turn's profile slot and wakes a
	// turn waiting for one; a local activity of the turn.
	ActivityReleaseProfile = "ReleaseProfile"

	// ActivityTicketNote writes one note; a local activity of PersonNotes.
	ActivityTicketNote = "TicketNote"

	// ActivityDeliverFire delivers a schedule fire's message, once per
	// fire time; ActivityAwaitFire waits, bounded, for its answer. Both of
	// ScheduleFire, on the shared queue.
	ActivityDeliverFire = "DeliverFire"
	ActivityAwaitFire   = "AwaitFire"

	// The steps of RemoteTicket, on the shared queue: send a message on
	// the remote task, wait (bounded) for it to move, put its question to
	// the delegator and read the answer, end the ticket as the remote task
	// ended, and cancel the remote task of a ticket that ended here.
	ActivityRemoteSend   = "RemoteSend"
	ActivityRemoteAwait  = "RemoteAwait"
	ActivityRemoteAsk    = "RemoteAsk"
	ActivityRemoteEnd    = "RemoteEnd"
	ActivityRemoteCancel = "RemoteCancel"

	// The steps of EvalRun, on the shared queue: read the turns still to
	// replay, replay and score one turn, end the run.
	ActivityEvalPlan   = "EvalPlan"
	ActivityEvalTurn   = "EvalTurn"
	ActivityEvalFinish = "EvalFinish"
	// ReplayTurn's one step, on the shared queue: the replay.
	ActivityReplayTurn = "ReplayTurn"
)

// Signal and query names. Operators use the seat's directly with
// `temporal workflow signal|query`, so they are part of the interface.
const (
	// Signals to a seat; the payload of each is its Request type (seat.go).
	SignalWake   = "wake"
	SignalPause  = "pause"
	SignalResume = "resume"
	SignalDrain  = "drain"
	SignalMove   = "move"
	SignalStop   = "stop"
	// SignalHostLost tells a seat the node hosting it is gone (the failure
	// detector claimed it, or the node fenced itself): it re-establishes
	// elsewhere. Its payload is a HostLostRequest.
	SignalHostLost = "host_lost"
	// SignalHandOver asks a seat run to continue as new at the top of its
	// loop, between turns, so its next run starts on the deployment's
	// current build and runs turns inline. The current build's nodes send
	// it to seat runs on other builds and to runs of the child-turn shape
	// (docs/versioning.md, "Which build each seat runs"). It carries
	// nothing; anyone may send it, and it costs one continue-as-new.
	SignalHandOver = "hand_over"

	// SignalStopTurn asks a running turn to stop at its next round
	// boundary; its payload is a StopTurnRequest.
	SignalStopTurn = "stop_turn"
	// SignalInterruptTurn asks a running turn to stop at its next round
	// boundary because mail arrived in a conversation it answers (the
	// role's on_busy is interrupt); its payload is an InterruptTurnRequest.
	SignalInterruptTurn = "interrupt_turn"
	// SignalProfileFree tells a turn held for want of a profile that one of
	// its pool may have freed (a slot given back, a model switched on): it
	// tries again. It carries nothing.
	SignalProfileFree = "profile_free"
	// SignalTicket tells a turn waiting on a ticket that the ticket changed
	// (settled, failed, asked, answered); its payload is a TicketSignal. A
	// signal about another ticket, or after the wait ended, changes
	// nothing.
	SignalTicket = "ticket"
	// SignalApproval tells a turn waiting on an approval that it was
	// decided; its payload is an ApprovalSignal. A signal about another
	// approval, or after the wait ended, changes nothing.
	SignalApproval = "approval"

	// SignalTicketNote tells a person's notes that a ticket changed, or
	// that an approval asks for them; its payload is a TicketNoteSignal,
	// the ticket's or the approval's id.
	SignalTicketNote = "ticket_note"

	// UpdateNudgeTurn tells the turn a seat runs inline that a ticket or
	// an approval it may wait on changed, or that a profile of its pool
	// may have freed. An update, not a signal: the seat refuses it when
	// the turn named is not the one it runs, so the sender learns the turn
	// is gone (as a signal to a Turn child workflow that ended fails) and
	// tells another way. Its payload is a TurnNudge.
	UpdateNudgeTurn = "nudge_turn"

	// QueryState is answered by a seat (SeatState) and by a turn
	// (TurnProgress).
	QueryState = "state"
)

// turnMailKey is the type of TurnMailKey.
type turnMailKey struct{}

// TurnMailKey marks the workflow context of a seat's inline turn with the
// turn's mail ([]MailRef), so tracing can start the turn under the span of
// the message it answers.
var TurnMailKey = turnMailKey{}

// Search attributes the seat workflow upserts on every change. They must be
// registered on the Temporal namespace (temporal-config/search-attributes.txt).
const (
	SAHandle = "CrewletHandle"
	SARole   = "CrewletRole"
	SAStatus = "CrewletStatus"
	SANode   = "CrewletNode"
	SAEpoch  = "CrewletEpoch"
	SAPaused = "CrewletPaused"
	// SATurn is the id of the turn the seat runs, SATurnSince when it
	// began; both unset between turns. SAWaiting says what that turn waits
	// on durably ("ticket T", "approval A", "profile"), unset otherwise.
	// Upserted by a seat that runs its turns inline, at a turn's start and
	// end and a wait's.
	SATurn      = "CrewletTurn"
	SATurnSince = "CrewletTurnSince"
	SAWaiting   = "CrewletWaiting"
)

// Temporal application error types of crewlet's activities. A domain error
// (*Error) crosses an activity boundary with its code (ECONFLICT...) as its
// type, and a provider's passing refusal with its kind (ProviderRateLimited,
// ProviderServerError); those codes and kinds are named in error.go and
// model.go.
const (
	// ErrorTypeFenced is an activity refused because the epoch it carried
	// is no longer the seat's, or because the node it reached does not
	// host the seat.
	ErrorTypeFenced = "seat_fenced"
	// ErrorTypeTurnGone is a nudge (UpdateNudgeTurn) refused because the
	// seat runs no such turn now: it ended, or it runs as a Turn child.
	ErrorTypeTurnGone = "turn_gone"
	// ErrorTypeUnplaceable is a placement that found no live node able to
	// run the seat.
	ErrorTypeUnplaceable = "seat_unplaceable"
	// ErrorTypeRefused is an Attach refused by a node that is draining or
	// full; the seat places itself elsewhere.
	ErrorTypeRefused = "seat_refused"
	// ErrorTypePanic marks an activity that panicked: the turn is recorded
	// as failed and its triggers acked, never replayed.
	ErrorTypePanic = "turn_panicked"
	// ErrorTypePermanent marks a turn that can never succeed for its
	// triggers (the provider refused the request itself as bad): the seat
	// dead-letters a trigger that fails so at once, with the reason.
	ErrorTypePermanent = "permanent"
	// ErrorTypeProvider marks a model call the provider refused for now
	// (auth): an operator's fix may let it through.
	ErrorTypeProvider = "provider_error"
	// ErrorTypeProfileUnavailable marks a model call whose profile can no
	// longer be used (its credential was quarantined or cooled off, its
	// model switched off): the turn fails over to another profile of its
	// pool, or waits for one.
	ErrorTypeProfileUnavailable = "profile_unavailable"
	// ErrorTypeNoRole is a turn step for a seat the org no longer gives an
	// agent role with a profile.
	ErrorTypeNoRole = "no_role"
	// ErrorTypeBadThread is a turn step that names a thread its turn does
	// not have.
	ErrorTypeBadThread = "bad_thread"
	// ErrorTypeInternal is an activity failure whose text stayed in the
	// worker's log (workers' public-errors interceptor): the error names
	// the log line by its error id.
	ErrorTypeInternal = "internal"
	// ErrorTypeRemoteRefused is a remote A2A agent that will not take the
	// ticket's task however often it is asked (its card has no JSON-RPC
	// interface, it refuses crewlet's token, no agents: entry names it);
	// ErrorTypeRemoteUnreachable one that could not be reached now, tried
	// again a bounded number of times. Their messages say which and what
	// to do, and end the ticket failed.
	ErrorTypeRemoteRefused     = "remote_refused"
	ErrorTypeRemoteUnreachable = "remote_unreachable"
)
