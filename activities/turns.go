package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/budget"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/model"
	"github.com/crewlet/crewlet/internal/profiles"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/tracing"
	"github.com/crewlet/crewlet/internal/turnrules"
	"github.com/crewlet/crewlet/internal/wire"
)

// Turns runs the steps of a turn (docs/architecture.md, "A turn"): open it, one
// model call per round, one tool call per call asked for, and close it. Each
// step reads what the steps before it recorded in Postgres and records what it
// did under a key of the work, so a step run twice does its work once.
type Turns struct {
	host     *Host
	tickets  *tickets.Service
	org      *config.Config
	store    *store.Store
	mailbox  *mailbox.Mailbox
	delivery *delivery.Service
	// profiles picks the profile each turn runs on and keeps the health
	// of the credentials they spend.
	profiles *profiles.Service
	models   map[string]crewlet.ChatModel
	log      *slog.Logger
	// Now is the clock budgets are charged and checked on.
	Now func() time.Time
	// Metrics records each model call; nil records none.
	Metrics *metrics.Metrics
}

// chat is one call to the profile's model, recorded.
func (a *Turns) chat(ctx context.Context, profile string, req crewlet.ModelRequest) (crewlet.ModelResponse, error) {
	p := a.org.Profiles[profile]
	ctx, span := tracing.StartModelCall(ctx, p.Provider, p.Model, profile)
	began := time.Now()
	resp, err := a.models[profile].Chat(ctx, req)
	a.Metrics.ModelCall(profile, time.Since(began), err, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	tracing.EndModelCall(span, resp, err)
	return resp, err
}

// NewTurns builds the model of every profile in org once.
func NewTurns(host *Host, org *config.Config, st *store.Store, mb *mailbox.Mailbox, dl *delivery.Service, tickets *tickets.Service, profiles *profiles.Service, log *slog.Logger) (*Turns, error) {
	probe, err := model.OpenProbe(testhook.Current().ScriptedProbe, host.Incarnation)
	if err != nil {
		return nil, err
	}
	models := map[string]crewlet.ChatModel{}
	for name, p := range org.Profiles {
		m, err := model.New(name, p, probe)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", name, err)
		}
		models[name] = m
	}
	return &Turns{host: host, org: org, store: st, mailbox: mb, delivery: dl, tickets: tickets, profiles: profiles, models: models, log: log, Now: time.Now}, nil
}

// Keys of a turn's messages in Postgres, one per step that wrote them.
const (
	userKey = "user"
	noteKey = "note"
	// refusedKey is the note of a thread a round ended without an answer.
	refusedKey = "refused"
)

func roundKey(round int) string        { return fmt.Sprintf("r%d", round) }
func resultKey(round, call int) string { return fmt.Sprintf("r%dc%d", round, call) }

// outcomeUnknown is what the model is told of a write tool call that
// started and left no result: it may or may not have happened.
const outcomeUnknown = "Outcome unknown: this call was started but its result was lost (the call timed out or its node was lost mid-call). It may or may not have taken effect; check before retrying."

