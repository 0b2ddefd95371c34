package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/profiles"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
	"github.com/crewlet/crewlet/internal/wire"
	"go.temporal.io/sdk/temporal"
)

// turnEnv is one seat "cto" attached on a host, with a Turns over a real
// Postgres and Redis; its clock is the test's.
type turnEnv struct {
	zombieEnv
	host  *Host
	turns *Turns
	epoch int64
	now   time.Time
}

const turnsOrg = `
company: { name: acme, timezone: Europe/Berlin }
profiles:
  local:
    provider: scripted
    rules:
      - match: '^record (.*)'
        tools: [ { name: ledger__write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'recorded: {{index .Results 0}}'
roles:
  clerk: { charter: keeps the ledger, profile: local, budget: { tokens_per_day: 100 } }
seats:
  - { handle: cto, role: clerk }
`

func setupTurns(t *testing.T, startTools func(context.Context, string) (ToolSession, error)) *turnEnv {
	t.Helper()
	return setupTurnsOrg(t, turnsOrg, startTools)
}

// setupTurnsOrg is setupTurns on another org file; it must have a seat cto.
func setupTurnsOrg(t testing.TB, orgYAML string, startTools func(context.Context, string) (ToolSession, error)) *turnEnv {
	t.Helper()
	org, err := config.Parse([]byte(orgYAML))
	if err != nil {
		t.Fatal(err)
	}
	return setupTurnsSource(t, org, startTools)
}

// setupTurnsSource is setupTurnsOrg following an org source, which a test
// may change as a config apply does.
func setupTurnsSource(t testing.TB, org config.Source, startTools func(context.Context, string) (ToolSession, error)) *turnEnv {
	t.Helper()
	e := &turnEnv{zombieEnv: setupZombie(t)}
	var err error
	e.seat(t, "cto")
	e.host = newHost(e.zombieEnv, "n1:aaaa")
	e.host.StartTools = startTools
	if e.turns, err = NewTurns(e.host, org, e.store, e.mb, nil, nil, profiles.New(nil, e.store, org, nil, discard), nil, nil, discard); err != nil {
		t.Fatal(err)
	}
	e.now = time.Date(2026, 11, 29, 22, 30, 0, 0, time.UTC) // 23:30 in Berlin
	e.turns.Now = func() time.Time { return e.now }
	out, err := e.host.Attach(e.ctx, crewlet.AttachInput{Handle: "cto"})
	if err != nil {
		t.Fatal(err)
	}
	e.epoch = out.Epoch
	t.Cleanup(func() { _ = e.host.Teardown("cto") })
	return e
}

// publish puts a message from a person in cto's mailbox.
func (e *turnEnv) publish(t *testing.T, eventID, body string) crewlet.MailRef {
	t.Helper()
	id, _, err := e.mb.Publish(e.ctx, crewlet.Message{
		EventID: eventID, Type: crewlet.MessageChat, From: crewlet.ExternalSender, To: "cto",
		Conversation: "c-" + eventID, Body: body, SentAt: e.now,
	}, mailbox.Quotas{})
	if err != nil {
		t.Fatal(err)
	}
	return crewlet.MailRef{StreamID: id, EventID: eventID}
}

func (e *turnEnv) begin(t testing.TB, workKey string, mail ...crewlet.MailRef) crewlet.BeginTurnOutput {
	t.Helper()
	out, err := e.turns.BeginTurn(e.ctx, crewlet.BeginTurnInput{
		Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: crewlet.TurnWorkflowID("cto", workKey), WorkKey: workKey, Mail: mail,
	})
	if err != nil {
		t.Fatalf("BeginTurn: %v", err)
	}
	return out
}

