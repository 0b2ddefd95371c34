// The workflow changes guarded by workflow.GetVersion: every change id the
// workflows pass to GetVersion, what each of its versions changed, and when
// the branches kept for older runs may go. docs/versioning.md has the rule;
// `crewlet versions` counts the running runs on each version.

package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Change ids, as the workflows pass them to workflow.GetVersion and as
// Temporal records them in the TemporalChangeVersion search attribute
// ("node-liveness-2"). An id is never renamed or reused: recorded markers
// name it.
const (
	changeNodeLiveness    = "node-liveness"
	changeNoteSignalCheck = "note-signal-check"
	changeBusyPolicy      = "busy-policy"
	changeTurnInterrupt   = "turn-interrupt"
	changeApprovals       = "approvals"
	changeOutageNotLoss   = "outage-not-host-loss"
	changeUnplaceable     = "unplaceable-backoff"
)

// Newest versions, the maxSupported each GetVersion call passes.
const (
	// nodeLivenessVersion is the newest version of changeNodeLiveness.
	nodeLivenessVersion = mergedStepsVersion
	// startAttributesVersion is the version of changeNodeLiveness since
	// which a fresh seat run knows it starts with SeatSearchAttributes and
	// does not write them again. One change id for both versions adds no
	// second marker, and no second TemporalChangeVersion write, to every
	// run.
	startAttributesVersion workflow.Version = 2
	// backstopTimerVersion is the version of changeNodeLiveness since
	// which an idle seat keeps one backstop timer across its sleeps
	// instead of starting one per sleep.
	backstopTimerVersion workflow.Version = 3
	// turnShowsRunningVersion is the version of changeNodeLiveness since
	// which a seat leaves "running" out of its CrewletStatus attribute:
	// its open Turn workflow shows it.
	turnShowsRunningVersion workflow.Version = 4
	// inlineTurnsVersion is the version of changeNodeLiveness since which
	// a seat runs its turns in its own workflow instead of a Turn child,
	// and continues as new only when Temporal suggests it.
	inlineTurnsVersion workflow.Version = 5
	// mergedStepsVersion is the version of changeNodeLiveness since which
	// a seat's reply takes four local activities instead of eight: the
	// read prepares the turn, the turn's begin takes its profile slot, and
	// its finish gives the slot back and acks the mail.
	mergedStepsVersion workflow.Version = 6
	// noteSignalCheckVersion is the newest version of changeNoteSignalCheck.
	noteSignalCheckVersion workflow.Version = 1
	// busyPolicyVersion is the newest version of changeBusyPolicy.
	busyPolicyVersion workflow.Version = 1
	// turnInterruptVersion is the newest version of changeTurnInterrupt.
	turnInterruptVersion workflow.Version = 1
	// approvalsVersion is the newest version of changeApprovals.
	approvalsVersion workflow.Version = 1
	// outageNotLossVersion is the newest version of changeOutageNotLoss.
	outageNotLossVersion workflow.Version = 1
	// unplaceableVersion is the newest version of changeUnplaceable.
	unplaceableVersion workflow.Version = 1
)

// ChildTurnShapeVersions are the TemporalChangeVersion values a seat run of
// the child-turn shape records, "node-liveness-1" to "node-liveness-4", to
// find such runs in visibility. A run from before node-liveness records
// none of them. COMPAT(node-liveness@5)
func ChildTurnShapeVersions() []string {
	var out []string
	for v := workflow.Version(1); v < inlineTurnsVersion; v++ {
		out = append(out, fmt.Sprintf("%s-%d", changeNodeLiveness, v))
	}
	return out
}

// Change is one workflow change guarded by workflow.GetVersion.
type Change struct {
	// ID is the change id passed to GetVersion.
	ID string
	// WorkflowType is the registered type whose runs record the change.
	WorkflowType string
	// Newest is the version a new run records.
	Newest workflow.Version
	// Versions says what each version changed, from 1 up to Newest; a run
	// with no marker for the id is at workflow.DefaultVersion (-1), the
	// code from before the change.
	Versions []string
	// Unmarked says which running runs have no marker although they are
	// not old: those that never reach the GetVersion call.
	Unmarked string
	// Oldest is the lowest version whose branch the code still keeps. A
	// branch for a lower version may be deleted once `crewlet versions`
	// counts no running run below it; the COMPAT(id@N) markers show that
	// code, and GetVersion's minSupported then rises to N.
	Oldest workflow.Version
}

