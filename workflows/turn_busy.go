// A turn interrupted by new mail (on_busy: interrupt): it stops at its next
// round boundary and leaves the exchange so far, with the new mail, to the
// turn the seat runs next (docs/architecture.md, "Busy policy").

package workflows

import (
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// interruptRequested takes in the interrupt signals received so far and
// reports whether any asked the turn to stop. A turn begun before the
// change ignores them. COMPAT(turn-interrupt@1)
func (t *turn) interruptRequested(ctx workflow.Context) bool {
	var raw converter.RawValue
	for t.interrupts.ReceiveAsync(&raw) {
		req, err := decodeSignal(raw, crewlet.InterruptTurnRequest.Validate)
		if err != nil {
			t.rejected(crewlet.SignalInterruptTurn, raw, err)
			continue
		}
		t.interruptMail = append(t.interruptMail, req.Mail...)
	}
	if len(t.interruptMail) == 0 {
		return false
	}
	t.progress.InterruptRequested = true
	return workflow.GetVersion(ctx, changeTurnInterrupt, workflow.DefaultVersion, turnInterruptVersion) >= turnInterruptVersion
}

// interrupted ends the turn at a round boundary of thread: the new mail is
// recorded in the transcript after the rounds so far (InterruptTurn), and
// the turn ends unanswered and unacked, so the seat's next turn runs its
// triggers again with the new mail and reads the interrupted exchange as
// its context.
func (t *turn) interrupted(ctx workflow.Context, thread int) error {
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityInterruptTurn, crewlet.InterruptTurnInput{
		Tenure: t.in.Tenure, TurnID: t.in.TurnID, WorkKey: t.in.WorkKey, Thread: thread, Rounds: t.out.Rounds, Mail: t.interruptMail,
	}).Get(ctx, nil)
	if err != nil {
		return err
	}
	t.out.Status = crewlet.TurnInterrupted
	t.out.Note = "interrupted by new mail"
	t.logger.Info("turn_interrupted", "seat", t.in.Handle, "turn", t.in.TurnID, "thread", thread, "rounds", t.out.Rounds, "mail", len(t.interruptMail))
	return nil
}
