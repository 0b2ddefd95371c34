// Package replay re-runs a recorded turn against a changed charter, profile,
// model or config revision without touching the world
// (docs/architecture.md, "Replay"): each round's context is laid out again by the assembly function
// the turn used, from what was recorded when it ran; the model is called
// anew; and each tool call is answered from the recorded result of a
// matching call of the turn, never run (but for a read-only MCP call with
// Change.LiveReadOnly, run for real on a worker node). What it writes is its
// own charge to evals.budget, nothing of the seat's.
package replay

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/budget"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/model"
	"github.com/crewlet/crewlet/internal/prices"
	"github.com/crewlet/crewlet/internal/revisions"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/turnrules"
	"github.com/crewlet/crewlet/internal/wire"
)

// Change is what a replay runs differently from the recorded turn; the zero
// value changes nothing.
type Change struct {
	// Charter replaces the role's charter in the system prompt.
	Charter string `json:"charter,omitempty"`
	// Profile runs every round on this profile instead of the recorded
	// round's.
	Profile string `json:"profile,omitempty"`
	// Model replaces the model of the profile each round runs on.
	Model string `json:"model,omitempty"`
	// Revision runs on that config revision's org instead of the active
	// one: its roles, charters, profiles and max_rounds.
	Revision int64 `json:"revision,omitempty"`
	// LiveReadOnly runs a call that matches no recorded call for real
	// when it is to an MCP tool its server marks read-only (readOnlyHint):
	// its result answers the model. Any other such call stays diverged.
	LiveReadOnly bool `json:"live_read_only,omitempty"`
}

// Outcomes of a replayed tool call.
const (
	// Matched: answered from the recorded result of the same call (same
	// tool, same argument hash) of the recorded turn.
	Matched = "matched"
	// Diverged: no recorded call matches; it was not run, and the model
	// was told so (NoRecordText).
	Diverged = "diverged"
	// Live: no recorded call matches, and the call, to an MCP tool its
	// server marks read-only, was run for real (Change.LiveReadOnly).
	Live = "live"
)

// NoRecordText is the tool result a diverged call gets.
const NoRecordText = "No recorded result: this is a replay of a recorded turn, and the recorded turn made no call of this tool with these arguments, so it was not run."

// LiveFailedText is the tool result of a live call that failed after it
// was sent, as a turn's read-only call that failed is told.
const LiveFailedText = "This read-only call failed; you may try it again."

// Report is a replay side by side with the turn it replays.
type Report struct {
	Turn string `json:"turn"`
	Seat string `json:"seat"`
	Role string `json:"role"`
	// Change is what the replay changed.
	Change Change `json:"change"`
	// Revision is the config revision the replay ran on.
	Revision int64    `json:"revision"`
	Threads  []Thread `json:"threads"`
	// Recorded is what the recorded turn's rounds spent (their receipts,
	// money as it was charged), Replayed what the replay's did, charged to
	// evals.budget, in money at the prices now.
	Recorded Tokens `json:"recorded_tokens"`
	Replayed Tokens `json:"replayed_tokens"`
	Matched  int    `json:"matched"`
	Diverged int    `json:"diverged"`
	// Live counts the calls run for real (Change.LiveReadOnly).
	Live int `json:"live,omitempty"`
	// NotReconstructed names what of the recorded context the replay could
	// not lay out as the turn had it.
	NotReconstructed []string `json:"not_reconstructed,omitempty"`
	// TookMS is how long the replay ran.
	TookMS int64 `json:"took_ms"`
}

// Thread is one trigger of the turn: its recorded and replayed answers.
type Thread struct {
	// Trigger is the event id of the message the thread answers.
	Trigger  string `json:"trigger"`
	Recorded string `json:"recorded_answer"`
	Replayed string `json:"replayed_answer"`
	// Same says the two answers are byte for byte equal.
	Same bool `json:"same"`
	// Stopped says why the replay ended without an answer, if it did.
	Stopped string  `json:"stopped,omitempty"`
	Rounds  []Round `json:"rounds"`
	// RecordedRounds are the recorded rounds' receipts.
	RecordedRounds []RecordedRound `json:"recorded_rounds"`
}

// Round is one replayed model call.
type Round struct {
	Round   int    `json:"round"`
	Profile string `json:"profile"`
	Answer  string `json:"answer"`
	Calls   []Call `json:"calls,omitempty"`
	Tokens  Tokens `json:"tokens"`
	// SystemAsRecorded says the system prompt sent hashes as the recorded
	// round's did (false also when that round was not recorded).
	SystemAsRecorded bool `json:"system_as_recorded"`
}