// BeginTurn opens a turn: it refuses a turn over a budget cap, records the
// triggers and starts one conversation per trigger that needs an answer.
// Replies are recorded, never answered, so two seats cannot reply to each
// other forever; a chat message delivered twice in one batch is answered once.
func (a *Turns) BeginTurn(ctx context.Context, in crewlet.BeginTurnInput) (out crewlet.BeginTurnOutput, err error) {
	_, role, err := a.role(in.Handle)
	if err != nil {
		return out, err
	}
	hold, err := a.budgetHold(ctx, in.Handle, role)
	if hold != nil {
		a.Metrics.BudgetHeld()
	}
	if err != nil || hold != nil {
		return crewlet.BeginTurnOutput{Hold: hold}, err
	}
	streamIDs := make([]string, len(in.Mail))
	for i, ref := range in.Mail {
		streamIDs[i] = ref.StreamID
	}
	msgs, err := a.mailbox.Get(ctx, in.Handle, streamIDs)
	if err != nil {
		return out, err
	}
	phases := map[string]crewlet.TicketPhase{}
	for _, m := range msgs {
		if m.Type != crewlet.MessageTicket {
			continue
		}
		ticket, err := a.store.Ticket(ctx, m.Ticket)
		switch {
		case err == nil:
			phases[m.Ticket] = ticket.Phase
		case crewlet.ErrorCode(err) != crewlet.ENOTFOUND:
			return out, err
		}
	}
	threads, closed := turnrules.Threads(msgs, phases)
	for _, i := range closed {
		a.log.Info("ticket_request_skipped", "seat", in.Handle, "ticket", msgs[i].Ticket, "phase", phases[msgs[i].Ticket])
	}
	catalog, err := a.store.SeatTools(ctx, in.Handle)
	if err != nil {
		return out, err
	}
	// The triggers take their place in the conversation's transcript now,
	// in batch order: a thread's context is everything the seat was sent
	// before its trigger, so the place must not move when the turn re-runs
	// (the insert is keyed on the event id).
	if err := a.store.AppendMessages(ctx, in.WorkKey, msgs...); err != nil {
		return out, err
	}
	row, err := a.store.OpenTurn(ctx, wire.TurnRow{
		Seat: in.Handle, WorkKey: in.WorkKey, TurnID: in.TurnID, Epoch: in.Epoch, Mail: msgs, Threads: threads,
		Tools: catalog, MaxRounds: role.MaxRounds, StartedAt: a.Now(),
	})
	if err != nil {
		return out, err
	}
	for thread := range row.Threads {
		trigger, key, err := threadOf(row, thread)
		if err != nil {
			return out, err
		}
		_, err = a.store.AppendTurnMessage(ctx, in.Handle, key, wire.TurnMessage{
			Key: userKey, Message: crewlet.ChatMessage{Role: "user", Content: turnrules.TriggerText(trigger)},
		})
		if err != nil {
			return out, err
		}
	}
	a.Metrics.TurnStarted()
	return crewlet.BeginTurnOutput{Threads: len(row.Threads), MaxRounds: row.MaxRounds, Reflect: role.Reflect}, nil
}

// threadOf returns a thread's trigger and the key its conversation is
// recorded under (crewlet.ThreadKey), so its recorded rounds and tool calls
// are not repeated when it comes back in another batch.
func threadOf(turn wire.TurnRow, thread int) (crewlet.Message, string, error) {
	if thread < 0 || thread >= len(turn.Threads) || turn.Threads[thread] >= len(turn.Mail) {
		return crewlet.Message{}, "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("turn %s has no thread %d", turn.TurnID, thread), crewlet.ErrorTypeBadThread, nil)
	}
	trigger := turn.Mail[turn.Threads[thread]]
	return trigger, crewlet.ThreadKey(trigger.EventID), nil
}

// budgetHold returns the budget cap that holds the seat's turns now, or nil.
func (a *Turns) budgetHold(ctx context.Context, handle string, role config.Role) (*crewlet.BudgetHold, error) {
	usage, err := a.store.Usage(ctx, handle, role.Budget.Caps(), a.org.Company.Budget.Caps(), a.Now(), a.org.Location())
	if err != nil {
		return nil, err
	}
	hold := budget.Check(usage)
	if hold != nil {
		a.log.Info("turn_held", "seat", handle, "scope", hold.Scope, "window", hold.Window, "cap", hold.Cap, "used", hold.Used, "resets_at", hold.ResetsAt)
	}
	return hold, nil
}

// CheckBudget tells a held seat whether a budget cap still holds its turns,
// without reading its mail: a re-read would spend a delivery of every held
// trigger each time the seat checks.
func (a *Turns) CheckBudget(ctx context.Context, in crewlet.CheckBudgetInput) (*crewlet.BudgetHold, error) {
	_, role, err := a.role(in.Handle)
	if err != nil {
		return nil, err
	}
	return a.budgetHold(ctx, in.Handle, role)
}

// systemPrompt is the exact system prompt of a seat's turns.
func (a *Turns) systemPrompt(handle, roleName string, role config.Role) string {
	return turnrules.SystemPrompt(handle, roleName, role.Charter, a.org.Company.Name)
}