// A seat over its daily cap is held until midnight on the company's clock,
// and runs when the day turns.
func TestBudgetCapHoldsTheTurnUntilTheWindowTurns(t *testing.T) {
	t.Parallel()
	e := setupTurns(t, nil)
	ref := e.publish(t, "m1", "hello")
	_, err := e.store.RecordRound(e.ctx, wire.RoundRow{
		Seat: "cto", WorkKey: "earlier", Round: 1, Profile: "local", InputTokens: 90, OutputTokens: 30, RecordedAt: e.now,
	}, e.turns.org.Now().Location())
	if err != nil {
		t.Fatal(err)
	}

	held := e.begin(t, "k1", ref)
	midnight := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	want := &crewlet.BudgetHold{Scope: crewlet.ScopeSeat, Window: crewlet.WindowDay, Unit: crewlet.UnitTokens, Cap: 100, Used: 120, ResetsAt: midnight}
	if held.Hold != nil && held.Hold.ResetsAt.Equal(want.ResetsAt) {
		want.ResetsAt = held.Hold.ResetsAt
	}
	if held.Hold != nil {
		want.Reason = held.Hold.Reason
	}
	if held.Hold == nil || *held.Hold != *want || held.Threads != 0 || !strings.Contains(want.Reason, "day budget of 100 tokens is spent") {
		t.Fatalf("BeginTurn over the cap: got %+v (hold %+v); want hold %+v and no thread", held, held.Hold, want)
	}
	if _, err := e.store.Turn(e.ctx, "cto", "k1"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("a held turn was opened (err %v); want nothing recorded", err)
	}

	if hold, err := e.turns.CheckBudget(e.ctx, crewlet.CheckBudgetInput{Handle: "cto"}); err != nil || hold == nil || hold.Used != 120 {
		t.Fatalf("CheckBudget before midnight: %+v, %v; want the day cap still holding", hold, err)
	}

	e.now = midnight.Add(time.Minute)
	if hold, err := e.turns.CheckBudget(e.ctx, crewlet.CheckBudgetInput{Handle: "cto"}); err != nil || hold != nil {
		t.Fatalf("CheckBudget after midnight: %+v, %v; want no hold", hold, err)
	}
	open := e.begin(t, "k1", ref)
	if open.Hold != nil || open.Threads != 1 {
		t.Fatalf("BeginTurn after midnight: got %+v; want one thread and no hold", open)
	}
	round, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: "k1", Round: 1})
	if err != nil {
		t.Fatal(err)
	}
	usage, err := e.store.Usage(e.ctx, "cto", crewlet.BudgetCaps{TokensPerDay: 100}, crewlet.BudgetCaps{}, e.now, e.turns.org.Now().Location())
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range usage {
		if w.Scope == crewlet.ScopeSeat && w.Window == crewlet.WindowDay && w.Used != round.Tokens {
			t.Fatalf("the new day's usage: got %d; want the round's %d tokens", w.Used, round.Tokens)
		}
	}
	rounds, err := e.store.TurnRounds(e.ctx, "cto", crewlet.WorkKey([]string{"m1"}))
	if err != nil || len(rounds) != 1 {
		t.Fatalf("rounds recorded: %v (%v); want 1", rounds, err)
	}
	if len(rounds[0].SystemSHA256) != 64 || rounds[0].SystemBytes == 0 {
		t.Fatalf("charter receipt: sha256 %q, %d bytes; want a sha-256 and a size", rounds[0].SystemSHA256, rounds[0].SystemBytes)
	}
}

// testserverTools starts the tools package's test server as the seat's
// "ledger" MCP server; its writes are counted in the returned file.
func testserverTools(t *testing.T) (func(context.Context, string) (ToolSession, error), string) {
	t.Helper()
	bin := toolstest.BuildT(t)
	count := filepath.Join(t.TempDir(), "count")
	return func(ctx context.Context, _ string) (ToolSession, error) {
		s, err := tools.Start(ctx, []tools.ServerConfig{{Name: "ledger", Command: []string{bin}, Env: []string{"TESTSERVER_COUNT_FILE=" + count}}}, discard)
		if s == nil {
			return nil, err
		}
		return s, err
	}, count
}

func countedKeys(t *testing.T, path string) []string {
	var keys []string
	for _, w := range toolstest.Writes(t, path) {
		keys = append(keys, w.Key)
	}
	return keys
}