// RecordedRound is one recorded model call: its answer and receipt.
type RecordedRound struct {
	Round   int    `json:"round"`
	Profile string `json:"profile"`
	Answer  string `json:"answer"`
	Calls   []Call `json:"calls,omitempty"`
	Tokens  Tokens `json:"tokens"`
}

// Call is one tool call a model asked for.
type Call struct {
	Name string          `json:"name"`
	Args json.RawMessage `json:"args"`
	// Outcome is Matched, Diverged or Live in a replayed round; empty in a
	// recorded one.
	Outcome string `json:"outcome,omitempty"`
	// Recorded is the idempotency key of the recorded call that answered
	// it ({work_key}:{round}:{call}).
	Recorded string `json:"recorded,omitempty"`
	// Approval is the recorded decision on the call, when a policy gated
	// it: approved, denied or timed out, and by whom.
	Approval string `json:"approval,omitempty"`
	Result   string `json:"result"`
	IsError  bool   `json:"is_error,omitempty"`
}

// ClipResults clips the result of every tool call of the report at most
// bytes (crewlet.Clip): the recorded results are read whole with the turn.
func (r *Report) ClipResults(most int) {
	for i := range r.Threads {
		th := &r.Threads[i]
		for j := range th.Rounds {
			clipCalls(th.Rounds[j].Calls, most)
		}
		for j := range th.RecordedRounds {
			clipCalls(th.RecordedRounds[j].Calls, most)
		}
	}
}

func clipCalls(calls []Call, most int) {
	for i := range calls {
		calls[i].Result = crewlet.Clip(calls[i].Result, most)
	}
}

// Tokens are a model call's or a turn's input and output tokens, and what
// they cost: NanoUSD in nano-dollars, and Unpriced the tokens no price was
// found for (counted, never taken as free).
type Tokens struct {
	Input    int64 `json:"input"`
	Output   int64 `json:"output"`
	NanoUSD  int64 `json:"nano_usd"`
	Unpriced int64 `json:"unpriced_tokens,omitempty"`
}

// add adds o's tokens and cost.
func (t *Tokens) add(o Tokens) {
	t.Input += o.Input
	t.Output += o.Output
	t.NanoUSD += o.NanoUSD
	t.Unpriced += o.Unpriced
}

// Cost is a model call's tokens and what they cost at org's prices at a
// time; a table that does not read prices nothing, and its tokens count as
// unpriced.
func Cost(org *config.Config, profile config.Profile, resp crewlet.ModelResponse, at time.Time) Tokens {
	u := resp.Usage
	t := Tokens{Input: u.InputTokens, Output: u.OutputTokens, Unpriced: u.InputTokens + u.OutputTokens}
	table, err := org.PriceTable()
	if err != nil {
		return t
	}
	q := table.Quote(profile.PricedModel(resp.Model), profile.BaseURL, at, prices.Usage{Input: u.InputTokens, Output: u.OutputTokens, Cached: u.CachedTokens})
	if q.Priced {
		t.NanoUSD, t.Unpriced = q.NanoUSD, 0
	}
	return t
}

// Engine replays recorded turns. It reads the store and writes only
// evals.budget's charges; it holds no seat's profile slot and contacts no
// tool but the read-only MCP tools a live replay runs.
type Engine struct {
	Store *store.Store
	Org   config.Source
	// Model builds a profile's model; nil builds it as turns do, with no
	// test probe.
	Model func(name string, p config.Profile) (crewlet.ChatModel, error)
	// Now is the clock the eval budget is charged on; nil is time.Now.
	Now func() time.Time
	// Charge records a model call's charge to evals.budget; nil records
	// it at once (store.ChargeEval). An eval run collects a turn's charges
	// to record them with its result, in one transaction.
	Charge func(context.Context, store.EvalCharge) error
	// StartTools starts a seat's MCP servers for a live replay
	// (Change.LiveReadOnly) as its tenure starts them on this node; a nil
	// session means the seat's role has none. nil where no MCP server may
	// run (the API process): such an engine refuses live_read_only.
	StartTools func(ctx context.Context, handle string) (LiveTools, error)
	Log        *slog.Logger
}