// ModelRound makes one model call of a turn: the conversation as it stands
// in, the model's answer recorded. A round that already has a recorded
// answer (a re-run) returns it without asking the model again.
func (a *Turns) ModelRound(ctx context.Context, in crewlet.ModelRoundInput) (out crewlet.ModelRoundOutput, err error) {
	turn, err := a.store.Turn(ctx, in.Handle, in.WorkKey)
	if err != nil {
		return out, err
	}
	catalog, err := decodeCatalog(turn.Tools)
	if err != nil {
		return out, err
	}
	trigger, key, err := threadOf(turn, in.Thread)
	if err != nil {
		return out, err
	}
	msgs, err := a.store.TurnMessages(ctx, in.Handle, key, 0)
	if err != nil {
		return out, err
	}
	if m, ok := findKey(msgs, roundKey(in.Round)); ok {
		return roundOutput(m.Message, catalog, 0), nil
	}
	if m, ok := findKey(msgs, refusedKey); ok {
		return crewlet.ModelRoundOutput{Failed: m.Message.Content}, nil
	}
	if msgs, err = a.settleCalls(ctx, in.Handle, key, in.Round-1, msgs, catalog); err != nil {
		return out, err
	}
	seat, role, err := a.role(in.Handle)
	if err != nil {
		return out, err
	}
	name, err := a.roundProfile(ctx, in.Handle, in.TurnID, in.Epoch, in.Profile, role)
	if err != nil {
		return out, err
	}
	profile := a.org.Profiles[name]
	system := a.systemPrompt(in.Handle, seat.Role, role)
	stop := make(chan struct{})
	defer close(stop)
	go heartbeatWhile(ctx, a.host.Beat, stop)
	plan, err := a.assemble(ctx, in.Handle, name, in.TurnID, system, catalog, trigger, key, msgs)
	if err != nil {
		return out, err
	}
	if plan.Oversize {
		note := fmt.Sprintf("Your message was not answered: at about %d tokens it does not fit %s's context budget of %d tokens (profile %s, context_tokens %d less room for the answer). Send it in smaller parts, or point to where the text lives.",
			plan.Tokens, in.Handle, profile.InputBudget(), name, profile.ContextTokens)
		return a.refuse(ctx, in.Handle, key, note)
	}
	req := crewlet.ModelRequest{
		Seat: in.Handle, Role: seat.Role, Trigger: &trigger, System: system, Messages: plan.Messages,
		Tools: catalog, MaxTokens: profile.MaxTokens,
	}
	resp, err := a.chat(ctx, name, req)
	if err != nil {
		return out, a.modelFailure(ctx, name, in.TurnID, err)
	}
	usage := resp.Usage
	if resp.Text == "" && len(resp.ToolCalls) == 0 {
		// Said once, so the model can put it right; said nothing twice, and
		// the sender hears that instead of silence.
		a.log.Warn("model_answer_empty", "seat", in.Handle, "work_key", key, "round", in.Round)
		req.Messages = append(append([]crewlet.ChatMessage(nil), req.Messages...), crewlet.ChatMessage{Role: "user", Content: emptyAnswerNudge})
		if resp, err = a.chat(ctx, name, req); err != nil {
			return out, a.modelFailure(ctx, name, in.TurnID, err)
		}
		usage.InputTokens += resp.Usage.InputTokens
		usage.OutputTokens += resp.Usage.OutputTokens
	}
	a.profiles.Answered(ctx, name, resp.Model)
	if _, err := a.recordRound(ctx, wire.RoundRow{Seat: in.Handle, WorkKey: key, Round: in.Round, Profile: name,
		InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens, ContextBytes: plan.Bytes, AnsweredModel: resp.Model}, system); err != nil {
		return out, err
	}
	if resp.Text == "" && len(resp.ToolCalls) == 0 {
		return a.refuse(ctx, in.Handle, key, emptyAnswerNote)
	}
	// What a model says is stored and mailed as it is, but for what neither
	// Postgres nor a mailbox can hold (NUL, invalid UTF-8).
	answer := crewlet.ChatMessage{Role: "assistant", Content: crewlet.Clean(resp.Text), ToolCalls: resp.ToolCalls}
	for i := range answer.ToolCalls {
		c := &answer.ToolCalls[i]
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%d_%d", in.Round, i)
		}
		c.ID, c.Name, c.Args = crewlet.Clean(c.ID), crewlet.Clean(c.Name), cleanJSON(c.Args)
	}
	stored, err := a.store.AppendTurnMessage(ctx, in.Handle, key, wire.TurnMessage{
		Key: roundKey(in.Round), Round: in.Round, Message: answer,
	})
	if err != nil {
		return out, err
	}
	return roundOutput(stored.Message, catalog, usage.InputTokens+usage.OutputTokens), nil
}

