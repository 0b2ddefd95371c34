// How a seat runs its turn: inline, in the seat workflow itself (since
// node-liveness 5), or as a Turn child workflow (runs below it).

package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// runningTurn is the seat's hold on its turn in flight.
type runningTurn interface {
	IsReady() bool
	Get(ctx workflow.Context, valuePtr any) error
	// tell passes the turn a person's stop (SignalStopTurn) or new mail
	// that interrupts it (SignalInterruptTurn).
	tell(ctx workflow.Context, name string, req any) error
}

// childTurnFuture is a turn run as a Turn child workflow.
// COMPAT(node-liveness@5): only runs below version 5 start one.
type childTurnFuture struct{ workflow.ChildWorkflowFuture }

func childTurn(turnCtx workflow.Context, in crewlet.TurnInput, taskTimeout time.Duration) runningTurn {
	turnCtx = workflow.WithChildOptions(turnCtx, workflow.ChildWorkflowOptions{
		WorkflowID:          in.TurnID,
		WaitForCancellation: true,
		// A turn's workflow task held by a dead worker is retried
		// elsewhere as fast as a lost host is noticed.
		WorkflowTaskTimeout: taskTimeout,
	})
	return childTurnFuture{workflow.ExecuteChildWorkflow(turnCtx, crewlet.WorkflowTurn, in)}
}

func (c childTurnFuture) tell(ctx workflow.Context, name string, req any) error {
	return c.SignalChildWorkflow(ctx, name, req).Get(ctx, nil)
}

// inlineTurnFuture is a turn run in the seat's own workflow, in a coroutine
// of its own: the seat's loop waits on it as it waited on a child, and
// talks to it through channels instead of signals.
type inlineTurnFuture struct {
	workflow.Future
	id                                           string
	turn                                         *turn
	stops, interrupts, tickets, approvals, freed workflow.Channel
}

// inlineSignalBuffer bounds what waits for the turn to take it: a stop is
// sent once, an interrupt at most once per mail read while the turn runs,
// and the nudges the update handler takes are refused (and sent again
// later, or told another way) once it is full.
const inlineSignalBuffer = 64

// runInlineTurn starts the turn in a coroutine of the seat's workflow on
// turnCtx (cancelling it cancels the turn's steps, as cancelling a child
// did). The seat's state query answers the turn's progress while it runs.
// Tickets, approvals and profile nudges reach it through the seat's
// UpdateNudgeTurn (handleNudges).
func (s *seat) runInlineTurn(ctx, turnCtx workflow.Context, in crewlet.TurnInput) runningTurn {
	buffer := func() workflow.Channel { return workflow.NewBufferedChannel(ctx, inlineSignalBuffer) }
	f := &inlineTurnFuture{id: in.TurnID, stops: buffer(), interrupts: buffer(), tickets: buffer(), approvals: buffer(), freed: buffer()}
	t := newTurn(ctx, in, turnSignals{stops: f.stops, interrupts: f.interrupts, tickets: f.tickets, approvals: f.approvals, freed: f.freed})
	t.describe = s.describeTurn
	t.mergedSteps = s.mergedSteps
	f.turn = t
	s.inline = f
	s.describeTurn(ctx, t)
	s.upsertTurn(ctx, in.TurnID, workflow.Now(ctx))
	future, settle := workflow.NewFuture(ctx)
	f.Future = future
	turnCtx = workflow.WithValue(turnCtx, crewlet.TurnMailKey, in.Mail)
	workflow.Go(turnCtx, func(turnCtx workflow.Context) {
		out, err := t.run(turnCtx)
		settle.Set(out, err)
	})
	return f
}

func (f *inlineTurnFuture) tell(_ workflow.Context, name string, req any) error {
	ch := f.stops
	if name == crewlet.SignalInterruptTurn {
		ch = f.interrupts
	}
	return send(ch, name, req)
}

// send puts req on ch as the turn receives a signal's payload (raw, then
// checked by decodeSignal), without waiting.
func send(ch workflow.Channel, name string, req any) error {
	p, err := converter.GetDefaultDataConverter().ToPayload(req)
	if err != nil {
		return fmt.Errorf("encode %s: %w", name, err)
	}
	if !ch.SendAsync(converter.NewRawValue(p)) {
		return fmt.Errorf("%s: %d already wait for the turn to take them", name, inlineSignalBuffer)
	}
	return nil
}