// LiveTools are the MCP servers a live replay started (tools.Session).
type LiveTools interface {
	Tools() []tools.Tool
	Call(ctx context.Context, name string, args json.RawMessage, idempotencyKey string) (tools.Result, error)
	Close() error
}

// Replay re-runs the turn turnID ("turn/{handle}/{work_key}") with change,
// charging principal's model calls to evals.budget.
func (e *Engine) Replay(ctx context.Context, turnID, principal string, change Change) (_ Report, err error) {
	began := time.Now()
	if change.LiveReadOnly && e.StartTools == nil {
		return Report{}, crewlet.Errorf(crewlet.EUNAVAILABLE, "this process runs no MCP server, so it cannot replay with live_read_only; a worker node does: ask the API, which hands such a replay to one")
	}
	handle, workKey, ok := crewlet.ParseTurnID(turnID)
	if !ok {
		return Report{}, crewlet.Errorf(crewlet.EINVALID, "turn id %q is not turn/{handle}/{work_key}; `crewlet seats turns HANDLE` lists them", turnID)
	}
	turn, err := e.Store.Turn(ctx, handle, workKey)
	if err != nil {
		return Report{}, err
	}
	if turn.FinishedAt == nil {
		return Report{}, crewlet.Errorf(crewlet.ECONFLICT, "turn %s is still running; replay it once it finished", turn.TurnID)
	}
	r, err := e.setUp(ctx, turn, change)
	if err != nil {
		return Report{}, err
	}
	r.principal = principal
	defer func() {
		if cerr := r.closeTools(); cerr != nil && err == nil {
			err = cerr
		}
	}()
	report := Report{Turn: turn.TurnID, Seat: handle, Role: r.seat.Role, Change: change, Revision: r.org.Revision}
	gated, err := e.Store.Approvals(ctx, store.ApprovalFilter{Handle: handle, TurnID: turn.TurnID, Limit: wire.MaxApprovals})
	if err != nil {
		return Report{}, err
	}
	r.decisions = map[string]string{}
	for _, a := range gated {
		r.decisions[a.CallKey] = decision(a)
	}
	for i := range turn.Threads {
		th, err := r.thread(ctx, i)
		if err != nil {
			return Report{}, err
		}
		report.Threads = append(report.Threads, th)
		for _, rr := range th.RecordedRounds {
			report.Recorded.add(rr.Tokens)
		}
		for _, rd := range th.Rounds {
			report.Replayed.add(rd.Tokens)
			for _, c := range rd.Calls {
				switch c.Outcome {
				case Matched:
					report.Matched++
				case Live:
					report.Live++
				default:
					report.Diverged++
				}
			}
		}
	}
	report.NotReconstructed = r.gaps
	report.TookMS = time.Since(began).Milliseconds()
	e.log().Info("turn_replayed", "turn", turn.TurnID, "by", principal, "revision", r.org.Revision,
		"rounds", r.rounds, "matched", report.Matched, "diverged", report.Diverged, "live", report.Live, "input_tokens", report.Replayed.Input, "output_tokens", report.Replayed.Output)
	return report, nil
}

// run is one replay under way.
type run struct {
	*Engine
	turn      wire.TurnRow
	org       *config.Config
	seat      config.Seat
	role      config.Role
	system    string
	catalog   []crewlet.ToolSpec
	change    Change
	principal string
	// decisions are the recorded approval decisions by call key.
	decisions map[string]string
	models    map[string]crewlet.ChatModel
	// rounds counts the replay's model calls, held to role.MaxRounds.
	rounds int
	gaps   []string
	// live is the MCP servers started for the replay's first live call;
	// started says they were asked for, live being nil when the role has
	// none.
	live    LiveTools
	started bool
}

