// The end of a turn: answers sent, tickets settled, memory and the ledger
// written, and the reflection that keeps what the seat should remember.

package activities

import (
	"context"
	"fmt"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/turnrules"
	"github.com/crewlet/crewlet/internal/wire"
)

// FinishTurn closes a turn: every conversation's answer (or the turn's note
// where it has none) is recorded in its thread and sent to a sender that is
// a seat; memory and the completion ledger are written last, and, asked
// to, the turn's profile slot is given back with them (ReleaseProfile).
// Asked to, it then acks its seat's entries (AckMail): the ledger holds
// them now.
func (a *Turns) FinishTurn(ctx context.Context, in crewlet.FinishTurnInput) (out crewlet.FinishTurnOutput, err error) {
	read, err := a.store.TenureThreads(ctx, in.Tenure, in.WorkKey, in.ThreadKeys, false)
	if err != nil {
		return out, err
	}
	turn := read.Turn
	replies := map[int]string{}
	// answered marks the threads that ended in the model's own answer, not
	// a note (stopped, out of rounds, refused): only such an answer settles
	// a ticket.
	answered := map[int]bool{}
	for thread := range turn.Threads {
		_, key, err := threadOf(turn, thread)
		if err != nil {
			return out, err
		}
		msgs, _, err := a.thread(ctx, read, in.Handle, key, false)
		if err != nil {
			return out, err
		}
		text, finished := turnrules.AnswerOf(chatMessages(msgs))
		answered[turn.Threads[thread]] = finished && msgs[len(msgs)-1].Message.Role == "assistant"
		if !finished && in.Note != "" {
			note, err := a.store.AppendTurnMessage(ctx, in.Handle, key, wire.TurnMessage{
				Key: noteKey, Message: crewlet.ChatMessage{Role: "note", Content: in.Note},
			})
			if err != nil {
				return out, err
			}
			text = note.Message.Content
		}
		replies[turn.Threads[thread]] = text
	}
	closing := turnrules.Close(in.Handle, turn.Mail, replies, a.Now())
	out.Answered, out.Replies = closing.Answered, closing.Replies
	defer a.flushEvents()
	crashPoint("after_model", in.Handle)
	if err := a.store.AppendMessages(ctx, in.WorkKey, closing.Transcript...); err != nil {
		return out, err
	}
	tickets := map[string]crewlet.Message{}
	for i, trigger := range turn.Mail {
		if _, isThread := replies[i]; isThread && trigger.Type == crewlet.MessageTicket {
			tickets[trigger.EventID] = trigger
		}
	}
	for _, r := range closing.Transcript {
		if r.From != in.Handle {
			continue
		}
		if _, ok := tickets[r.InReplyTo]; ok {
			continue // the ticket's notice tells its delegator, below
		}
		if _, ok := a.org.Now().Seat(r.To); !ok {
			continue // the sender is not a seat: the transcript is where the reply lives
		}
		if _, err := a.delivery.Deliver(ctx, r); err != nil {
			return out, fmt.Errorf("deliver reply to %s: %w", r.To, err)
		}
	}
	for _, r := range closing.Transcript {
		if r.From == in.Handle {
			a.emit(in.Handle, in.WorkKey, r.Conversation, events.AnswerSent, events.AnswerSent+"|"+r.InReplyTo,
				events.Data{To: r.To, InReplyTo: r.InReplyTo, Text: r.Body})
		}
	}
	if err := a.closeTickets(ctx, turn, replies, answered); err != nil {
		return out, err
	}
	crashPoint("after_publish", in.Handle)
	// The rest is one transaction, last: the turn waits on nothing any
	// more (what still comes of a ticket it waited on reaches the seat by
	// a notice, and a question it left unanswered no longer holds its
	// ticket asking), the seat remembers it, its outcome is recorded and
	// the ledger holds its triggers. Every write is keyed, so a re-run
	// after a failure here records once.
	closed, err := a.store.CloseTurn(ctx, store.TurnClose{
		Seat: in.Handle, WorkKey: in.WorkKey, TurnID: in.TurnID,
		Status: string(in.Status), Note: in.Note, StoppedBy: in.StoppedBy, Rounds: in.Rounds,
		Episode: closing.Episode, Counterparties: closing.Counterparties, Ledger: closing.Ledger,
		Release: in.Release, ReleaseEpoch: in.Epoch,
	})
	switch {
	case crewlet.ErrorCode(err) == crewlet.ENOTFOUND:
		// Its row went (trimmed) after the read above: the ledger and
		// memory are recorded all the same, the outcome has nowhere to go.
		a.log.Warn("turn_unrecorded", "seat", in.Handle, "turn", in.TurnID, "error", err)
	case err != nil:
		return out, err
	}
	a.profiles.Freed(ctx, closed.Freed)
	crashPoint(testhook.AfterLedger, in.Handle)
	if closed.First && in.Status == crewlet.TurnFailed {
		// Acked all the same, so its triggers never come back: the seat's
		// events are where a person finds what became of them.
		for _, trigger := range turn.Mail {
			a.log.Warn("turn_trigger_failed", "seat", in.Handle, "event_id", trigger.EventID, "turn", in.TurnID, "reason", in.Note)
			if err := a.store.RecordSeatEvent(ctx, in.Handle, "turn_trigger_failed", trigger.EventID, map[string]any{
				"turn": in.TurnID, "from": trigger.From, "reason": in.Note,
			}); err != nil {
				a.log.Warn("seat_event_unrecorded", "seat", in.Handle, "kind", "turn_trigger_failed", "error", err)
			}
		}
	}
	a.emit(in.Handle, in.WorkKey, "", events.TurnFinished, events.TurnFinished, events.Data{
		Conversations: turnConversations(turn), Status: string(in.Status), Rounds: in.Rounds, Note: in.Note, By: in.StoppedBy,
	})
	a.metrics.TurnFinished(string(in.Status))
	a.log.Info("turn_finished", "seat", in.Handle, "turn", in.TurnID, "status", in.Status, "rounds", in.Rounds,
		"triggers", len(out.Answered), "replies", out.Replies)
	if len(in.Ack) > 0 {
		// An ack that fails is left to the seat, which acks them itself.
		if err := ackEntries(ctx, a.mailbox, a.metrics, in.Handle, in.Ack); err != nil {
			a.log.Warn("mail_unacked", "seat", in.Handle, "turn", in.TurnID, "error", err)
			return out, nil
		}
		out.Acked = true
	}
	return out, nil
}