// handleNudges answers UpdateNudgeTurn for the seat's run: the validator
// refuses a nudge for any turn but the inline one in flight, so its sender
// learns that turn is gone; the handler hands the nudge to the turn.
func (s *seat) handleNudges(ctx workflow.Context) error {
	return workflow.SetUpdateHandlerWithOptions(ctx, crewlet.UpdateNudgeTurn,
		func(ctx workflow.Context, n crewlet.TurnNudge) error {
			f := s.inline
			switch {
			case n.Ticket != "":
				return send(f.tickets, crewlet.SignalTicket, crewlet.TicketSignal{Ticket: n.Ticket})
			case n.Approval != "":
				return send(f.approvals, crewlet.SignalApproval, crewlet.ApprovalSignal{Approval: n.Approval})
			}
			return send(f.freed, crewlet.SignalProfileFree, nil)
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, n crewlet.TurnNudge) error {
			if err := n.Validate(); err != nil {
				return err
			}
			if s.inline == nil || s.inline.id != n.Turn {
				return temporal.NewApplicationError("the seat runs no such turn now", crewlet.ErrorTypeTurnGone)
			}
			return nil
		}})
}

// endInlineTurn clears what the seat showed of its inline turn.
func (s *seat) endInlineTurn(ctx workflow.Context) {
	if s.inline == nil {
		return
	}
	s.inline = nil
	workflow.SetCurrentDetails(ctx, "")
	s.upsertTurn(ctx, "", time.Time{})
}

// describeTurn says in the seat's current details (the Temporal UI's
// "current details", `temporal workflow describe`) which turn runs, where it
// is, and what it waits on.
func (s *seat) describeTurn(ctx workflow.Context, t *turn) {
	p := t.currentProgress()
	line := fmt.Sprintf("turn %s: thread %d of %d, round %d (%d of at most %d model calls)",
		t.in.TurnID, p.Thread+1, max(p.Threads, 1), p.Round, p.Rounds, p.MaxRounds)
	switch {
	case p.Waiting != nil:
		line += fmt.Sprintf("; waiting on ticket %s (%s) until %s", p.Waiting.Ticket, p.Waiting.Kind, p.Waiting.Until.UTC().Format(time.RFC3339))
	case p.Approval != nil:
		line += fmt.Sprintf("; waiting on approval %s for %s until %s", p.Approval.Approval, p.Approval.Tool, p.Approval.Until.UTC().Format(time.RFC3339))
	case p.Held != nil:
		line += "; waiting for a model profile of its pool"
	}
	workflow.SetCurrentDetails(ctx, line)
}

var (
	saTurn      = temporal.NewSearchAttributeKeyKeyword(crewlet.SATurn)
	saTurnSince = temporal.NewSearchAttributeKeyTime(crewlet.SATurnSince)
	saWaiting   = temporal.NewSearchAttributeKeyKeyword(crewlet.SAWaiting)
)

// upsertTurn writes the seat's CrewletTurn and CrewletTurnSince attributes
// as its turn starts (id, since) and ends (""): two visibility writes a
// turn, so `temporal workflow list -q "CrewletTurn != ”"` finds the seats
// running a turn. It only reports.
func (s *seat) upsertTurn(ctx workflow.Context, turnID string, since time.Time) {
	updates := []temporal.SearchAttributeUpdate{saTurn.ValueSet(turnID), saTurnSince.ValueSet(since)}
	if turnID == "" {
		updates = []temporal.SearchAttributeUpdate{saTurn.ValueUnset(), saTurnSince.ValueUnset(), saWaiting.ValueUnset()}
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		s.logger.Warn("upsert search attributes failed", "seat", s.in.Handle, "error", err)
	}
}

// upsertWaiting writes what the seat's turn waits on durably ("ticket T",
// "approval A"; "" when the wait ended), so `temporal workflow list -q
// "CrewletWaiting != ”"` finds the seats waiting. A turn run as a child
// has no seat to write it. It only reports.
func (t *turn) upsertWaiting(ctx workflow.Context, on string) {
	if t.describe == nil {
		return
	}
	update := saWaiting.ValueSet(on)
	if on == "" {
		update = saWaiting.ValueUnset()
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, update); err != nil {
		t.logger.Warn("upsert search attributes failed", "seat", t.in.Handle, "error", err)
	}
}