// cleanJSON makes a model's tool arguments storable: Postgres jsonb holds no
// \u0000, and no invalid UTF-8.
func cleanJSON(raw json.RawMessage) json.RawMessage {
	if !bytes.Contains(raw, []byte(`\u0000`)) && utf8.Valid(raw) {
		return raw
	}
	return json.RawMessage(bytes.ReplaceAll(bytes.ToValidUTF8(raw, []byte("\uFFFD")), []byte(`\u0000`), []byte(`\ufffd`)))
}

// What the model and the sender are told when the model answers nothing.
const (
	emptyAnswerNudge = "Your last answer was empty: it had no text and no tool call. Answer the message above, or call a tool."
	emptyAnswerNote  = "No answer was produced: the model returned an empty answer twice, the second time after being asked again. Try again, or rephrase the message."
)

// refuse ends a thread without an answer: the note is recorded as the
// thread's last word (so the sender gets it) and the round reports the
// thread failed.
func (a *Turns) refuse(ctx context.Context, handle, key, note string) (crewlet.ModelRoundOutput, error) {
	stored, err := a.store.AppendTurnMessage(ctx, handle, key, wire.TurnMessage{
		Key: refusedKey, Message: crewlet.ChatMessage{Role: "note", Content: note},
	})
	if err != nil {
		return crewlet.ModelRoundOutput{}, err
	}
	a.log.Warn("thread_refused", "seat", handle, "work_key", key, "note", stored.Message.Content)
	return crewlet.ModelRoundOutput{Failed: stored.Message.Content}, nil
}

// recordRound records a model call of a seat, with the receipt of its
// system prompt, and charges its tokens once.
func (a *Turns) recordRound(ctx context.Context, r wire.RoundRow, system string) (bool, error) {
	sum := sha256.Sum256([]byte(system))
	r.SystemSHA256, r.SystemBytes, r.RecordedAt = hex.EncodeToString(sum[:]), len(system), a.Now()
	return a.store.RecordRound(ctx, r, a.org.Location())
}

// assemble reads a thread's conversation from Postgres and lays out the
// round's request with crewlet.AssembleContext. When the conversation has
// outgrown the profile's context budget, it first makes (or finds) the
// compaction summary of its oldest exchanges.
func (a *Turns) assemble(ctx context.Context, handle, profileName, turnID, system string, catalog []crewlet.ToolSpec, trigger crewlet.Message, key string, thread []wire.TurnMessage) (crewlet.ContextPlan, error) {
	started := time.Now()
	tc, err := a.store.ThreadContext(ctx, handle, trigger.Conversation, trigger.EventID, turnrules.TriggerText)
	if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
		// A turn begun before triggers were recorded at BeginTurn: record
		// it now, which gives it its place.
		// COMPAT(begin-turn-triggers)
		if err = a.store.AppendMessages(ctx, crewlet.ThreadKey(trigger.EventID), trigger); err == nil {
			tc, err = a.store.ThreadContext(ctx, handle, trigger.Conversation, trigger.EventID, turnrules.TriggerText)
		}
	}
	if err != nil {
		return crewlet.ContextPlan{}, err
	}
	keys := []string{key}
	for _, x := range tc.Earlier {
		keys = append(keys, crewlet.ThreadKey(x.MessageID))
	}
	ratio, err := a.store.TokensPerByte(ctx, handle, keys)
	if err != nil {
		return crewlet.ContextPlan{}, err
	}
	in := crewlet.ContextInput{
		System: system, Tools: catalog, Summary: tc.Summary, Earlier: tc.Earlier,
		Budget: a.org.Profiles[profileName].InputBudget(), TokensPerByte: ratio, MayCompact: true,
	}
	for _, m := range thread {
		in.Current = append(in.Current, m.Message)
	}
	plan := crewlet.AssembleContext(in)
	if plan.Compact > 0 {
		covered := in.Earlier[:plan.Compact]
		summary, err := a.compact(ctx, handle, profileName, turnID, trigger.Conversation, in.Summary, covered)
		if err != nil {
			return crewlet.ContextPlan{}, err
		}
		in.Earlier, in.MayCompact = in.Earlier[plan.Compact:], false
		if summary != nil {
			in.Summary = summary
		}
		plan = crewlet.AssembleContext(in)
	}
	a.log.Debug("context_assembled", "seat", handle, "work_key", key, "exchanges", len(in.Earlier), "summary", in.Summary != nil,
		"tokens", plan.Tokens, "budget", in.Budget, "clipped", plan.Clipped, "took", time.Since(started))
	return plan, nil
}

