// The busy policy's steps (docs/architecture.md, "Busy policy"): what a seat
// does with mail that arrives while a turn runs, and how an interrupted
// turn leaves its exchange to the next one.

package activities

import (
	"context"
	"fmt"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/turnrules"
	"github.com/crewlet/crewlet/internal/wire"
)

// interruptKey is the key, in the thread it interrupted, of a message that
// interrupted a turn.
func interruptKey(eventID string) string { return "interrupt:" + eventID }

// interruptText is how a message that interrupted a turn reads to the
// model, after the rounds it interrupted.
func interruptText(m crewlet.Message) string {
	return "(A new message in this conversation interrupted your work on the one above, between two of your steps. " +
		"Carry on from where you stopped, taking it into account; your one answer goes to both.)\n\n" + turnrules.TriggerText(m)
}

// BusyMail applies the seat's busy policy, read from the active revision, to
// mail read while a turn runs. Only chat messages are subject to it: replies
// and ticket notices are recorded by the next turn, and a ticket's request
// is worked on when the seat is free, since its delegator waits on it.
// Mail the ledger holds already is Done; so is a message rejected: it is
// answered "busy" in its conversation (and delivered when its sender is a
// seat), then recorded in the completion ledger, each step keyed on its
// event id, so a crash between them neither loses nor doubles the answer.
// A message interrupts only when its conversation is one of an unfinished
// thread of the turn, and while MayInterrupt; the rest is kept.
func (a *Turns) BusyMail(ctx context.Context, in crewlet.BusyMailInput) (out crewlet.BusyMailOutput, err error) {
	_, role, err := a.role(ctx, in.Handle)
	if err != nil {
		return out, err
	}
	out.Policy = role.OnBusy
	if role.OnBusy != crewlet.OnBusyReject && role.OnBusy != crewlet.OnBusyInterrupt {
		out.Keep = in.Mail
		return out, nil
	}
	msgs, err := a.mailOf(ctx, in.Handle, in.Mail)
	if err != nil {
		return out, err
	}
	byStream := map[string]crewlet.Message{}
	var keys []string
	for _, m := range msgs {
		byStream[m.StreamID] = m
		keys = append(keys, crewlet.LedgerKeys(m)...)
	}
	done, err := a.store.LedgerRecorded(ctx, in.Handle, keys)
	if err != nil {
		return out, err
	}
	var open map[string]bool
	if role.OnBusy == crewlet.OnBusyInterrupt && in.MayInterrupt {
		if open, err = a.openConversations(ctx, in.Handle, in.WorkKey); err != nil {
			return out, err
		}
	}
	for _, ref := range in.Mail {
		m, ok := byStream[ref.StreamID]
		switch {
		case !ok:
			// Gone from the stream: the next turn's read skips it.
			out.Keep = append(out.Keep, ref)
		case recorded(done, m):
			out.Done = append(out.Done, ref)
		case m.Type != crewlet.MessageChat:
			out.Keep = append(out.Keep, ref)
		case role.OnBusy == crewlet.OnBusyReject:
			if err := a.rejectBusy(ctx, in, m); err != nil {
				return out, err
			}
			out.Done = append(out.Done, ref)
		case open[m.Conversation]:
			out.Interrupt = append(out.Interrupt, ref)
		default:
			out.Keep = append(out.Keep, ref)
		}
	}
	return out, nil
}

// recorded reports whether the completion ledger holds any key of m.
func recorded(done map[string]bool, m crewlet.Message) bool {
	for _, k := range crewlet.LedgerKeys(m) {
		if done[k] {
			return true
		}
	}
	return false
}

// rejectBusy answers m that the seat is busy and records it as handled.
func (a *Turns) rejectBusy(ctx context.Context, in crewlet.BusyMailInput, m crewlet.Message) error {
	workKey := "busy:" + crewlet.ThreadKey(m.EventID)
	reply := crewlet.Message{
		EventID:      "busy-" + crewlet.WorkKey([]string{in.Handle, m.EventID}),
		Type:         crewlet.MessageReply,
		From:         in.Handle,
		To:           m.From,
		Conversation: m.Conversation,
		InReplyTo:    m.EventID,
		Body:         crewlet.BusyText(in.Handle, in.TurnID),
		SentAt:       a.Now().UTC(),
	}
	if err := a.store.AppendMessages(ctx, workKey, m, reply); err != nil {
		return err
	}
	if _, isSeat := a.org.Now().Seat(reply.To); isSeat {
		if _, err := a.delivery.Deliver(ctx, reply); err != nil {
			return fmt.Errorf("deliver busy answer to %s: %w", reply.To, err)
		}
	}
	if err := a.store.LedgerRecord(ctx, in.Handle, workKey, in.TurnID, crewlet.LedgerKeys(m)); err != nil {
		return err
	}
	a.log.Info("busy_rejected", "seat", in.Handle, "event_id", m.EventID, "from", m.From, "turn", in.TurnID)
	if err := a.store.RecordSeatEvent(ctx, in.Handle, "busy_rejected", m.EventID, map[string]any{"turn": in.TurnID, "from": m.From}); err != nil {
		a.log.Warn("seat_event_unrecorded", "seat", in.Handle, "kind", "busy_rejected", "error", err)
	}
	return nil
}

