// Package workers is the one list of crewlet's workflows and activities and
// the worker node that runs them: presence, host queue, drain, watchdog.
package workers

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/activities"
	"github.com/crewlet/crewlet/workflows"
)

// Deps are the activity groups a node registers.
type Deps struct {
	Seats       *activities.Seats
	Mail        *activities.Mail
	Rebalance   *activities.Rebalance
	Maintenance *activities.Maintenance
	Health      *activities.Health
	Reconcile   *activities.Reconcile
	Host        *activities.Host
	Turns       *activities.Turns
	Schedules   *activities.Schedules
	Remote      *activities.Remote
	Evals       *activities.Evals
}

// RegisterShared registers what runs on the shared task queue: the workflows
// and the activities that need no particular node.
func RegisterShared(r worker.Registry, d Deps) {
	RegisterWorkflows(r)
	register(r, map[string]any{
		crewlet.ActivityPlaceSeat:      d.Seats.PlaceSeat,
		crewlet.ActivitySetSeatStatus:  d.Seats.SetSeatStatus,
		crewlet.ActivityReadMail:       d.Mail.ReadMail,
		crewlet.ActivityPrepareTurn:    d.Mail.PrepareTurn,
		crewlet.ActivityMaintenance:    d.Maintenance.Maintenance,
		crewlet.ActivityHealth:         d.Health.Health,
		crewlet.ActivityReconcile:      d.Reconcile.Reconcile,
		crewlet.ActivityAckMail:        d.Mail.AckMail,
		crewlet.ActivityDeadLetterMail: d.Mail.DeadLetterMail,
		crewlet.ActivityRebalance:      d.Rebalance.Rebalance,
		crewlet.ActivityBeginTurn:      d.Turns.BeginTurn,
		crewlet.ActivityModelRound:     d.Turns.ModelRound,
		crewlet.ActivityFinishTurn:     d.Turns.FinishTurn,
		crewlet.ActivityReflect:        d.Turns.Reflect,
		crewlet.ActivityResolveWait:    d.Turns.ResolveWait,
		crewlet.ActivityBusyMail:       d.Turns.BusyMail,
		crewlet.ActivityInterruptTurn:  d.Turns.InterruptTurn,
		crewlet.ActivityEndApproval:    d.Turns.EndApproval,
		crewlet.ActivityTicketNote:     d.Mail.TicketNote,
		crewlet.ActivityCheckBudget:    d.Turns.CheckBudget,
		crewlet.ActivityAcquireProfile: d.Turns.AcquireProfile,
		crewlet.ActivityReleaseProfile: d.Turns.ReleaseProfile,
		crewlet.ActivityDeliverFire:    d.Schedules.DeliverFire,
		crewlet.ActivityAwaitFire:      d.Schedules.AwaitFire,
		crewlet.ActivityRemoteSend:     d.Remote.RemoteSend,
		crewlet.ActivityRemoteAwait:    d.Remote.RemoteAwait,
		crewlet.ActivityRemoteAsk:      d.Remote.RemoteAsk,
		crewlet.ActivityRemoteEnd:      d.Remote.RemoteEnd,
		crewlet.ActivityRemoteCancel:   d.Remote.RemoteCancel,
		crewlet.ActivityEvalPlan:       d.Evals.EvalPlan,
		crewlet.ActivityEvalTurn:       d.Evals.EvalTurn,
		crewlet.ActivityEvalFinish:     d.Evals.EvalFinish,
		crewlet.ActivityReplayTurn:     d.Evals.ReplayTurn,
	})
}

// RegisterWorkflows registers every workflow under its type name and
// versioning behaviour (docs/versioning.md, "Worker builds"). The replay
// tests register through it too (a worker.WorkflowReplayer is a registry
// of workflows), so they replay against what the workers run.
//
// A seat run stays on the build that ran its first workflow task (pinned),
// its inline turns and durable waits included, and hands the seat to a
// run on the current build at continue-as-new (workflows.Seat, handsOver):
// its commands never meet code they were not recorded by, so a change to
// them needs no version; what one run carries to the next does. A Turn
// child of the old shape is pinned the same way. Every other workflow
// moves to the deployment's current build at its next workflow task
// (auto-upgrade), so a change to its commands needs a GetVersion guard. A
// person's notes run as long as a seat does, and a ticket to a remote
// agent as long as its remote task, an eval run as long as its replays; the duties, schedule fires and live replays are
// short and start on the current build like everything else.
func RegisterWorkflows(r worker.WorkflowRegistry) {
	for _, w := range []struct {
		fn       any
		name     string
		behavior workflow.VersioningBehavior
	}{
		{workflows.Seat, crewlet.WorkflowSeat, workflow.VersioningBehaviorPinned},
		{workflows.Rebalance, crewlet.WorkflowRebalance, workflow.VersioningBehaviorAutoUpgrade},
		{workflows.Maintenance, crewlet.WorkflowMaintenance, workflow.VersioningBehaviorAutoUpgrade},
		{workflows.Health, crewlet.WorkflowHealth, workflow.VersioningBehaviorAutoUpgrade},
		{workflows.Reconcile, crewlet.WorkflowReconcile, workflow.VersioningBehaviorAutoUpgrade},
		{workflows.Turn, crewlet.WorkflowTurn, workflow.VersioningBehaviorPinned},
		{workflows.PersonNotes, crewlet.WorkflowPersonNotes, workflow.VersioningBehaviorAutoUpgrade},
		{workflows.ScheduleFire, crewlet.WorkflowScheduleFire, workflow.VersioningBehaviorAutoUpgrade},
		{workflows.RemoteTicket, crewlet.WorkflowRemoteTicket, workflow.VersioningBehaviorAutoUpgrade},
		{workflows.EvalRun, crewlet.WorkflowEvalRun, workflow.VersioningBehaviorAutoUpgrade},
		{workflows.ReplayTurn, crewlet.WorkflowReplayTurn, workflow.VersioningBehaviorAutoUpgrade},
	} {
		r.RegisterWorkflowWithOptions(w.fn, workflow.RegisterOptions{Name: w.name, VersioningBehavior: w.behavior})
	}
}

// RegisterHost registers what runs on a node's own host queue: the tenure
// and everything that needs what the tenure started on the node.
func RegisterHost(r worker.Registry, d Deps) {
	register(r, map[string]any{
		crewlet.ActivityAttach:   d.Host.Attach,
		crewlet.ActivityHold:     d.Host.Hold, // COMPAT(node-liveness@1)
		crewlet.ActivityDetach:   d.Host.Detach,
		crewlet.ActivityToolCall: d.Turns.ToolCall,
	})
}

// register registers activities by name. One that acts for a seat must be
// in the fence's guards, fenced or said to be unfenced, or it panics.
func register(r worker.Registry, activities map[string]any) {
	for name, fn := range activities {
		checkGuarded(name, fn)
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}