// compact returns the compaction summary of prev and the exchanges covered:
// the one already stored if a round made it before (this one re-run, or an
// earlier turn), else one model call of the profile's compact_with profile
// (the turn's own profile while that one is quarantined, cooling off or
// switched off), stored once. A summarizer that refuses for good leaves the
// exchanges out with a note saying so, since a turn must not fail because a
// conversation grew long; nil means that. A usage limit is not for good: it
// quarantines the summarizer's credential and the round is tried again.
func (a *Turns) compact(ctx context.Context, handle, profileName, turnID, conversation string, prev *crewlet.ConversationSummary, covered []crewlet.Exchange) (*crewlet.ConversationSummary, error) {
	last := covered[len(covered)-1]
	if x, err := a.store.SummaryThrough(ctx, handle, conversation, last.MessageID); err == nil {
		return &x.ConversationSummary, nil
	} else if crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		return nil, err
	}
	summarizer := profileName
	if w := a.org.Profiles[profileName].CompactWith; w != "" {
		if reason, err := a.profiles.Usable(ctx, w); err != nil {
			return nil, err
		} else if reason == "" {
			summarizer = w
		}
	}
	n := len(covered)
	if prev != nil {
		n += prev.Covered
	}
	req := crewlet.ModelRequest{
		Seat: handle, Purpose: crewlet.PurposeCompact, System: crewlet.CompactionSystem,
		Messages:  []crewlet.ChatMessage{{Role: "user", Content: crewlet.CompactionPrompt(prev, covered, int(float64(a.org.Profiles[summarizer].InputBudget())/crewlet.DefaultTokensPerByte/2))}},
		MaxTokens: a.org.Profiles[summarizer].MaxTokens,
	}
	a.log.Info("conversation_compacting", "seat", handle, "conversation", conversation, "through", last.MessageID, "exchanges", len(covered), "profile", summarizer)
	resp, err := a.chat(ctx, summarizer, req)
	text := strings.TrimSpace(resp.Text)
	if err != nil || text == "" {
		var pe *crewlet.ProviderError
		if err != nil && (!errors.As(err, &pe) || pe.Retryable() || a.exhausted(summarizer, pe)) {
			return nil, a.modelFailure(ctx, summarizer, turnID, err)
		}
		a.log.Warn("conversation_compaction_failed", "seat", handle, "conversation", conversation, "profile", summarizer, "error", err)
		text = fmt.Sprintf("(%d earlier exchanges are left out: they could not be summarized.)", n)
	}
	stored, err := a.store.SaveSummary(ctx, wire.Summary{
		ConversationSummary: crewlet.ConversationSummary{ThroughID: last.MessageID, ThroughSeq: last.Seq, Covered: n, Text: text},
		Seat:                handle, Conversation: conversation, Profile: summarizer,
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
	})
	if err != nil {
		return nil, err
	}
	// Charged once, under the summary's own key.
	a.profiles.Answered(ctx, summarizer, resp.Model)
	if _, err := a.recordRound(ctx, wire.RoundRow{Seat: handle, WorkKey: "compact:" + crewlet.WorkKey([]string{conversation, last.MessageID}),
		Round: 1, Profile: summarizer, InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
		AnsweredModel: resp.Model}, crewlet.CompactionSystem); err != nil {
		a.log.Warn("usage_unrecorded", "seat", handle, "what", "compaction", "error", err)
	}
	crashPoint(testhook.AfterCompaction, handle)
	return &stored.ConversationSummary, nil
}