// setUp picks the org the replay runs on and the seat's role in it, with the
// change's charter.
func (e *Engine) setUp(ctx context.Context, turn wire.TurnRow, change Change) (*run, error) {
	org := e.Org.Now()
	if change.Revision != 0 {
		rev, err := revisions.At(ctx, e.Store, change.Revision, org)
		if crewlet.ErrorCode(err) == crewlet.ENOTFOUND {
			return nil, err
		}
		if err != nil {
			return nil, crewlet.Errorf(crewlet.EINVALID, "revision %d cannot be run by this process: %s", change.Revision, crewlet.ErrorMessage(err))
		}
		org = rev.Org
	}
	seat, ok := org.Seat(turn.Seat)
	role, hasRole := org.Roles[seat.Role]
	if !ok || !hasRole || len(role.Pool()) == 0 {
		return nil, crewlet.Errorf(crewlet.EINVALID, "seat %s has no agent role with a profile in revision %d of the org; replay against a revision that has it (--revision)", turn.Seat, org.Revision)
	}
	if change.Charter != "" {
		role.Charter = change.Charter
	}
	if change.Profile != "" {
		if _, ok := org.Profiles[change.Profile]; !ok {
			return nil, crewlet.Errorf(crewlet.EINVALID, "profile %q is not in revision %d of the org; `crewlet profiles` lists them", change.Profile, org.Revision)
		}
	}
	catalog := firstparty.Specs()
	if len(turn.Tools) > 0 {
		catalog = nil
		if err := json.Unmarshal(turn.Tools, &catalog); err != nil {
			return nil, fmt.Errorf("decode tool catalog of %s: %w", turn.TurnID, err)
		}
	}
	return &run{
		Engine: e, turn: turn, org: org, seat: seat, role: role, change: change, catalog: catalog,
		system: turnrules.SystemPrompt(turn.Seat, seat.Role, role.Charter, org.Company.Name),
		models: map[string]crewlet.ChatModel{},
	}, nil
}

// recordedCall is a tool call of the recorded turn and the result it got.
type recordedCall struct {
	key, name, argsHash string
	result              crewlet.ChatMessage
	used                bool
}

// thread replays one thread of the turn.
func (r *run) thread(ctx context.Context, index int) (Thread, error) {
	trigger := r.turn.Mail[r.turn.Threads[index]]
	key := crewlet.ThreadKey(trigger.EventID)
	msgs, err := r.Store.TurnMessages(ctx, r.turn.Seat, key, 0)
	if err != nil {
		return Thread{}, err
	}
	receipts, err := r.Store.TurnRounds(ctx, r.turn.Seat, key)
	if err != nil {
		return Thread{}, err
	}
	out := Thread{Trigger: trigger.EventID, RecordedRounds: []RecordedRound{}, Rounds: []Round{}}
	recorded, calls := r.recorded(key, msgs, receipts)
	out.RecordedRounds = recorded
	all := make([]crewlet.ChatMessage, len(msgs))
	for i, m := range msgs {
		all[i] = m.Message
	}
	out.Recorded, _ = turnrules.AnswerOf(all)

	// The thread as it stood before its first round: the trigger's text
	// and any exchange an interruption joined to it.
	var current []crewlet.ChatMessage
	for _, m := range msgs {
		if m.Round > 0 {
			break
		}
		if m.Message.Role == "user" {
			current = append(current, m.Message)
		}
	}
	for round := 1; ; round++ {
		if r.rounds >= r.role.MaxRounds {
			out.Stopped = fmt.Sprintf("stopped after %d rounds, the most the role allows in one turn (max_rounds)", r.role.MaxRounds)
			break
		}
		receipt, hasReceipt := receiptOf(receipts, round)
		rd, answer, err := r.round(ctx, trigger, key, round, receipt, hasReceipt, current)
		if err != nil {
			return Thread{}, err
		}
		r.rounds++
		if answer == nil {
			out.Stopped = rd.Answer
			out.Rounds = append(out.Rounds, rd)
			break
		}
		current = append(current, *answer)
		for i, c := range answer.ToolCalls {
			call := answerCall(calls, c)
			if call.Outcome == Matched {
				call.Approval = r.decisions[call.Recorded]
			}
			if call.Outcome == Diverged && r.change.LiveReadOnly {
				if call, err = r.runLive(ctx, call, fmt.Sprintf("replay:%s:%d:%d", key, round, i)); err != nil {
					return Thread{}, err
				}
			}
			rd.Calls = append(rd.Calls, call)
			current = append(current, crewlet.ChatMessage{Role: "tool", ToolCallID: answer.ToolCalls[i].ID, Content: call.Result, IsError: call.IsError})
		}
		out.Rounds = append(out.Rounds, rd)
		if len(answer.ToolCalls) == 0 {
			out.Replayed = answer.Content
			break
		}
	}
	out.Same = out.Stopped == "" && out.Replayed == out.Recorded
	return out, nil
}

