// The seat's busy policy: what it does with mail that arrives while a turn
// runs (docs/architecture.md, "Busy policy").

package workflows

import (
	"fmt"

	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// busyWake reports whether the seat was woken by mail while a turn runs and
// its role answers such mail now (reject or interrupt). A seat whose role
// enqueues leaves the wake for after the turn, as before on_busy existed.
func (s *seat) busyWake() bool {
	t := s.state.Turn
	return s.wakePending && t != nil && t.OnBusy != "" && t.OnBusy != crewlet.OnBusyEnqueue
}

// watchMail makes a seat whose role answers mail while busy read once as
// its turn starts: the read lowers the mailbox's awake flag (raised by the
// mail this turn runs), so the next mail published wakes the seat mid-turn,
// and it takes what arrived in between.
func (s *seat) watchMail() {
	if s.state.Turn.OnBusy != "" && s.state.Turn.OnBusy != crewlet.OnBusyEnqueue {
		s.wakePending = true
	}
}

// busyMail reads the mail that arrived while the turn runs and applies the
// busy policy to it: triggers answered "busy" are acked (the ledger holds
// them), triggers in a conversation the turn answers interrupt it, and the
// rest stay pending in the mailbox for the next turn, whose read reclaims
// them. Only new entries are read, so the turn's own triggers stay with it.
func (s *seat) busyMail(ctx workflow.Context, turn runningTurn) {
	s.wakePending = false
	current := s.state.Turn
	// COMPAT(busy-policy@1): a run below version 1 left mail that arrived
	// mid-turn for the next turn.
	if workflow.GetVersion(ctx, changeBusyPolicy, workflow.DefaultVersion, busyPolicyVersion) == workflow.DefaultVersion {
		current.OnBusy = ""
		return
	}
	var read crewlet.ReadMailOutput
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityReadMail, crewlet.ReadMailInput{
		Tenure:     s.tenure(),
		Consumer:   fmt.Sprintf("%s:e%d", s.state.Node, s.state.Epoch),
		Max:        s.in.ReadBatch,
		ClearAwake: true,
		NewOnly:    true,
	}).Get(ctx, &read)
	if err != nil || len(read.Mail) == 0 {
		// Unread mail waits for the next turn's read, as it would have
		// without a busy policy.
		if err != nil && !isFenced(err) {
			s.logger.Warn("busy_mail_unread", "seat", s.in.Handle, "turn", current.ID, "error", err)
		}
		return
	}
	var out crewlet.BusyMailOutput
	err = workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityBusyMail, crewlet.BusyMailInput{
		Tenure: s.tenure(), TurnID: current.ID, WorkKey: current.WorkKey, Mail: read.Mail,
		MayInterrupt: current.Interrupts < crewlet.MaxInterrupts,
	}).Get(ctx, &out)
	if err != nil {
		// Nothing was acked: the mail is reclaimed by the next turn's read
		// and answered there.
		if !isFenced(err) {
			s.logger.Warn("busy_mail_failed", "seat", s.in.Handle, "turn", current.ID, "error", err)
		}
		return
	}
	current.OnBusy = out.Policy
	if len(out.Done) > 0 {
		ids := make([]string, len(out.Done))
		for i, m := range out.Done {
			ids[i] = m.StreamID
		}
		// The ledger holds each of these, so a lost ack only costs a
		// redelivery the next turn skips.
		if err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityAckMail, crewlet.AckMailInput{
			Tenure: s.tenure(), StreamIDs: ids,
		}).Get(ctx, nil); err != nil && !isFenced(err) {
			s.logger.Warn("busy_mail_unacked", "seat", s.in.Handle, "turn", current.ID, "error", err)
		}
		s.state.Counters.BusyRejected += int64(len(out.Done))
	}
	if len(out.Interrupt) == 0 {
		return
	}
	req := crewlet.InterruptTurnRequest{Mail: out.Interrupt}
	if err := turn.tell(ctx, crewlet.SignalInterruptTurn, req); err != nil {
		// The mail stays pending and is answered by the next turn.
		s.logger.Warn("turn_interrupt_failed", "seat", s.in.Handle, "turn", current.ID, "error", err)
		return
	}
	current.InterruptSent = true
	s.logger.Info("turn_interrupt_sent", "seat", s.in.Handle, "turn", current.ID, "mail", len(out.Interrupt))
}