// settleCalls gives every call of the thread's round that has no result
// one, so the model hears what became of it: a read that failed, or a write
// whose outcome is unknown.
func (a *Turns) settleCalls(ctx context.Context, handle, key string, round int, msgs []wire.TurnMessage, catalog []crewlet.ToolSpec) ([]wire.TurnMessage, error) {
	last, ok := findKey(msgs, roundKey(round))
	if !ok {
		return msgs, nil
	}
	for i, call := range last.Message.ToolCalls {
		if _, ok := findKey(msgs, resultKey(round, i)); ok {
			continue
		}
		text := outcomeUnknown
		if readOnly(catalog, call.Name) {
			text = "This read-only call failed after retries; you may try it again."
		}
		m, err := a.store.AppendTurnMessage(ctx, handle, key, wire.TurnMessage{
			Key: resultKey(round, i), Round: round,
			Message: crewlet.ChatMessage{Role: "tool", ToolCallID: call.ID, Content: text, IsError: true},
		})
		if err != nil {
			return nil, err
		}
		msgs = append(msgs, m)
	}
	return msgs, nil
}

func roundOutput(m crewlet.ChatMessage, catalog []crewlet.ToolSpec, tokens int64) crewlet.ModelRoundOutput {
	out := crewlet.ModelRoundOutput{Tokens: tokens}
	for i, c := range m.ToolCalls {
		out.Calls = append(out.Calls, crewlet.ToolCallRef{Call: i, Name: c.Name, ReadOnly: readOnly(catalog, c.Name)})
	}
	return out
}

func readOnly(catalog []crewlet.ToolSpec, name string) bool {
	for _, t := range catalog {
		if t.Name == name {
			return t.ReadOnly
		}
	}
	return false
}

func findKey(msgs []wire.TurnMessage, key string) (wire.TurnMessage, bool) {
	for _, m := range msgs {
		if m.Key == key {
			return m, true
		}
	}
	return wire.TurnMessage{}, false
}

func decodeCatalog(raw json.RawMessage) ([]crewlet.ToolSpec, error) {
	if len(raw) == 0 {
		return firstparty.Specs(), nil
	}
	var catalog []crewlet.ToolSpec
	if err := json.Unmarshal(raw, &catalog); err != nil {
		return nil, fmt.Errorf("decode tool catalog: %w", err)
	}
	return catalog, nil
}

// modelFailure turns a provider's classified failure into what Temporal's
// retry policy acts on, after telling the profile service what it says of
// the credential. A usage limit quarantines the credential and fails the
// round over to another profile of the turn's pool (ProfileUnavailable). A
// server error counts toward cooling the credential off and retries, as a
// rate limit does, after the provider's retry-after when it gave one; the
// rest fail the round.
func (a *Turns) modelFailure(ctx context.Context, profile, turnID string, err error) error {
	var pe *crewlet.ProviderError
	if !errors.As(err, &pe) {
		return fmt.Errorf("model: %w", err)
	}
	switch {
	case a.exhausted(profile, pe):
		if rerr := a.profiles.Exhausted(ctx, profile, pe.Message); rerr != nil {
			a.log.Warn("credential_unreported", "profile", profile, "error", rerr)
		}
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("profile %s: usage limit reached: %s", profile, pe.Message), crewlet.ErrorTypeProfileUnavailable, nil)
	case pe.Kind == crewlet.ProviderServerError:
		if rerr := a.profiles.Failed(ctx, profile, turnID, pe.Message); rerr != nil {
			a.log.Warn("credential_unreported", "profile", profile, "error", rerr)
		}
	}
	if pe.Retryable() {
		return temporal.NewApplicationErrorWithOptions(pe.Error(), pe.Kind, temporal.ApplicationErrorOptions{NextRetryDelay: pe.RetryAfter})
	}
	if pe.Kind == crewlet.ProviderBadRequest {
		return temporal.NewNonRetryableApplicationError(pe.Error(), crewlet.ErrorTypePermanent, nil)
	}
	return temporal.NewNonRetryableApplicationError(pe.Error(), crewlet.ErrorTypeProvider, nil)
}

// exhausted reports whether a provider's failure says the profile's
// account reached its usage limit: the provider's own quota error, or a
// message matching the profile's exhausted_pattern.
func (a *Turns) exhausted(profile string, pe *crewlet.ProviderError) bool {
	return pe.Kind == crewlet.ProviderExhausted || a.org.Profiles[profile].Exhausted(pe.Message)
}