// A write tool runs once with the idempotency key {work_key}:{round}:{call};
// a re-run of the same call returns the recorded result, and a call that
// started before and left no result is answered "outcome unknown" without
// calling the tool. The model sees every one of those results.
func TestWriteToolCallRunsOnceAndAnUnknownOutcomeIsReported(t *testing.T) {
	t.Parallel()
	start, count := testserverTools(t)
	e := setupTurns(t, start)
	e.now = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	e.begin(t, "k1", e.publish(t, "m1", "record invoice 42"))

	round1, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: "k1", Round: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []crewlet.ToolCallRef{{Call: 0, Name: "ledger__write", ReadOnly: false}}
	if fmt.Sprint(round1.Calls) != fmt.Sprint(want) {
		t.Fatalf("round 1 calls: got %+v; want %+v", round1.Calls, want)
	}
	call := crewlet.ToolCallInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: "k1", Round: 1, Call: round1.Calls[0]}
	for attempt := 1; attempt <= 2; attempt++ {
		out, err := e.turns.ToolCall(e.ctx, call)
		if err != nil || out.IsError || !out.Wrote || out.Unknown {
			t.Fatalf("ToolCall attempt %d: got %+v, %v; want a clean write", attempt, out, err)
		}
	}
	thread := crewlet.WorkKey([]string{"m1"})
	if keys := countedKeys(t, count); len(keys) != 1 || keys[0] != thread+":1:0" {
		t.Fatalf("writes counted: %v; want exactly one with key %s:1:0", keys, thread)
	}

	// A second write whose first attempt started and died before recording.
	if _, err := e.store.AppendTurnMessage(e.ctx, "cto", thread, wire.TurnMessage{Key: roundKey(2), Round: 2, Message: crewlet.ChatMessage{
		Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "x", Name: "ledger__write", Args: json.RawMessage(`{"text":"again"}`)}},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.StartToolCall(e.ctx, "cto", thread, 2, 0, "ledger__write", false); err != nil {
		t.Fatal(err)
	}
	out, err := e.turns.ToolCall(e.ctx, crewlet.ToolCallInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: "k1", Round: 2, Call: round1.Calls[0]})
	if err != nil || !out.Unknown || !out.IsError {
		t.Fatalf("ToolCall of a write that started before: got %+v, %v; want an unknown outcome", out, err)
	}
	if keys := countedKeys(t, count); len(keys) != 1 {
		t.Fatalf("writes counted after the unknown outcome: %v; want still one", keys)
	}
	msgs, err := e.store.TurnMessages(e.ctx, "cto", thread, 0)
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, m := range msgs {
		if m.Message.Role == "tool" {
			results = append(results, m.Message.Content)
		}
	}
	if len(results) != 2 || results[0] != "written: invoice 42" || !strings.HasPrefix(results[1], "Outcome unknown") {
		t.Fatalf("tool results in the transcript: %q; want the write's result, then an unknown outcome", results)
	}
}

// callFirstParty records a round asking for one first-party tool call and
// makes the call, returning the result the model would see.
func (e *turnEnv) callFirstParty(t *testing.T, workKey, eventID string, round int, name, args string) (crewlet.ToolCallOutput, string) {
	t.Helper()
	thread := crewlet.ThreadKey(eventID)
	if _, err := e.store.AppendTurnMessage(e.ctx, "cto", thread, wire.TurnMessage{Key: roundKey(round), Round: round, Message: crewlet.ChatMessage{
		Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "c", Name: name, Args: json.RawMessage(args)}},
	}}); err != nil {
		t.Fatal(err)
	}
	out, err := e.turns.ToolCall(e.ctx, crewlet.ToolCallInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: workKey, Round: round,
		Call: crewlet.ToolCallRef{Name: name, ReadOnly: name == firstparty.Recall}})
	if err != nil {
		t.Fatalf("%s %s: %v", name, args, err)
	}
	msgs, err := e.store.TurnMessages(e.ctx, "cto", thread, 0)
	if err != nil {
		t.Fatal(err)
	}
	res, ok := findKey(msgs, resultKey(round, 0))
	if !ok {
		t.Fatalf("%s left no result", name)
	}
	return out, res.Message.Content
}

// The first-party tools: diary_write collapses identical entries, recall
// finds them by every word of the query, and send_message refuses what it
// cannot deliver with a result the model can act on.
func TestFirstPartyTools(t *testing.T) {
	t.Parallel()
	e := setupTurns(t, nil)
	e.begin(t, "k1", e.publish(t, "m1", "hello"))
	step := 0
	call := func(name, args string) (crewlet.ToolCallOutput, string) {
		step++
		return e.callFirstParty(t, "k1", "m1", step, name, args)
	}

	for range 2 {
		if out, text := call(firstparty.DiaryWrite, `{"text":"the launch is on friday"}`); out.IsError || text != "written" {
			t.Fatalf("diary_write: %+v %q; want written", out, text)
		}
	}
	call(firstparty.DiaryWrite, `{"text":"the build is red"}`)
	if _, text := call(firstparty.Recall, `{"query":"LAUNCH friday"}`); strings.Count(text, "\n") != 0 || !strings.Contains(text, "the launch is on friday") {
		t.Fatalf("recall: %q; want the one launch entry (written twice, kept once)", text)
	}
	if _, text := call(firstparty.Recall, `{"query":"nothing like it"}`); text != "nothing found" {
		t.Fatalf("recall of nothing: %q", text)
	}

	refusals := []struct{ args, want string }{
		{`{"to":"nobody","text":"hi"}`, `no seat "nobody"; seats: cto`},
		{`{"to":"cto","text":"hi"}`, "cannot send to yourself"},
		{`{"to":5}`, "send_message needs"},
	}
	for _, r := range refusals {
		out, text := call(firstparty.SendMessage, r.args)
		if !out.IsError || !strings.Contains(text, r.want) {
			t.Errorf("send_message %s: %+v %q; want an error result saying %q", r.args, out, text, r.want)
		}
	}
	if out, text := call("fs__read", `{}`); !out.IsError || !strings.Contains(text, `no tool named "fs__read"`) {
		t.Errorf("unknown tool: %+v %q; want an error result", out, text)
	}
}