// openConversations are the conversations of the turn's threads that have
// no answer yet: new mail in one of them is what interrupt is for. A turn
// not begun yet has none.
func (a *Turns) openConversations(ctx context.Context, handle, workKey string) (map[string]bool, error) {
	turn, err := a.store.Turn(ctx, handle, workKey)
	if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	open := map[string]bool{}
	for thread := range turn.Threads {
		trigger, key, err := threadOf(turn, thread)
		if err != nil {
			return nil, err
		}
		msgs, err := a.store.TurnMessages(ctx, handle, key, 0)
		if err != nil {
			return nil, err
		}
		if _, finished := turnrules.AnswerOf(chatMessages(msgs)); !finished {
			open[trigger.Conversation] = true
		}
	}
	return open, nil
}

// InterruptTurn records a turn's interruption at a round boundary: each new
// message joins the unfinished thread of its conversation (the interrupted
// one first), after the rounds so far, so the next turn's model reads the
// exchange and the new message together and carries on. The turn is
// recorded interrupted. Each step is keyed, so a re-run writes once.
func (a *Turns) InterruptTurn(ctx context.Context, in crewlet.InterruptTurnInput) error {
	turn, err := a.store.Turn(ctx, in.Handle, in.WorkKey)
	if err != nil {
		return err
	}
	msgs, err := a.mailOf(ctx, in.Handle, in.Mail)
	if err != nil {
		return err
	}
	// The interrupted thread first, then the rest in order.
	order := []int{in.Thread}
	for thread := range turn.Threads {
		if thread != in.Thread {
			order = append(order, thread)
		}
	}
	for _, m := range msgs {
		for _, thread := range order {
			trigger, key, err := threadOf(turn, thread)
			if err != nil {
				return err
			}
			if trigger.Conversation != m.Conversation {
				continue
			}
			thread, err := a.store.TurnMessages(ctx, in.Handle, key, 0)
			if err != nil {
				return err
			}
			if _, finished := turnrules.AnswerOf(chatMessages(thread)); finished {
				continue
			}
			if _, err := a.store.AppendTurnMessage(ctx, in.Handle, key, wire.TurnMessage{
				Key: interruptKey(m.EventID), Message: crewlet.ChatMessage{Role: "user", Content: interruptText(m)},
			}); err != nil {
				return err
			}
			if err := a.store.RecordSeatEvent(ctx, in.Handle, "turn_interrupted", m.EventID, map[string]any{
				"turn": in.TurnID, "thread_of": trigger.EventID, "from": m.From,
			}); err != nil {
				a.log.Warn("seat_event_unrecorded", "seat", in.Handle, "kind", "turn_interrupted", "error", err)
			}
			break
		}
	}
	note := fmt.Sprintf("Interrupted by %d new message(s) at a round boundary; the seat's next turn carries on with them.", len(msgs))
	if _, err := a.store.FinishTurn(ctx, in.Handle, in.WorkKey, string(crewlet.TurnInterrupted), note, "", in.Rounds); err != nil {
		a.log.Warn("turn_unrecorded", "seat", in.Handle, "turn", in.TurnID, "error", err)
	}
	a.log.Info("turn_interrupted", "seat", in.Handle, "turn", in.TurnID, "thread", in.Thread, "mail", len(msgs))
	return nil
}

// joinInterrupted leaves out of a batch's threads the messages that
// interrupted an earlier turn of another trigger of the batch: they were
// recorded in that trigger's thread, whose one answer covers them.
func (a *Turns) joinInterrupted(ctx context.Context, handle string, batch []crewlet.Message, threads []int) ([]int, error) {
	if len(threads) < 2 {
		return threads, nil
	}
	joined := map[string]bool{}
	for _, i := range threads {
		msgs, err := a.store.TurnMessages(ctx, handle, crewlet.ThreadKey(batch[i].EventID), 0)
		if err != nil {
			return nil, err
		}
		for _, m := range msgs {
			joined[m.Key] = true
		}
	}
	kept := threads[:0:0]
	for _, i := range threads {
		if !joined[interruptKey(batch[i].EventID)] {
			kept = append(kept, i)
		}
	}
	return kept, nil
}