// recorded reads a thread's recorded rounds and the tool calls they made,
// each with its result: what the replay answers calls from.
func (r *run) recorded(key string, msgs []wire.TurnMessage, receipts []wire.RoundRow) ([]RecordedRound, []*recordedCall) {
	results := map[string]crewlet.ChatMessage{}
	for _, m := range msgs {
		if m.Message.Role == "tool" {
			results[m.Key] = m.Message
		}
	}
	var rounds []RecordedRound
	var calls []*recordedCall
	for _, m := range msgs {
		if m.Round == 0 || m.Key != fmt.Sprintf("r%d", m.Round) {
			continue
		}
		rr := RecordedRound{Round: m.Round, Answer: m.Message.Content}
		if receipt, ok := receiptOf(receipts, m.Round); ok {
			rr.Profile, rr.Tokens = receipt.Profile, Tokens{Input: receipt.InputTokens, Output: receipt.OutputTokens, NanoUSD: receipt.NanoUSD}
			if !receipt.Priced {
				rr.Tokens.Unpriced = receipt.InputTokens + receipt.OutputTokens
			}
		}
		for i, c := range m.Message.ToolCalls {
			res, ok := results[fmt.Sprintf("r%dc%d", m.Round, i)]
			callKey := fmt.Sprintf("%s:%d:%d", key, m.Round, i)
			rr.Calls = append(rr.Calls, Call{Name: c.Name, Args: c.Args, Recorded: callKey, Approval: r.decisions[callKey], Result: res.Content, IsError: res.IsError})
			if ok {
				// A call that left no result (its outcome unknown, its
				// turn stopped mid-wait) answers nothing.
				calls = append(calls, &recordedCall{key: callKey, name: c.Name, argsHash: approvals.ArgsHash(c.Args), result: res})
			}
		}
		rounds = append(rounds, rr)
	}
	if rounds == nil {
		rounds = []RecordedRound{}
	}
	return rounds, calls
}

// answerCall answers a replayed call from the first unused recorded call
// of the same tool with the same argument hash, or says it has no record.
func answerCall(calls []*recordedCall, c crewlet.ToolCall) Call {
	hash := approvals.ArgsHash(c.Args)
	for _, rc := range calls {
		if rc.used || rc.name != c.Name || rc.argsHash != hash {
			continue
		}
		rc.used = true
		return Call{Name: c.Name, Args: c.Args, Outcome: Matched, Recorded: rc.key, Result: rc.result.Content, IsError: rc.result.IsError}
	}
	return Call{Name: c.Name, Args: c.Args, Outcome: Diverged, Result: NoRecordText, IsError: true}
}

// runLive runs a diverged call for real when it is to an MCP tool that both
// the catalog the model was offered and the server running it now mark
// read-only; any other call stays diverged. crewlet's own tools (delegate,
// ask, mail, memory, recall...) are ruled out first, so such a call never
// runs and starts no server. The servers start at the first eligible call,
// as the seat's tenure starts them; key is the call's idempotency key, one
// no seat's call has. Nothing of the seat is written.
func (r *run) runLive(ctx context.Context, call Call, key string) (Call, error) {
	if firstparty.Has(call.Name) || !crewlet.ReadOnlyTool(r.catalog, call.Name) {
		return call, nil
	}
	live, err := r.liveTools(ctx)
	if err != nil || live == nil {
		return call, err
	}
	offered := make([]crewlet.ToolSpec, 0, len(live.Tools()))
	for _, t := range live.Tools() {
		offered = append(offered, t.Spec)
	}
	if !crewlet.ReadOnlyTool(offered, call.Name) {
		return call, nil
	}
	res, err := live.Call(ctx, call.Name, call.Args, key)
	switch {
	case err != nil && crewlet.ErrorCode(err) != crewlet.EINTERNAL:
		// Refused here, before anything was sent.
		res = tools.Refused(crewlet.ErrorMessage(err))
	case err != nil:
		r.log().Warn("replay_live_call_failed", "turn", r.turn.TurnID, "tool", call.Name, "key", key, "error", err)
		res = tools.Result{Text: LiveFailedText, IsError: true}
	}
	call.Outcome, call.Result, call.IsError = Live, crewlet.Clean(res.Text), res.IsError
	return call, nil
}

// liveTools starts the seat's MCP servers once per replay; nil when its
// role has none.
func (r *run) liveTools(ctx context.Context) (LiveTools, error) {
	if r.started {
		return r.live, nil
	}
	r.started = true
	live, err := r.StartTools(ctx, r.turn.Seat)
	// A session that failed to start may hold a child that would not
	// stop: closeTools retries it.
	r.live = live
	if err != nil {
		r.log().Error("replay_tools_not_started", "turn", r.turn.TurnID, "seat", r.turn.Seat, "error", err)
		return nil, crewlet.Errorf(crewlet.EUNAVAILABLE, "the MCP servers of %s did not start on this worker node, so the replay's read-only calls cannot run live; its log says why (replay_tools_not_started); replay without live_read_only, or fix the servers", r.turn.Seat)
	}
	return live, nil
}

