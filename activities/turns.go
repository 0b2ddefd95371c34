package activities

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
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
// heartbeats, so a host lost mid-turn is noticed within the heartbeat timeout.
// Every step is keyed on the work, so a re-run after a crash repeats nothing
// that already landed: the transcript is keyed by event id, a reply's event id
// is derived from the turn and its trigger, memory rows are keyed on the work
// key, and the ledger is keyed by trigger. The seat ran PrepareTurn first, so
// the batch holds only triggers the ledger does not.
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
	seat, ok := a.org.Seat(in.Handle)
	role, hasRole := a.org.Roles[seat.Role]
	m := a.models[role.Profile]
	if !ok || !hasRole || m == nil {
		return out, crewlet.Errorf(crewlet.ENOTFOUND, "seat %s has no agent role with a profile in the org", in.Handle)
	}

	// The same chat message delivered twice in one batch is answered once.
	answeredChat := map[string]bool{}
	var transcript []crewlet.Message
	var ledger []string
	counterparties := map[string]bool{}
	for _, trigger := range msgs {
		ledger = append(ledger, crewlet.LedgerKeys(trigger)...)
		transcript = append(transcript, trigger)
		out.Answered = append(out.Answered, trigger.EventID)
		if trigger.ChatID != "" {
			if answeredChat[trigger.ChatID] {
				continue
			}
			answeredChat[trigger.ChatID] = true
		}
		counterparties[trigger.From] = true
		reply, err := a.answer(ctx, m, in, seat.Role, role.Charter, trigger)
		if err != nil {
			return out, err
		}
		if reply != nil {
			transcript = append(transcript, *reply)
			out.Replies++
		}
	}
	crashPoint("after_model", in.Handle)
	if err := a.store.AppendMessages(ctx, in.WorkKey, transcript...); err != nil {
		return out, err
	}
	for _, r := range transcript {
		if r.From != in.Handle {
			continue
		}
		if _, ok := a.org.Seat(r.To); !ok {
			continue // the sender is not a seat: the transcript is where the reply lives
		}
		if _, err := a.control.Deliver(ctx, r); err != nil {
			return out, fmt.Errorf("deliver reply to %s: %w", r.To, err)
		}
	}
	crashPoint("after_publish", in.Handle)
	a.remember(ctx, in, len(msgs), out.Replies, counterparties)
	// The ledger fails open: the effects above shipped, and failing the turn
	// could not un-ship them. An unrecorded trigger that comes back runs
	// again, and its keyed writes collapse.
	if err := a.store.LedgerRecord(ctx, in.Handle, in.WorkKey, in.TurnID, ledger); err != nil {
		a.log.Warn("ledger_unwritable", "seat", in.Handle, "turn", in.TurnID, "error", err)
	}
	crashPoint("after_ledger", in.Handle)
	a.log.Info("turn_finished", "seat", in.Handle, "turn", in.TurnID, "triggers", len(out.Answered), "replies", out.Replies)
	return out, nil
}

// remember writes the seat's memory of the turn: one episode and one count
// per counterparty, both keyed on the work key so a re-run remembers once.
// Memory only records, so a failure is logged and the turn goes on.
func (a *Turns) remember(ctx context.Context, in crewlet.TurnInput, triggers, replies int, counterparties map[string]bool) {
	names := make([]string, 0, len(counterparties))
	for who := range counterparties {
		names = append(names, who)
	}
	sort.Strings(names)
	summary := fmt.Sprintf("answered %d of %d triggers from %s", replies, triggers, strings.Join(names, ", "))
	if err := a.store.RecordEpisode(ctx, store.Episode{Seat: in.Handle, WorkKey: in.WorkKey, TurnID: in.TurnID, Summary: summary}); err != nil {
		a.log.Warn("memory_unrecorded", "seat", in.Handle, "what", "episode", "error", err)
	}
	for _, who := range names {
		if err := a.store.CountInteraction(ctx, in.Handle, who, in.WorkKey); err != nil {
			a.log.Warn("memory_unrecorded", "seat", in.Handle, "what", "counterparty", "error", err)
		}
	}
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