// roundProfile is the profile a round runs on. A turn holding a slot
// (requested) renews it and runs on that profile while it can still be
// used; once its credential is quarantined or cooling off, its model
// switched off, or its slot lapsed, the round fails over. A turn begun
// before profile pools asked for none and runs on its role's first profile
// while that one can be used; when it cannot, the round fails as
// ProfileUnavailable, which such a turn cannot fail over from: it fails,
// and its triggers come back in a turn that picks from the pool.
// COMPAT(profile-pools@1): the requested == "" branch.
func (a *Turns) roundProfile(ctx context.Context, handle, turnID string, epoch int64, requested string, role config.Role) (string, error) {
	if requested == "" {
		return role.Pool()[0], a.usable(ctx, role.Pool()[0])
	}
	if _, ok := a.models[requested]; !ok {
		return "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("profile %s is no longer in the org", requested), crewlet.ErrorTypeProfileUnavailable, nil)
	}
	now := a.profiles.Now()
	renewed, err := a.store.RenewProfileSlot(ctx, turnID, epoch, now, now.Add(profiles.SlotLease))
	if err != nil {
		return "", err
	}
	if !renewed {
		return "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the turn's slot of profile %s lapsed", requested), crewlet.ErrorTypeProfileUnavailable, nil)
	}
	return requested, a.usable(ctx, requested)
}

// usable fails as ProfileUnavailable when a profile can no longer be used:
// its credential is quarantined or cooling off, or its model switched off.
func (a *Turns) usable(ctx context.Context, profile string) error {
	reason, err := a.profiles.Usable(ctx, profile)
	if err != nil || reason == "" {
		return err
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("profile %s is %s", profile, strings.ReplaceAll(reason, "_", " ")), crewlet.ErrorTypeProfileUnavailable, nil)
}

// AcquireProfile picks the profile a turn runs on and takes a slot of it
// (docs/architecture.md, "Profile pools"). A turn keeps the profile it ran on
// while that one can take it; else it fails over to another of its pool; with
// none able to, the output says why and the turn waits. Fenced like every step
// of the turn.
func (a *Turns) AcquireProfile(ctx context.Context, in crewlet.AcquireProfileInput) (out crewlet.AcquireProfileOutput, err error) {
	seat, _, err := a.role(in.Handle)
	if err != nil {
		return out, err
	}
	turn, err := a.store.Turn(ctx, in.Handle, in.WorkKey)
	if err != nil {
		return out, err
	}
	out.Profile, out.Hold, err = a.profiles.Acquire(ctx, profiles.AcquireRequest{
		Seat: in.Handle, Role: seat.Role, TurnID: in.TurnID, WorkKey: in.WorkKey, Epoch: in.Epoch, Prefer: turn.Profile,
	})
	if out.Hold != nil {
		a.log.Info("turn_held_for_profile", "seat", in.Handle, "turn", in.TurnID, "pool", seat.Role, "profiles", len(out.Hold.Profiles), "until", out.Hold.Until)
	}
	return out, err
}

// ReleaseProfile gives back a turn run's profile slot and wakes the oldest
// turn waiting for that profile. Not fenced: a slot is its run's own.
func (a *Turns) ReleaseProfile(ctx context.Context, in crewlet.ReleaseProfileInput) (err error) {
	return a.profiles.Release(ctx, in.TurnID, in.Epoch)
}