// closeTools stops the MCP servers a live replay started.
func (r *run) closeTools() error {
	if r.live == nil {
		return nil
	}
	if err := r.live.Close(); err != nil {
		return fmt.Errorf("stop the MCP servers a replay of %s started: %w", r.turn.TurnID, err)
	}
	return nil
}

// round makes one replayed model call: the context laid out as the
// recorded round had it, then the model asked. A nil answer ends the
// thread, with why in the round's Answer.
func (r *run) round(ctx context.Context, trigger crewlet.Message, key string, round int, receipt wire.RoundRow, hasReceipt bool, current []crewlet.ChatMessage) (Round, *crewlet.ChatMessage, error) {
	name := r.change.Profile
	if name == "" {
		name = r.turn.Profile
		if hasReceipt {
			name = receipt.Profile
		}
		if _, ok := r.org.Profiles[name]; !ok {
			// The recorded profile is gone from this revision: the
			// role's first, as a turn beginning now would pick.
			name = r.role.Pool()[0]
		}
	}
	profile := r.org.Profiles[name]
	if r.change.Model != "" {
		profile.Model = r.change.Model
	}
	rd := Round{Round: round, Profile: name, SystemAsRecorded: hasReceipt && sha(r.system) == receipt.SystemSHA256}
	// The round read its context just before its answer was recorded; a
	// round the recorded turn did not make reads it as the turn ended.
	asOf := r.turn.FinishedAt.Add(time.Microsecond)
	if hasReceipt {
		asOf = receipt.RecordedAt
	}
	plan, err := r.assemble(ctx, trigger, key, profile, current, asOf)
	if err != nil {
		return rd, nil, err
	}
	if plan.Oversize {
		rd.Answer = fmt.Sprintf("not sent: at about %d tokens the trigger does not fit profile %s's context budget of %d tokens", plan.Tokens, name, profile.InputBudget())
		return rd, nil, nil
	}
	if err := r.withinBudget(ctx); err != nil {
		return rd, nil, err
	}
	m, err := r.model(name, profile)
	if err != nil {
		return rd, nil, err
	}
	resp, err := m.Chat(ctx, crewlet.ModelRequest{
		Seat: r.turn.Seat, Role: r.seat.Role, Trigger: &trigger, System: r.system, Messages: plan.Messages,
		Tools: r.catalog, MaxTokens: profile.MaxTokens,
	})
	if err != nil {
		return rd, nil, crewlet.Errorf(crewlet.EUNAVAILABLE, "round %d of the replay: profile %s did not answer: %s", round, name, crewlet.ErrorMessage(err))
	}
	rd.Tokens = Cost(r.org, profile, resp, r.now())
	charge := r.Charge
	if charge == nil {
		charge = r.Store.ChargeEval
	}
	if err := charge(ctx, store.EvalCharge{TurnID: r.turn.TurnID, Principal: r.principal, Profile: name,
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, NanoUSD: rd.Tokens.NanoUSD, UnpricedTokens: rd.Tokens.Unpriced,
		RecordedAt: r.now()}); err != nil {
		return rd, nil, err
	}
	if resp.Text == "" && len(resp.ToolCalls) == 0 {
		rd.Answer = "the model answered nothing"
		return rd, nil, nil
	}
	// Stored as a turn stores it (activities.ModelRound), so an unchanged
	// replay compares byte for byte.
	answer := crewlet.ChatMessage{Role: "assistant", Content: crewlet.Clean(resp.Text), ToolCalls: resp.ToolCalls}
	for i := range answer.ToolCalls {
		c := &answer.ToolCalls[i]
		if c.ID == "" {
			c.ID = fmt.Sprintf("call_%d_%d", round, i)
		}
		c.ID, c.Name = crewlet.Clean(c.ID), crewlet.Clean(c.Name)
	}
	rd.Answer = answer.Content
	if answer, err = r.Store.AsStored(ctx, answer); err != nil {
		return rd, nil, err
	}
	return rd, &answer, nil
}

