// A turn's model round: the context laid out from Postgres, compaction, the
// call, its answer recorded, and what a provider's failure means for the turn.

package activities

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/prices"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/turnrules"
	"github.com/crewlet/crewlet/internal/wire"
)

// ModelRound makes one model call of a turn: the conversation as it stands
// in, the model's answer recorded. A round that already has a recorded
// answer (a re-run) returns it without asking the model again.
func (a *Turns) ModelRound(ctx context.Context, in crewlet.ModelRoundInput) (out crewlet.ModelRoundOutput, err error) {
	var keys []string
	if in.ThreadKey != "" {
		keys = []string{in.ThreadKey}
	}
	read, err := a.store.TenureThreads(ctx, in.Tenure, in.WorkKey, keys, true)
	if err != nil {
		return out, err
	}
	turn := read.Turn
	catalog, err := decodeCatalog(turn.Tools)
	if err != nil {
		return out, err
	}
	trigger, key, err := threadOf(turn, in.Thread)
	if err != nil {
		return out, err
	}
	msgs, rounds, err := a.thread(ctx, read, in.Handle, key, true)
	if err != nil {
		return out, err
	}
	defer a.flushEvents()
	if m, ok := findKey(msgs, roundKey(in.Round)); ok {
		// Told again in case the node that recorded it was lost before
		// telling it; written once.
		a.emitOutput(in, trigger.Conversation, m.Message)
		return roundOutput(m.Message, catalog, 0), nil
	}
	if m, ok := findKey(msgs, refusedKey); ok {
		return crewlet.ModelRoundOutput{Failed: m.Message.Content}, nil
	}
	if m, ok := findKey(msgs, endedKey); ok {
		return ticketEndedOutput(trigger, m.Message.Content), nil
	}
	if ended, err := a.servedTicketEnded(ctx, trigger); err != nil || ended != "" {
		if err != nil {
			return out, err
		}
		stored, err := a.store.AppendTurnMessage(ctx, in.Handle, key, wire.TurnMessage{Key: endedKey, Message: crewlet.ChatMessage{Role: "note", Content: ended}})
		if err != nil {
			return out, err
		}
		a.log.Info("thread_ticket_ended", "seat", in.Handle, "work_key", key, "ticket", trigger.Ticket, "round", in.Round)
		return ticketEndedOutput(trigger, stored.Message.Content), nil
	}
	if msgs, err = a.settleCalls(ctx, in.Handle, key, in.Round-1, msgs, catalog); err != nil {
		return out, err
	}
	seat, role, err := a.role(ctx, in.Handle)
	if err != nil {
		return out, err
	}
	name, err := a.roundProfile(ctx, in.Handle, in.TurnID, in.Epoch, in.Profile, role)
	if err != nil {
		return out, err
	}
	profile := a.org.Now().Profiles[name]
	deltas := a.roundStarted(ctx, in, trigger.Conversation, name, rounds)
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
	resp, err := a.chat(ctx, name, req, deltas.Add)
	deltas.Flush()
	if err != nil {
		return out, a.modelFailure(ctx, name, in.TurnID, err)
	}
	usage := resp.Usage
	if resp.Text == "" && len(resp.ToolCalls) == 0 {
		// Said once, so the model can put it right; said nothing twice, and
		// the sender hears that instead of silence.
		a.log.Warn("model_answer_empty", "seat", in.Handle, "work_key", key, "round", in.Round)
		req.Messages = append(append([]crewlet.ChatMessage(nil), req.Messages...), crewlet.ChatMessage{Role: "user", Content: emptyAnswerNudge})
		resp, err = a.chat(ctx, name, req, deltas.Add)
		deltas.Flush()
		if err != nil {
			return out, a.modelFailure(ctx, name, in.TurnID, err)
		}
		usage.InputTokens += resp.Usage.InputTokens
		usage.OutputTokens += resp.Usage.OutputTokens
		usage.CachedTokens += resp.Usage.CachedTokens
	}
	a.profiles.Answered(ctx, name, resp.Model)
	empty := resp.Text == "" && len(resp.ToolCalls) == 0
	answer := refusal(emptyAnswerNote)
	if !empty {
		// What a model says is stored and mailed as it is, but for what
		// neither Postgres nor a mailbox can hold (NUL, invalid UTF-8).
		m := crewlet.ChatMessage{Role: "assistant", Content: crewlet.Clean(resp.Text), ToolCalls: resp.ToolCalls}
		for i := range m.ToolCalls {
			c := &m.ToolCalls[i]
			if c.ID == "" {
				c.ID = fmt.Sprintf("call_%d_%d", in.Round, i)
			}
			c.ID, c.Name, c.Args = crewlet.Clean(c.ID), crewlet.Clean(c.Name), cleanJSON(c.Args)
		}
		answer = wire.TurnMessage{Key: roundKey(in.Round), Round: in.Round, Message: m}
	}
	stored, err := a.recordRound(ctx, wire.RoundRow{Seat: in.Handle, Role: seat.Role, WorkKey: key, Round: in.Round, Profile: name,
		InputTokens: usage.InputTokens, OutputTokens: usage.OutputTokens, CachedTokens: usage.CachedTokens, ContextBytes: plan.Bytes, AnsweredModel: resp.Model}, system, &answer)
	if err != nil {
		return out, err
	}
	if empty {
		return a.refused(in.Handle, key, stored), nil
	}
	a.emitOutput(in, trigger.Conversation, stored.Message)
	return roundOutput(stored.Message, catalog, usage.InputTokens+usage.OutputTokens), nil
}

