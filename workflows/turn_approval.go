package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// toolCall makes one tool call of a round on the seat's host. A call an
// approval policy gates comes back with the approval it waits on: the turn
// waits for the decision (awaitApproval) and asks again, and the gate then
// runs the call, answers it with the denial, or, the call or its policy
// having changed, asks for a new approval.
func (t *turn) toolCall(ctx workflow.Context, thread, round int, call crewlet.ToolCallRef) (crewlet.ToolCallOutput, error) {
	for waited := false; ; waited = true {
		var res crewlet.ToolCallOutput
		summary := fmt.Sprintf("tool %s (call %d of round %d, thread %d), turn %s", call.Name, call.Call, round, thread+1, t.in.TurnID)
		err := workflow.ExecuteActivity(t.toolContext(ctx, call.ReadOnly, summary), crewlet.ActivityToolCall, crewlet.ToolCallInput{
			Tenure: t.in.Tenure, WorkKey: t.in.WorkKey, Thread: thread, Round: round, Call: call,
		}).Get(ctx, &res)
		if err != nil || res.Approval == nil {
			if err == nil && waited && t.stop == nil {
				// The wait gave the profile back; the next round needs one.
				err = t.acquire(ctx, nil)
			}
			return res, err
		}
		// COMPAT(approvals@1): a run recorded without the marker went on
		// past a call that answered with an approval, as if it had no
		// result.
		if workflow.GetVersion(ctx, changeApprovals, workflow.DefaultVersion, approvalsVersion) == workflow.DefaultVersion {
			return res, nil
		}
		if err := t.awaitApproval(ctx, *res.Approval); err != nil {
			return res, err
		}
	}
}

// awaitApproval holds the turn durably until the approval it waits on is
// decided, its time runs out, or a person stops the turn: a timer and
// signals, nothing held open, as a ticket wait does (turn.wait), and with
// the profile's slot given back until the call is done. A decision
// is on the approval's row, so the call's next ask reads it; a timeout or a
// stop is written there first, by EndApproval.
func (t *turn) awaitApproval(ctx workflow.Context, w crewlet.ApprovalWait) error {
	now := workflow.Now(ctx)
	t.progress.Approval = &crewlet.ApprovalWaiting{Approval: w.ID, Tool: w.Tool, Since: now, Until: w.Until}
	t.showWait(ctx, "approval "+w.ID, fmt.Sprintf("waiting on approval %s for %s until %s", w.ID, w.Tool, w.Until.UTC().Format(time.RFC3339)))
	defer func() {
		t.progress.Approval = nil
		t.showWait(ctx, "", "")
	}()
	t.logger.Info("turn_waiting_approval", "seat", t.in.Handle, "turn", t.in.TurnID, "approval", w.ID, "tool", w.Tool, "until", w.Until)
	// A wait uses no model: the profile's slot goes to another turn
	// meanwhile, and the next round takes one again.
	t.release(ctx)
	in := crewlet.EndApprovalInput{Tenure: t.in.Tenure, WorkKey: t.in.WorkKey, Approval: w.ID}
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timer := workflow.NewTimer(timerCtx, max(w.Until.Sub(now), 0))
	if t.stopRequested() {
		in.StoppedBy = t.stop.By
	} else {
		var err error
		in.TimedOut, in.StoppedBy, err = awaitSignal(ctx, t, timer, t.approvals, crewlet.SignalApproval, crewlet.ApprovalSignal.Validate,
			func(sig crewlet.ApprovalSignal) bool { return sig.Approval == w.ID })
		if err != nil {
			return err
		}
	}
	if in.TimedOut || in.StoppedBy != "" {
		if err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityEndApproval, in).Get(ctx, nil); err != nil {
			return err
		}
	}
	t.logger.Info("turn_waited_approval", "seat", t.in.Handle, "turn", t.in.TurnID, "approval", w.ID, "timed_out", in.TimedOut, "stopped_by", in.StoppedBy)
	return nil
}
