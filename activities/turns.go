package activities

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/control"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/model"
	"github.com/crewlet/crewlet/internal/store"
)

// Turns runs turns: read the triggers, ask the model, record the transcript,
// deliver replies, record the completion ledger.
type Turns struct {
	host    *Host
	org     *config.Config
	store   *store.Store
	mailbox *mailbox.Mailbox
	control *control.Control
	models  map[string]crewlet.Model
	log     *slog.Logger
}

// NewTurns builds the model of every profile in org once.
func NewTurns(host *Host, org *config.Config, st *store.Store, mb *mailbox.Mailbox, ctl *control.Control, log *slog.Logger) (*Turns, error) {
	probe, err := model.OpenProbe(host.Incarnation)
	if err != nil {
		return nil, err
	}
	models := map[string]crewlet.Model{}
	for name, p := range org.Profiles {
		m, err := model.New(p, probe)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", name, err)
		}
		models[name] = m
	}
	return &Turns{host: host, org: org, store: st, mailbox: mb, control: ctl, models: models, log: log}, nil
}

// RunTurn answers a batch of triggers. It runs on the seat's host and
// heartbeats, so a host lost mid-turn is noticed within the heartbeat timeout. Every step is keyed on the work, so a
// re-run after a crash repeats nothing that already landed: the transcript is
// keyed by event id, a reply's event id is derived from the turn and its
// trigger, and the ledger is keyed by trigger.
func (a *Turns) RunTurn(ctx context.Context, in crewlet.TurnInput) (crewlet.TurnOutput, error) {
	if err := a.host.CheckHosted(in.Handle, in.Epoch); err != nil {
		return crewlet.TurnOutput{}, err
	}
	if err := a.store.CheckEpoch(ctx, in.Handle, in.Epoch); err != nil {
		return crewlet.TurnOutput{}, fence(a.log, in.Handle, in.Epoch, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go heartbeatWhile(ctx, a.host.Beat, stop)
	var out crewlet.TurnOutput
	streamIDs := make([]string, len(in.Mail))
	for i, ref := range in.Mail {
		streamIDs[i] = ref.StreamID
	}
	msgs, err := a.mailbox.Get(ctx, in.Handle, streamIDs)
	if err != nil {
		return out, err
	}
	found := map[string]bool{}
	for _, m := range msgs {
		found[m.EventID] = true
	}
	for _, ref := range in.Mail {
		if !found[ref.EventID] {
			a.log.Warn("turn_trigger_skipped", "seat", in.Handle, "event_id", ref.EventID, "reason", "entry no longer exists")
			out.Skipped = append(out.Skipped, ref.EventID)
		}
	}

	msgs = a.skipFinished(ctx, in.Handle, msgs, &out)
	if len(msgs) == 0 {
		return out, nil
	}
	seat, ok := a.org.Seat(in.Handle)
	role, hasRole := a.org.Roles[seat.Role]
	m := a.models[role.Profile]
	if !ok || !hasRole || m == nil {
		return out, crewlet.Errorf(crewlet.ENOTFOUND, "seat %s has no agent role with a profile in the org", in.Handle)
	}

	var replies []crewlet.Message
	for _, trigger := range msgs {
		reply, err := a.answer(ctx, m, in, seat.Role, role.Charter, trigger)
		if err != nil {
			return out, err
		}
		if reply != nil {
			replies = append(replies, *reply)
		}
		out.Answered = append(out.Answered, trigger.EventID)
	}
	if err := a.store.AppendMessages(ctx, in.WorkKey, append(msgs, replies...)...); err != nil {
		return out, err
	}
	for _, r := range replies {
		if _, ok := a.org.Seat(r.To); !ok {
			continue // the sender is not a seat: the transcript is where the reply lives
		}
		if _, err := a.control.Deliver(ctx, r); err != nil {
			return out, fmt.Errorf("deliver reply to %s: %w", r.To, err)
		}
	}
	out.Replies = len(replies)
	// Failing open here would run the turn again on redelivery, so a ledger
	// write error fails the turn; its effects are keyed and do not repeat.
	if err := a.store.LedgerRecord(ctx, in.Handle, in.WorkKey, in.TurnID, out.Answered); err != nil {
		return out, err
	}
	a.log.Info("turn_finished", "seat", in.Handle, "turn", in.TurnID, "triggers", len(out.Answered), "replies", out.Replies)
	return out, nil
}

// skipFinished drops triggers the completion ledger already holds. An
// unreadable ledger runs them all (fail open).
func (a *Turns) skipFinished(ctx context.Context, handle string, msgs []crewlet.Message, out *crewlet.TurnOutput) []crewlet.Message {
	keys := make([]string, len(msgs))
	for i, m := range msgs {
		keys[i] = m.EventID
	}
	done, err := a.store.LedgerRecorded(ctx, handle, keys)
	if err != nil {
		a.log.Warn("ledger_unreadable", "seat", handle, "error", err)
		return msgs
	}
	var todo []crewlet.Message
	for _, m := range msgs {
		if done[m.EventID] {
			a.log.Info("turn_trigger_skipped", "seat", handle, "event_id", m.EventID, "reason", "completion ledger")
			out.Skipped = append(out.Skipped, m.EventID)
			continue
		}
		todo = append(todo, m)
	}
	return todo
}

// answer asks the model about one trigger and returns the reply to send, or
// nil when there is nothing to answer: replies are recorded, never answered,
// so two seats cannot reply to each other forever.
func (a *Turns) answer(ctx context.Context, m crewlet.Model, in crewlet.TurnInput, role, charter string, trigger crewlet.Message) (*crewlet.Message, error) {
	if trigger.Type == crewlet.MessageReply {
		return nil, nil
	}
	c, err := m.Complete(ctx, crewlet.Prompt{Seat: in.Handle, Role: role, Charter: charter, Trigger: trigger})
	if err != nil {
		return nil, fmt.Errorf("model: %w", err)
	}
	if c.Text == "" {
		return nil, nil
	}
	return &crewlet.Message{
		EventID:      "reply-" + crewlet.WorkKey([]string{in.TurnID, trigger.EventID}),
		Type:         crewlet.MessageReply,
		From:         in.Handle,
		To:           trigger.From,
		Conversation: trigger.Conversation,
		InReplyTo:    trigger.EventID,
		Body:         c.Text,
		SentAt:       time.Now().UTC(),
	}, nil
}
