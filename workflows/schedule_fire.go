package workflows

import (
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// scheduledStartTime is the search attribute a Temporal Schedule sets on
// each workflow it starts: the fire time the action stands for, before
// jitter, the same on every retry and catch-up of that fire.
var scheduledStartTime = temporal.NewSearchAttributeKeyTime("TemporalScheduledStartTime")

// FireAwaitBound is the longest a fire waits for its message to be
// answered. While it waits, the schedule's overlap policy sees it running,
// so overlap skip holds the next fires back for at most this long.
const FireAwaitBound = time.Hour

// ScheduleFire is one fire of an org schedule
// (docs/architecture.md, "Schedules"): it delivers the schedule's message under an event id of
// (schedule, fire time), then waits until the seat's turn answered it, so
// that Temporal's overlap policy sees a fire running as long as its turn.
func ScheduleFire(ctx workflow.Context, in crewlet.ScheduleFireInput) (crewlet.ScheduleFireResult, error) {
	fireTime, err := fireTimeOf(ctx, in)
	if err != nil {
		return crewlet.ScheduleFireResult{}, err
	}
	out := crewlet.ScheduleFireResult{FireTime: fireTime}
	deliverCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		// A delivery that cannot reach Redis or Temporal now is tried again
		// for a while: the event id makes every try land once.
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 10, NonRetryableErrorTypes: []string{crewlet.ENOTFOUND, crewlet.EINVALID}},
	})
	var sent crewlet.DeliverFireOutput
	if err := workflow.ExecuteActivity(deliverCtx, crewlet.ActivityDeliverFire, crewlet.DeliverFireInput{Schedule: in.Schedule, FireTime: fireTime}).Get(ctx, &sent); err != nil {
		return out, err
	}
	out.Seat, out.EventID = sent.Seat, sent.EventID
	if !sent.Await {
		return out, nil
	}
	awaitCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: FireAwaitBound,
		// The wait heartbeats every poll (at most 2s apart): a wait on a
		// worker that died is taken up by another within this.
		HeartbeatTimeout: 10 * time.Second,
		RetryPolicy:      &temporal.RetryPolicy{MaximumAttempts: 3},
	})
	err = workflow.ExecuteActivity(awaitCtx, crewlet.ActivityAwaitFire, crewlet.AwaitFireInput{
		Schedule: in.Schedule, FireTime: fireTime, Seat: sent.Seat, EventID: sent.EventID,
	}).Get(ctx, &out.Handled)
	return out, err
}

// fireTimeOf is the fire time a run stands for: the input's, or the
// schedule's scheduled start time, or (from an older server that sets no
// such attribute) the time Temporal appends to the workflow id. Never
// workflow.Now: a retried or caught-up fire must keep its identity.
func fireTimeOf(ctx workflow.Context, in crewlet.ScheduleFireInput) (time.Time, error) {
	if !in.FireTime.IsZero() {
		return in.FireTime.UTC(), nil
	}
	if t, ok := workflow.GetTypedSearchAttributes(ctx).GetTime(scheduledStartTime); ok && !t.IsZero() {
		return t.UTC(), nil
	}
	// "crewlet-schedule/crewlet/standup-2026-01-02T09:00:00Z": the time
	// holds dashes too, so try the tail after each dash.
	id := workflow.GetInfo(ctx).WorkflowExecution.ID
	for rest := id; ; {
		_, tail, ok := strings.Cut(rest, "-")
		if !ok {
			break
		}
		if t, err := time.Parse(time.RFC3339, tail); err == nil {
			return t.UTC(), nil
		}
		rest = tail
	}
	return time.Time{}, temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("schedule fire %s has no fire time: it was not started by its schedule and its input names none", id), crewlet.EINVALID, nil)
}