// Reflect asks the model, once a turn's threads are answered and before the
// turn finishes, what from the turn is worth keeping, and writes the answer
// to the seat's diary keyed on the turn's work: a reflection that already
// wrote is not asked again, and one re-run after a crash writes once.
// Fenced like every step of the turn.
func (a *Turns) Reflect(ctx context.Context, in crewlet.ReflectInput) (err error) {
	if done, err := a.store.ReflectionWritten(ctx, in.Handle, in.WorkKey); err != nil || done {
		return err
	}
	turn, err := a.store.Turn(ctx, in.Handle, in.WorkKey)
	if err != nil {
		return err
	}
	seat, role, err := a.role(ctx, in.Handle)
	if err != nil {
		return err
	}
	name, err := a.roundProfile(ctx, in.Handle, in.TurnID, in.Epoch, in.Profile, role)
	if err != nil {
		return err
	}
	profile := a.org.Now().Profiles[name]
	ctxIn := crewlet.ContextInput{
		System:  a.systemPrompt(in.Handle, seat.Role, role),
		Current: []crewlet.ChatMessage{{Role: "user", Content: crewlet.ReflectionPrompt}},
		Budget:  profile.InputBudget(),
	}
	for thread := range turn.Threads {
		_, key, err := threadOf(turn, thread)
		if err != nil {
			return err
		}
		msgs, err := a.store.TurnMessages(ctx, in.Handle, key, 0)
		if err != nil {
			return err
		}
		x := crewlet.Exchange{MessageID: turn.Mail[turn.Threads[thread]].EventID}
		for _, m := range msgs {
			x.Messages = append(x.Messages, m.Message)
		}
		ctxIn.Earlier = append(ctxIn.Earlier, x)
	}
	plan := crewlet.AssembleContext(ctxIn)
	stop := make(chan struct{})
	defer close(stop)
	go heartbeatWhile(ctx, a.host.Beat, stop)
	resp, err := a.chat(ctx, name, crewlet.ModelRequest{
		Seat: in.Handle, Role: seat.Role, Purpose: crewlet.PurposeReflect, System: ctxIn.System,
		Messages: plan.Messages, MaxTokens: profile.MaxTokens,
	}, nil)
	if err != nil {
		return a.modelFailure(ctx, name, in.TurnID, err)
	}
	a.profiles.Answered(ctx, name, resp.Model)
	if _, err := a.recordRound(ctx, wire.RoundRow{Seat: in.Handle, Role: seat.Role, WorkKey: "reflect:" + in.WorkKey, Round: 1, Profile: name,
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, CachedTokens: resp.Usage.CachedTokens,
		ContextBytes: plan.Bytes, AnsweredModel: resp.Model}, ctxIn.System, nil); err != nil {
		a.log.Warn("usage_unrecorded", "seat", in.Handle, "what", "reflection", "error", err)
	}
	crashPoint("after_reflection_model", in.Handle)
	entry, kept := turnrules.ReflectionKept(resp.Text)
	if !kept {
		a.log.Info("turn_reflected", "seat", in.Handle, "turn", in.TurnID, "kept", false)
		return nil
	}
	if err := a.store.WriteReflection(ctx, in.Handle, in.WorkKey, entry); err != nil {
		return err
	}
	a.log.Info("turn_reflected", "seat", in.Handle, "turn", in.TurnID, "kept", true)
	return nil
}

// closeTickets ends the tickets the turn served: the model's answer settles
// one (exactly one reply settles a ticket), and a thread that ended in a
// note instead (stopped, out of rounds, refused, the turn failed) fails it
// with that note. Either way the delegator is told.
func (a *Turns) closeTickets(ctx context.Context, turn wire.TurnRow, replies map[int]string, answered map[int]bool) error {
	for i, trigger := range turn.Mail {
		text, isThread := replies[i]
		if !isThread || trigger.Type != crewlet.MessageTicket {
			continue
		}
		// The event says how the ticket stands: one cancelled while the
		// turn ran stays cancelled.
		var ticket crewlet.Ticket
		var err error
		if answered[i] {
			ticket, _, err = a.tickets.Settle(ctx, trigger.Ticket, text)
		} else {
			ticket, _, err = a.tickets.End(ctx, trigger.Ticket, crewlet.TicketFailed, "the turn serving it ended without an answer: "+text)
		}
		if err != nil {
			return fmt.Errorf("close ticket %s: %w", trigger.Ticket, err)
		}
		a.emit(turn.Seat, turn.WorkKey, trigger.Conversation, events.TicketSettled, events.TicketSettled+"|"+trigger.Ticket,
			events.Data{Ticket: trigger.Ticket, Phase: string(ticket.Phase)})
	}
	return nil
}

// chatMessages are a thread's recorded messages as the model saw them.
func chatMessages(msgs []wire.TurnMessage) []crewlet.ChatMessage {
	out := make([]crewlet.ChatMessage, len(msgs))
	for i, m := range msgs {
		out[i] = m.Message
	}
	return out
}