// assemble lays out a round's request with crewlet.AssembleContext, from the
// conversation as it stood at asOf. A compaction the layout asks for is
// answered with the summary the turn made, when one was stored; the replay
// makes none.
func (r *run) assemble(ctx context.Context, trigger crewlet.Message, key string, profile config.Profile, current []crewlet.ChatMessage, asOf time.Time) (crewlet.ContextPlan, error) {
	tc, err := r.Store.ThreadContextAsOf(ctx, r.turn.Seat, trigger.Conversation, trigger.EventID, key, turnrules.TriggerText, asOf)
	switch {
	case crewlet.ErrorCode(err) == crewlet.ENOTFOUND:
		r.gap("the conversation before the trigger: the trigger is not in the transcript (trimmed by message_retention, or recorded by an older build), so the replay sends the thread alone")
	case err != nil:
		return crewlet.ContextPlan{}, err
	}
	in := crewlet.ContextInput{
		System: r.system, Tools: r.catalog, Summary: tc.Summary, Earlier: tc.Earlier,
		Budget: profile.InputBudget(), TokensPerByte: tc.TokensPerByte, MayCompact: true, Current: current,
	}
	plan := crewlet.AssembleContext(in)
	if plan.Compact == 0 {
		return plan, nil
	}
	last := in.Earlier[plan.Compact-1]
	in.MayCompact = false
	switch summary, err := r.Store.SummaryThrough(ctx, r.turn.Seat, trigger.Conversation, last.MessageID); {
	case err == nil:
		in.Earlier, in.Summary = in.Earlier[plan.Compact:], &summary.ConversationSummary
	case crewlet.ErrorCode(err) == crewlet.ENOTFOUND:
		r.gap("a compaction summary the changed setting asks for: none was recorded for those exchanges, and a replay makes none, so older tool results are clipped instead")
	default:
		return crewlet.ContextPlan{}, err
	}
	return crewlet.AssembleContext(in), nil
}

// withinBudget refuses a model call once evals.budget is spent.
func (r *run) withinBudget(ctx context.Context) error {
	org := r.Org.Now()
	windows, err := r.Store.EvalUsage(ctx, org.Evals.Budget.Caps(), r.now(), org.Location())
	if err != nil {
		return err
	}
	if hold := budget.Check(windows); hold != nil {
		return crewlet.Errorf(crewlet.ERATELIMITED, "the eval budget is spent: %d of evals.budget.tokens_per_%s's %d tokens used; replays run again after %s, or raise the cap",
			hold.Used, hold.Window, hold.Cap, hold.ResetsAt.In(org.Location()).Format(time.RFC3339))
	}
	return nil
}

// model is the profile's model, built once per replay: a changed model
// name makes it another than the seat's turns use.
func (r *run) model(name string, p config.Profile) (crewlet.ChatModel, error) {
	if m, ok := r.models[name]; ok {
		return m, nil
	}
	build := r.Model
	if build == nil {
		build = func(name string, p config.Profile) (crewlet.ChatModel, error) { return model.New(name, p, nil) }
	}
	m, err := build(name, p)
	if err != nil {
		return nil, crewlet.Errorf(crewlet.EINVALID, "profile %s cannot be built with model %q: %v", name, p.Model, err)
	}
	r.models[name] = m
	return m, nil
}

func (r *run) gap(what string) {
	for _, g := range r.gaps {
		if g == what {
			return
		}
	}
	r.gaps = append(r.gaps, what)
}

func (e *Engine) now() time.Time {
	if e.Now == nil {
		return time.Now()
	}
	return e.Now()
}

func (e *Engine) log() *slog.Logger {
	if e.Log == nil {
		return slog.Default()
	}
	return e.Log
}

func receiptOf(receipts []wire.RoundRow, round int) (wire.RoundRow, bool) {
	for _, r := range receipts {
		if r.Round == round {
			return r, true
		}
	}
	return wire.RoundRow{}, false
}

// decision is an approval's recorded decision in a line.
func decision(a crewlet.Approval) string {
	if a.DecidedBy == "" {
		return a.Status
	}
	s := a.Status + " by " + a.DecidedBy
	if a.Reason != "" {
		s += ": " + a.Reason
	}
	return strings.TrimSpace(s)
}

// sha is the hex sha-256 a round's receipt keeps of its system prompt.
func sha(system string) string {
	sum := sha256.Sum256([]byte(system))
	return hex.EncodeToString(sum[:])
}