// thread is the thread recorded under key as read with its turn, and with
// rounds its recorded rounds; a step not given the thread's key (its turn
// began on an older build) reads them now.
func (a *Turns) thread(ctx context.Context, read store.TenureRead, handle, key string, rounds bool) ([]wire.TurnMessage, []wire.RoundRow, error) {
	if msgs, ok := read.Messages[key]; ok {
		return msgs, read.Rounds[key], nil
	}
	msgs, err := a.store.TurnMessages(ctx, handle, key, 0)
	if err != nil || !rounds {
		return msgs, nil, err
	}
	// Its rounds only tell the tokens so far: not worth failing over.
	recorded, _ := a.store.TurnRounds(ctx, handle, key)
	return msgs, recorded, nil
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
	stored, err := a.store.AppendTurnMessage(ctx, handle, key, refusal(note))
	if err != nil {
		return crewlet.ModelRoundOutput{}, err
	}
	return a.refused(handle, key, stored), nil
}

// servedTicketEnded says why a thread that serves a ticket stops at this
// round boundary: the ticket was cancelled (or expired, or failed)
// meanwhile, so nobody takes its reply and the work would be wasted. ""
// when the thread serves no ticket, or one still open.
func (a *Turns) servedTicketEnded(ctx context.Context, trigger crewlet.Message) (string, error) {
	if trigger.Type != crewlet.MessageTicket || trigger.Ticket == "" {
		return "", nil
	}
	t, err := a.store.Ticket(ctx, trigger.Ticket)
	switch {
	case crewlet.ErrorCode(err) == crewlet.ENOTFOUND:
		return "", nil
	case err != nil || t.Phase.Open():
		return "", err
	}
	note := fmt.Sprintf("the ticket it served is %s", t.Phase)
	if t.Reason != "" {
		note += " (" + t.Reason + ")"
	}
	return note + ", so nobody takes its reply", nil
}

// ticketEndedOutput is the round's answer for a thread stopped because the
// ticket that triggered it ended.
func ticketEndedOutput(trigger crewlet.Message, note string) crewlet.ModelRoundOutput {
	return crewlet.ModelRoundOutput{Failed: note, Ended: &crewlet.StopTurnRequest{By: trigger.Ticket, Reason: note}}
}

// refusal is the note that refuses a thread.
func refusal(note string) wire.TurnMessage {
	return wire.TurnMessage{Key: refusedKey, Message: crewlet.ChatMessage{Role: "note", Content: note}}
}

// refused is the round's answer once its thread's refusal is stored.
func (a *Turns) refused(handle, key string, stored wire.TurnMessage) crewlet.ModelRoundOutput {
	a.log.Warn("thread_refused", "seat", handle, "work_key", key, "note", stored.Message.Content)
	return crewlet.ModelRoundOutput{Failed: stored.Message.Content}
}

// recordRound records a model call of a seat, with the receipt of its
// system prompt, and charges its tokens once; answer, if any, is appended
// to the round's thread in the same step and returned as stored.
func (a *Turns) recordRound(ctx context.Context, r wire.RoundRow, system string, answer *wire.TurnMessage) (wire.TurnMessage, error) {
	sum := sha256.Sum256([]byte(system))
	r.SystemSHA256, r.SystemBytes, r.RecordedAt = hex.EncodeToString(sum[:]), len(system), a.Now()
	org := a.org.Now()
	a.price(org, &r)
	charged, stored, err := a.store.RecordRoundAnswer(ctx, r, org.Location(), answer)
	if err == nil && charged {
		seat := r.Seat
		if !org.Metrics.SeatLabels {
			seat = ""
		}
		a.metrics.Spend(seat, r.Role, r.Model, r.NanoUSD, r.Priced, r.InputTokens+r.OutputTokens)
	}
	return stored, err
}