// FinishTurn closes a turn: every conversation's answer (or the turn's note
// where it has none) is recorded in its thread and sent to a sender that is
// a seat; memory and the completion ledger are written last.
func (a *Turns) FinishTurn(ctx context.Context, in crewlet.FinishTurnInput) (out crewlet.FinishTurnOutput, err error) {
	turn, err := a.store.Turn(ctx, in.Handle, in.WorkKey)
	if err != nil {
		return out, err
	}
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
		msgs, err := a.store.TurnMessages(ctx, in.Handle, key, 0)
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
		if _, ok := a.org.Seat(r.To); !ok {
			continue // the sender is not a seat: the transcript is where the reply lives
		}
		if _, err := a.delivery.Deliver(ctx, r); err != nil {
			return out, fmt.Errorf("deliver reply to %s: %w", r.To, err)
		}
	}
	if err := a.closeTickets(ctx, turn, replies, answered); err != nil {
		return out, err
	}
	// The turn waits on nothing any more: what still comes of a ticket it
	// waited on reaches the seat by a notice, and a question it left
	// unanswered no longer holds its ticket asking.
	if err := a.store.ForgetWaiter(ctx, in.TurnID); err != nil {
		return out, err
	}
	crashPoint("after_publish", in.Handle)
	a.remember(ctx, in, closing)
	first, err := a.store.FinishTurn(ctx, in.Handle, in.WorkKey, string(in.Status), in.Note, in.StoppedBy, in.Rounds)
	if err != nil {
		a.log.Warn("turn_unrecorded", "seat", in.Handle, "turn", in.TurnID, "error", err)
	}
	if first && in.Status == crewlet.TurnFailed {
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
	// The ledger fails open: the effects above shipped, and failing the turn
	// could not un-ship them. An unrecorded trigger that comes back runs
	// again, and its keyed writes collapse.
	if err := a.store.LedgerRecord(ctx, in.Handle, in.WorkKey, in.TurnID, closing.Ledger); err != nil {
		a.log.Warn("ledger_unwritable", "seat", in.Handle, "turn", in.TurnID, "error", err)
	}
	crashPoint(testhook.AfterLedger, in.Handle)
	a.Metrics.TurnFinished(string(in.Status))
	a.log.Info("turn_finished", "seat", in.Handle, "turn", in.TurnID, "status", in.Status, "rounds", in.Rounds,
		"triggers", len(out.Answered), "replies", out.Replies)
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
	seat, role, err := a.role(in.Handle)
	if err != nil {
		return err
	}
	name, err := a.roundProfile(ctx, in.Handle, in.TurnID, in.Epoch, in.Profile, role)
	if err != nil {
		return err
	}
	profile := a.org.Profiles[name]
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
	})
	if err != nil {
		return a.modelFailure(ctx, name, in.TurnID, err)
	}
	a.profiles.Answered(ctx, name, resp.Model)
	if _, err := a.recordRound(ctx, wire.RoundRow{Seat: in.Handle, WorkKey: "reflect:" + in.WorkKey, Round: 1, Profile: name,
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, ContextBytes: plan.Bytes, AnsweredModel: resp.Model}, ctxIn.System); err != nil {
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
		var err error
		if answered[i] {
			_, _, err = a.tickets.Settle(ctx, trigger.Ticket, text)
		} else {
			_, _, err = a.tickets.End(ctx, trigger.Ticket, crewlet.TicketFailed, "the turn serving it ended without an answer: "+text)
		}
		if err != nil {
			return fmt.Errorf("close ticket %s: %w", trigger.Ticket, err)
		}
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

// remember writes the seat's memory of the turn: one episode saying what
// was asked and answered, and one count per counterparty, both keyed on the
// work key so a re-run remembers once. Memory only records, so a failure is
// logged and the turn goes on.
func (a *Turns) remember(ctx context.Context, in crewlet.FinishTurnInput, closing turnrules.Closing) {
	if err := a.store.RecordEpisode(ctx, store.Episode{Seat: in.Handle, WorkKey: in.WorkKey, TurnID: in.TurnID, Summary: closing.Episode}); err != nil {
		a.log.Warn("memory_unrecorded", "seat", in.Handle, "what", "episode", "error", err)
	}
	for _, who := range closing.Counterparties {
		if err := a.store.CountInteraction(ctx, in.Handle, who, in.WorkKey); err != nil {
			a.log.Warn("memory_unrecorded", "seat", in.Handle, "what", "counterparty", "error", err)
		}
	}
}

// role returns the seat and its agent role.
func (a *Turns) role(handle string) (config.Seat, config.Role, error) {
	seat, ok := a.org.Seat(handle)
	role, hasRole := a.org.Roles[seat.Role]
	if !ok || !hasRole || len(role.Pool()) == 0 {
		return seat, role, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("seat %s has no agent role with a profile in the org", handle), crewlet.ErrorTypeNoRole, nil)
	}
	return seat, role, nil
}
