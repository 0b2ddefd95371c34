// The seat's turns: one batch of mail at a time, as a Turn child workflow,
// with the waits around it (budget holds, release waits, back-off).

package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// awaitBudget holds the seat's turns until the budget window that holds them
// turns. The held triggers stay in the mailbox and the seat reads nothing
// meanwhile: a read would spend a delivery of each. It asks whether the cap
// still holds when the window turns, and at least every budgetRecheck, so a
// cap raised in config lets it go on within that time.
func (s *seat) awaitBudget(ctx workflow.Context) {
	s.setStatus(ctx, crewlet.StatusIdle)
	wait := min(max(s.state.Budget.ResetsAt.Sub(workflow.Now(ctx)), time.Second), budgetRecheck)
	_, _ = workflow.AwaitWithTimeout(ctx, wait, func() bool { return s.state.Pause != nil || s.interrupted() })
	if s.state.Pause != nil || s.interrupted() {
		return
	}
	var hold *crewlet.BudgetHold
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityCheckBudget, crewlet.CheckBudgetInput{
		Handle: s.in.Handle,
	}).Get(ctx, &hold)
	if err != nil {
		// The next turn checks again; a check that cannot run must not
		// hold the seat.
		s.noteError(fmt.Sprintf("check budget: %v", err))
		hold = nil
	}
	s.state.Budget = hold
	if hold == nil {
		s.wakePending = true
	}
}

// runBatch answers the entries read in one turn (mail that arrived while the
// last turn ran is batched into this one). Entries the completion ledger
// already holds are acked without running. On failure nothing is acked: the
// entries are reclaimed by the next read, so nothing is lost and order is
// kept. prep is the read's preparation of the turn, nil when the read did
// not prepare it.
func (s *seat) runBatch(ctx workflow.Context, mail []crewlet.MailRef, prep *crewlet.PrepareTurnOutput) {
	if s.state.Pause != nil || s.interrupted() || !s.attached {
		return
	}
	if err := s.runTurn(ctx, mail, prep); err != nil {
		if s.tenureEnded(ctx, err) {
			return
		}
		if temporal.IsCanceledError(err) && (s.movesAway() || s.state.Drain != nil) {
			// Cut short by a release that waited long enough: not a
			// failure; the entries stay unacked for the next tenure.
			return
		}
		s.state.Counters.Failures++
		s.failures++
		if reason, ok := permanent(err); ok && len(mail) == 1 {
			// It will never succeed: dead-lettered now, with the reason,
			// rather than after its whole delivery budget.
			s.deadLetter(ctx, mail, reason)
			return
		}
		s.noteError(fmt.Sprintf("turn failed: %v", err))
		s.setStatus(ctx, crewlet.StatusIdle)
		_ = workflow.Sleep(ctx, min(s.in.RetryBackoff, time.Duration(s.failures)*2*time.Second))
		return
	}
	s.failures = 0
}

func (s *seat) runTurn(ctx workflow.Context, mail []crewlet.MailRef, prepared *crewlet.PrepareTurnOutput) error {
	var prep crewlet.PrepareTurnOutput
	if prepared != nil {
		prep = *prepared
	} else {
		// COMPAT(node-liveness@6): a run below version 6 prepares the turn
		// in a step of its own.
		if err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityPrepareTurn, crewlet.PrepareTurnInput{
			Tenure: s.tenure(), Mail: mail,
		}).Get(ctx, &prep); err != nil {
			return err
		}
	}
	// The ledger holds every one of these triggers once the turn finished,
	// so acking is safe then; if the ack is lost the redelivery is skipped
	// by the ledger.
	streamIDs := make([]string, 0, len(mail))
	for _, m := range mail {
		streamIDs = append(streamIDs, m.StreamID)
	}
	var out crewlet.TurnOutput
	var turnID string
	if len(prep.Run) > 0 {
		eventIDs := make([]string, len(prep.Run))
		for i, m := range prep.Run {
			eventIDs[i] = m.EventID
		}
		workKey := crewlet.WorkKey(eventIDs)
		turnID = crewlet.TurnWorkflowID(s.in.Handle, workKey)
		s.state.Turn = &crewlet.CurrentTurn{ID: turnID, WorkKey: workKey, Triggers: len(prep.Run), StartedAt: workflow.Now(ctx),
			OnBusy: prep.OnBusy, Interrupts: s.interrupts}
		s.watchMail()
		s.setStatus(ctx, crewlet.StatusRunning)
		defer func() { s.state.Turn = nil }()

		turnCtx, cancelTurn := workflow.WithCancel(ctx)
		in := crewlet.TurnInput{
			Tenure: s.tenure(), HostQueue: s.state.HostQueue, TurnID: turnID, WorkKey: workKey,
			Mail: prep.Run, HeartbeatTimeout: s.in.HeartbeatTimeout,
		}
		if s.mergedSteps {
			in.Ack = streamIDs
		}
		var future runningTurn
		if s.inlineTurns {
			future = s.runInlineTurn(ctx, turnCtx, in)
			defer s.endInlineTurn(ctx)
		} else {
			future = childTurn(turnCtx, in, s.in.HeartbeatTimeout)
		}
		if err := s.awaitTurn(ctx, future, turnID, cancelTurn); err != nil {
			return err
		}
		if err := future.Get(ctx, &out); err != nil {
			return err
		}
		switch out.Status {
		case crewlet.TurnFenced:
			s.fenced()
			return nil
		case crewlet.TurnHeld:
			s.state.Budget = out.Hold
			s.logger.Info("turn_held", "seat", s.in.Handle, "scope", out.Hold.Scope, "window", out.Hold.Window, "resets_at", out.Hold.ResetsAt)
			return nil
		case crewlet.TurnInterrupted:
			// Nothing acked: the next read reclaims these triggers with the
			// mail that interrupted them, and the next turn carries on.
			s.interrupts++
			s.state.Counters.Interrupted++
			return nil
		}
		s.state.Counters.Turns++
	}
	if !out.Acked {
		if err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityAckMail, crewlet.AckMailInput{
			Tenure: s.tenure(), StreamIDs: streamIDs,
		}).Get(ctx, nil); err != nil {
			return err
		}
	}
	s.interrupts = 0
	s.state.Counters.Triggers += int64(len(out.Answered))
	s.state.Counters.Skipped += int64(len(prep.Skipped))
	switch {
	case out.Status == crewlet.TurnFailed:
		// Acked, so the mailbox forgets it: the seat's state keeps saying
		// so until a turn succeeds.
		s.noteError(fmt.Sprintf("turn failed: %s", out.Note))
		s.state.FailedTurn = turnID
	case len(prep.Run) > 0:
		s.state.LastError, s.state.FailedTurn = "", ""
	}
	return nil
}