// price fills in the round's money receipt at the org's prices now: the
// amount is frozen in the row, so a later price never reprices it. A
// table that does not read (it is embedded, so a broken build) leaves the
// round unpriced rather than failing the turn.
func (a *Turns) price(org *config.Config, r *wire.RoundRow) {
	p := org.Profiles[r.Profile]
	r.Model = p.PricedModel(r.AnsweredModel)
	if r.Role == "" {
		// A compaction's caller knows the seat only by handle.
		if seat, ok := org.Seat(r.Seat); ok {
			r.Role = seat.Role
		}
	}
	table, err := org.PriceTable()
	if err != nil {
		a.log.Error("price_table_unreadable", "error", err)
		return
	}
	q := table.Quote(r.Model, p.BaseURL, r.RecordedAt, prices.Usage{Input: r.InputTokens, Output: r.OutputTokens, Cached: r.CachedTokens})
	r.Priced, r.PriceVersion, r.NanoUSD = q.Priced, q.Version, q.NanoUSD
}

// assemble reads a thread's conversation from Postgres and lays out the
// round's request with crewlet.AssembleContext. When the conversation has
// outgrown the profile's context budget, it first makes (or finds) the
// compaction summary of its oldest exchanges.
func (a *Turns) assemble(ctx context.Context, handle, profileName, turnID, system string, catalog []crewlet.ToolSpec, trigger crewlet.Message, key string, thread []wire.TurnMessage) (crewlet.ContextPlan, error) {
	started := time.Now()
	tc, err := a.store.ThreadContext(ctx, handle, trigger.Conversation, trigger.EventID, key, turnrules.TriggerText)
	if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
		// A turn begun before triggers were recorded at BeginTurn: record
		// it now, which gives it its place.
		// COMPAT(begin-turn-triggers)
		if err = a.store.AppendMessages(ctx, crewlet.ThreadKey(trigger.EventID), trigger); err == nil {
			tc, err = a.store.ThreadContext(ctx, handle, trigger.Conversation, trigger.EventID, key, turnrules.TriggerText)
		}
	}
	if err != nil {
		return crewlet.ContextPlan{}, err
	}
	in := crewlet.ContextInput{
		System: system, Tools: catalog, Summary: tc.Summary, Earlier: tc.Earlier,
		Budget: a.org.Now().Profiles[profileName].InputBudget(), TokensPerByte: tc.TokensPerByte, MayCompact: true,
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
	if w := a.org.Now().Profiles[profileName].CompactWith; w != "" {
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
		Messages:  []crewlet.ChatMessage{{Role: "user", Content: crewlet.CompactionPrompt(prev, covered, int(float64(a.org.Now().Profiles[summarizer].InputBudget())/crewlet.DefaultTokensPerByte/2))}},
		MaxTokens: a.org.Now().Profiles[summarizer].MaxTokens,
	}
	a.log.Info("conversation_compacting", "seat", handle, "conversation", conversation, "through", last.MessageID, "exchanges", len(covered), "profile", summarizer)
	resp, err := a.chat(ctx, summarizer, req, nil)
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
		CachedTokens: resp.Usage.CachedTokens, AnsweredModel: resp.Model}, crewlet.CompactionSystem, nil); err != nil {
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
		if crewlet.ReadOnlyTool(catalog, call.Name) {
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
		out.Calls = append(out.Calls, crewlet.ToolCallRef{Call: i, Name: c.Name, ReadOnly: crewlet.ReadOnlyTool(catalog, c.Name)})
	}
	return out
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
// server error, a refused connection or a timeout cools the credential off
// and fails over the same way, so the pool's other profiles answer while
// this one is down, and with none left the turn waits, as for a usage
// limit, rather than spending its retries on a provider that is down. One
// turn meeting the same server error again is retried instead, as a rate
// limit is, after the provider's retry-after when it gave one (see
// pool.CredentialState.Failed); the rest fail the round.
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
		cooling, rerr := a.profiles.Failed(ctx, profile, turnID, pe.Message, pe.Down())
		if rerr != nil {
			a.log.Warn("credential_unreported", "profile", profile, "error", rerr)
		}
		if cooling {
			return temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("profile %s: provider failed, cooling off: %s", profile, pe.Error()), crewlet.ErrorTypeProfileUnavailable, nil)
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
	return pe.Kind == crewlet.ProviderExhausted || a.org.Now().Profiles[profile].Exhausted(pe.Message)
}