// A seat over mailbox.sender_per_minute gets send_message's refusal as its
// tool result, saying why, and what it sent before is delivered.
func TestSendMessageOverQuotaIsRefusedToTheModel(t *testing.T) {
	t.Parallel()
	const orgYAML = `
company: { name: acme, timezone: Europe/Berlin }
mailbox: { sender_per_minute: 2 }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk }, { handle: alice, kind: human } ]
`
	e := setupTurnsOrg(t, orgYAML, nil)
	org, err := config.Parse([]byte(orgYAML))
	if err != nil {
		t.Fatal(err)
	}
	e.turns.delivery = delivery.New(org, e.mb, seatclient.New(nil, org), nil, nil, discard)
	e.begin(t, "k1", e.publish(t, "m1", "tell alice"))
	for round, want := range []string{"sent to alice", "sent to alice", "not sent: cto sent more than 2 messages in a minute (mailbox.sender_per_minute)"} {
		out, text := e.callFirstParty(t, "k1", "m1", round+1, firstparty.SendMessage, fmt.Sprintf(`{"to":"alice","text":"note %d"}`, round))
		if out.IsError != (round == 2) || !strings.Contains(text, want) {
			t.Fatalf("send_message %d: %+v %q; want %q", round, out, text, want)
		}
	}
	if got, err := e.mb.Recent(e.ctx, "alice", 10); err != nil || len(got) != 2 || got[0].Body != "note 0" || got[1].Body != "note 1" {
		t.Fatalf("alice's mailbox = %+v (%v); want the two accepted notes", got, err)
	}
}

// A provider's classified failure decides the round's retry: a rate limit
// retries after the provider's retry-after, a bad request or an auth
// failure fails the round for good, an exhausted quota quarantines the
// credential and a server error cools it off, and either fails the round
// over to another profile of the turn's pool.
func TestModelFailureDecidesTheRetry(t *testing.T) {
	t.Parallel()
	e := setupTurns(t, nil)
	cases := []struct {
		kind       string
		retryAfter time.Duration
		retryable  bool
		errType    string
	}{
		{crewlet.ProviderRateLimited, 7 * time.Second, true, ""},
		{crewlet.ProviderServerError, 0, false, crewlet.ErrorTypeProfileUnavailable},
		// A bad request will never succeed: the seat dead-letters its trigger.
		{crewlet.ProviderBadRequest, 0, false, crewlet.ErrorTypePermanent},
		{crewlet.ProviderAuth, 0, false, crewlet.ErrorTypeProvider},
		{crewlet.ProviderExhausted, time.Hour, false, crewlet.ErrorTypeProfileUnavailable},
	}
	for _, tc := range cases {
		t.Run(tc.kind, func(t *testing.T) {
			err := e.turns.modelFailure(e.ctx, "local", "turn-1",
				fmt.Errorf("chat: %w", &crewlet.ProviderError{Provider: "openai", Kind: tc.kind, RetryAfter: tc.retryAfter, Status: 429, Message: "m"}))
			var appErr *temporal.ApplicationError
			if !errors.As(err, &appErr) {
				t.Fatalf("got %v (%T); want a Temporal application error", err, err)
			}
			if appErr.NonRetryable() == tc.retryable {
				t.Fatalf("non-retryable = %v; want %v", appErr.NonRetryable(), !tc.retryable)
			}
			if tc.retryable && appErr.NextRetryDelay() != tc.retryAfter {
				t.Fatalf("next retry delay %s; want the provider's %s", appErr.NextRetryDelay(), tc.retryAfter)
			}
			if !tc.retryable && appErr.Type() != tc.errType {
				t.Fatalf("type %q; want %q", appErr.Type(), tc.errType)
			}
		})
	}
	if err := e.turns.modelFailure(e.ctx, "local", "turn-1", errors.New("connection reset")); err == nil || strings.Contains(err.Error(), "provider_error") {
		t.Fatalf("an unclassified failure: %v; want a plain retryable error", err)
	}
	health, err := e.store.CredentialHealth(e.ctx, []string{"local"})
	if err != nil {
		t.Fatal(err)
	}
	if h := health["local"]; h.Attempt != 1 || h.QuarantineUntil.IsZero() || h.LastFailureTurn != "turn-1" || h.CoolingUntil.IsZero() {
		t.Fatalf("credential local after the failures: %+v; want one quarantine, and the server error recorded and cooling it off", h)
	}
}