// Changes lists every change id in use, oldest first. A new GetVersion call
// adds its id here, with what its version does (docs/versioning.md).
var Changes = []Change{
	{
		ID:           changeNodeLiveness,
		WorkflowType: crewlet.WorkflowSeat,
		Newest:       nodeLivenessVersion,
		Versions: []string{
			1: "the host's liveness is the node's: no Hold activity holds the tenure, the failure detector's host_lost signal and host-queue timeouts end it, and an idle seat waits the input's backstop (1h) instead of 5 minutes",
			2: "a fresh run knows it starts with SeatSearchAttributes and does not upsert them again: one visibility write fewer per seat established",
			3: "an idle seat keeps one backstop timer across its sleeps, started by the first sleep after the last one fired; before it, every sleep started a timer of its own (never cancelled), one timer write per turn and a workflow task an hour later",
			4: "a seat's CrewletStatus stays idle while a turn runs (seatclient.Statuses shows a seat with an open Turn workflow as running): no UpsertWorkflowSearchAttributes before and after every turn, two visibility writes fewer per turn; before it, the seat upserted running and idle around each turn",
			5: "a seat runs each turn in its own workflow (model rounds and tool calls as its activities, stop and interrupt at the round boundary through channels, tickets, approvals and profile nudges through the seat's nudge_turn update, refused for a turn it does not run), upserts CrewletTurn/CrewletTurnSince at a turn's start and end and CrewletWaiting around a durable wait, and continues as new only when Temporal suggests it; before it, a seat started a Turn child workflow per turn and continued as new every 200 loop cycles too",
			6: "a reply's Postgres and Redis steps are four local activities instead of eight: ReadMail prepares the turn of the mail it read (PrepareTurn's answer in its output), BeginTurn takes the turn's profile slot (AcquireProfile's), FinishTurn gives the slot back and acks the seat's entries (ReleaseProfile's and AckMail's; the seat acks itself only when that ack failed); before it, each was a local activity of its own",
		},
		Oldest: workflow.DefaultVersion,
	},
	{
		ID:           changeNoteSignalCheck,
		WorkflowType: crewlet.WorkflowPersonNotes,
		Newest:       noteSignalCheckVersion,
		Versions: []string{
			1: "a ticket_note payload is received raw and checked (TicketNoteSignal: a ticket id of the door's charset and bound); one that fails is dropped and logged. Before it, any string was kept and noted (an unknown id held the notes, retrying forever) and a payload that was not a string held the waiting change until the next good one",
		},
		Oldest: workflow.DefaultVersion,
	},
	{
		ID:           changeBusyPolicy,
		WorkflowType: crewlet.WorkflowSeat,
		Newest:       busyPolicyVersion,
		Versions: []string{
			1: "a seat whose role's on_busy is reject or interrupt reads mail that arrives while a turn runs (ReadMail new_only, BusyMail, AckMail of the triggers answered busy, an interrupt_turn signal to the turn); before it, such mail waited for the next turn",
		},
		Unmarked: "seats whose role enqueues (the default), and turns no new mail interrupted: neither reaches the GetVersion call",
		Oldest:   workflow.DefaultVersion,
	},
	{
		ID:           changeTurnInterrupt,
		WorkflowType: crewlet.WorkflowTurn,
		Newest:       turnInterruptVersion,
		Versions: []string{
			1: "a turn sent interrupt_turn stops at its next round boundary: InterruptTurn records the new mail in the interrupted thread and the turn ends interrupted, unanswered and unacked; before it, the signal was ignored",
		},
		Unmarked: "turns no interrupt_turn signal reached",
		Oldest:   workflow.DefaultVersion,
	},
	{
		ID:           changeApprovals,
		WorkflowType: crewlet.WorkflowTurn,
		Newest:       approvalsVersion,
		Versions: []string{
			1: "a tool call that answers with an approval (an approval policy gates it) waits durably for the decision, a timer and the approval signal, EndApproval on a timeout or a stop, then is asked again; before it, the turn went on past such a call",
		},
		Unmarked: "turns that never made a call an approval policy gates, which reach no GetVersion",
		Oldest:   workflow.DefaultVersion,
	},
	{
		ID:           changeOutageNotLoss,
		WorkflowType: crewlet.WorkflowSeat,
		Newest:       outageNotLossVersion,
		Versions: []string{
			1: "only a schedule-to-start or heartbeat timeout (the host's queue went unanswered) ends the tenure as a lost host; a local activity or a turn that timed out otherwise (Postgres down for every node) is a failure the seat retries on the same tenure. Before it, every timeout ended the tenure, so a brief Postgres outage detached every seat",
		},
		Unmarked: "seats that never saw a timeout other than the host's, which reach no GetVersion",
		Oldest:   workflow.DefaultVersion,
	},
	{
		ID:           changeUnplaceable,
		WorkflowType: crewlet.WorkflowSeat,
		Newest:       unplaceableVersion,
		Versions: []string{
			1: "an establish attempt that fails (the placement refused, or the node placed on refused the tenure or did not answer) backs off: after one retry at once on another node, it waits 1 s, 2 s, 4 s ... up to a minute between attempts (one placement and one timer per wait), shows status unplaceable while it waits, and a wake ends the wait. Before it, a placement refused with nodes excluded and an attach refused were retried at once, so a seat no node's org has looped place, refused, unplaceable with no wait; a placement refused otherwise waited at most 5 s",
		},
		Unmarked: "seats whose establish never failed, which reach no GetVersion",
		Oldest:   workflow.DefaultVersion,
	},
}

// Shim is code kept for runs begun before a change that needed no
// GetVersion, because the workflow's commands stayed the same and only an
// activity adapts. Such runs carry no marker; they are told by their start
// time.
type Shim struct {
	// ID names the shim in its COMPAT(id) markers.
	ID string
	// WorkflowType is the registered type whose old runs the shim serves.
	WorkflowType string
	// StartedBefore is when the change landed: the shim serves runs that
	// started before it, and may be deleted once none of them is running.
	StartedBefore time.Time
	// What says what changed.
	What string
}

// Shims lists every shim that has no change id.
var Shims = []Shim{
	{
		ID:            "begin-turn-triggers",
		WorkflowType:  crewlet.WorkflowTurn,
		StartedBefore: time.Date(2026, 12, 1, 3, 9, 33, 0, time.UTC),
		What:          "BeginTurn records the turn's triggers in the transcript; a model round of a turn begun before records its trigger itself",
	},
}

// Changes made without a version, and why none was needed, are listed in
// docs/versioning.md ("Changes that needed no version").