// awaitTurn waits for the turn in flight. A person's pause with stop_turn
// asks the turn to stop at its next round boundary; mail that arrives
// meanwhile is answered by the role's busy policy (busyMail) unless the seat
// is leaving. A voluntary release (move, drain) lets it finish for up to
// ReleaseWait, then cancels it; a lost host cancels it at once. A cancelled
// turn's triggers stay unacked, so the next tenure runs them, and the turn's
// recorded steps are not repeated.
func (s *seat) awaitTurn(ctx workflow.Context, turn runningTurn, turnID string, cancel workflow.CancelFunc) error {
	stopSent := false
	stopTurn := func() bool { return !stopSent && s.state.Pause != nil && s.state.Pause.StopTurn }
	for {
		if err := workflow.Await(ctx, func() bool {
			return turn.IsReady() || stopTurn() || s.hostLost || s.state.Drain != nil || s.movesAway() || s.busyWake()
		}); err != nil {
			return err
		}
		switch {
		case turn.IsReady():
			return nil
		case stopTurn():
			stopSent = true
			req := crewlet.StopTurnRequest{By: s.state.Pause.By, Reason: s.state.Pause.Reason}
			if err := turn.tell(ctx, crewlet.SignalStopTurn, req); err != nil {
				s.logger.Warn("turn_stop_failed", "seat", s.in.Handle, "turn", turnID, "error", err)
			}
			continue
		case s.hostLost:
			s.logger.Warn("turn_cancelled", "seat", s.in.Handle, "turn", turnID, "reason", "host lost")
			cancel()
			return workflow.Await(ctx, turn.IsReady)
		case s.busyWake() && s.state.Drain == nil && !s.movesAway():
			s.busyMail(ctx, turn)
			continue
		}
		done, err := workflow.AwaitWithTimeout(ctx, s.in.ReleaseWait, func() bool { return turn.IsReady() || s.hostLost })
		if err != nil {
			return err
		}
		if !done || !turn.IsReady() {
			s.logger.Warn("turn_cancelled", "seat", s.in.Handle, "turn", turnID, "reason", "release wait exceeded", "wait", s.in.ReleaseWait)
			cancel()
		}
		return workflow.Await(ctx, turn.IsReady)
	}
}

// permanent reports whether a turn's error says its trigger can never
// succeed, and why.
func permanent(err error) (string, bool) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == crewlet.ErrorTypePermanent {
		return rootMessage(err), true
	}
	return "", false
}

// deadLetter moves the one trigger that can never succeed to the dead
// letters. A move that fails leaves it to the delivery budget.
func (s *seat) deadLetter(ctx workflow.Context, mail []crewlet.MailRef, reason string) {
	ids := make([]string, len(mail))
	for i, m := range mail {
		ids[i] = m.StreamID
	}
	reason = clipText("the turn can never succeed: "+reason, crewlet.MaxReasonBytes)
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityDeadLetterMail, crewlet.DeadLetterMailInput{
		Tenure: s.tenure(), StreamIDs: ids, Reason: reason,
	}).Get(ctx, nil)
	if err != nil {
		s.noteError(fmt.Sprintf("dead-letter %s: %v", mail[0].EventID, err))
		return
	}
	s.failures = 0
	s.noteError(reason)
}
