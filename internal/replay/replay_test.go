package replay

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
	"github.com/crewlet/crewlet/internal/turnrules"
	"github.com/crewlet/crewlet/internal/wire"
)

// org's seat s01 keeps a ledger: profile tooled asks ledger__write for what
// it is told to record, then says what the tool answered; profile other asks
// it with other arguments; profile looker asks the read-only
// ledger__lookup, ledger__write and the first-party read-only recall, all
// with arguments the recorded turn never used, and answers with their
// results.
const org = `company: { name: acme }
prices: [ { model: tooled-model, input_mtok: 2, output_mtok: 10 } ]
profiles:
  tooled:
    provider: scripted
    model: tooled-model
    rules:
      - match: '^record (.*)'
        tools: [ { name: ledger__write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'recorded: {{index .Results 0}}'
  other:
    provider: scripted
    rules:
      - match: '^record (.*)'
        tools: [ { name: ledger__write, args: { text: 'INV-{{index .Groups 1}}' } } ]
        reply: 'recorded: {{index .Results 0}}'
  looker:
    provider: scripted
    rules:
      - match: '^record (.*)'
        tools:
          - { name: ledger__lookup, args: { text: 'INV-{{index .Groups 1}}' } }
          - { name: ledger__write, args: { text: 'INV-{{index .Groups 1}}' } }
          - { name: recall, args: { query: 'INV-{{index .Groups 1}}' } }
        reply: '{{index .Results 0}} | {{index .Results 1}} | {{index .Results 2}}'
roles:
  clerk: { charter: keeps the ledger, profile: tooled, max_rounds: 4 }
seats:
  - { handle: s01, role: clerk }
`

type bundle struct {
	engine *Engine
	store  *store.Store
	db     *pgxpool.Pool
	org    *config.Config
}

func setup(t *testing.T, doc string) bundle {
	t.Helper()
	c, err := config.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	url := testenv.MigratedDatabase(t)
	st := testenv.Store(t, url)
	db, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	return bundle{engine: &Engine{Store: st, Org: c, Log: slog.New(slog.DiscardHandler)}, store: st, db: db, org: c}
}

// record writes a finished two-round turn of s01 as the turn's steps write
// it: the trigger in the transcript, round 1 asking ledger__write, its
// result, and round 2's answer, each round with its receipt.
func (b bundle) record(t *testing.T, body string) wire.TurnRow {
	t.Helper()
	ctx := context.Background()
	if err := b.store.EnsureSeat(ctx, "s01", "clerk", crewlet.SeatAgent); err != nil {
		t.Fatal(err)
	}
	trigger := crewlet.Message{EventID: "e-" + body, Conversation: "c1", Type: crewlet.MessageChat, From: "boss", To: "s01", Body: body, SentAt: time.Now()}
	workKey := crewlet.WorkKey([]string{trigger.EventID})
	catalog, _ := json.Marshal(append([]crewlet.ToolSpec{
		{Name: "ledger__write", Description: "writes a line"},
		{Name: "ledger__lookup", Description: "looks a text up", ReadOnly: true},
	}, firstparty.Specs()...))
	turn, err := b.store.OpenTurn(ctx, wire.TurnRow{Seat: "s01", WorkKey: workKey, TurnID: crewlet.TurnWorkflowID("s01", workKey),
		Mail: []crewlet.Message{trigger}, Threads: []int{0}, Tools: catalog, MaxRounds: 4, Profile: "tooled"}, trigger)
	if err != nil {
		t.Fatal(err)
	}
	key := crewlet.ThreadKey(trigger.EventID)
	system := turnrules.SystemPrompt("s01", "clerk", "keeps the ledger", "acme")
	arg := strings.TrimPrefix(body, "record ")
	steps := []wire.TurnMessage{
		{Key: "user", Message: crewlet.ChatMessage{Role: "user", Content: turnrules.TriggerText(trigger)}},
		{Key: "r1", Round: 1, Message: crewlet.ChatMessage{Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "call_1_0", Name: "ledger__write", Args: json.RawMessage(`{"text":"` + arg + `"}`)}}}},
		{Key: "r1c0", Round: 1, Message: crewlet.ChatMessage{Role: "tool", ToolCallID: "call_1_0", Content: "written: " + arg}},
		{Key: "r2", Round: 2, Message: crewlet.ChatMessage{Role: "assistant", Content: "recorded: written: " + arg}},
	}
	for _, m := range steps {
		if m.Message.Role == "assistant" {
			sum := sha(system)
			if _, _, err := b.store.RecordRoundAnswer(ctx, wire.RoundRow{Seat: "s01", WorkKey: key, Round: m.Round, Profile: "tooled",
				SystemSHA256: sum, SystemBytes: len(system), InputTokens: 100, OutputTokens: 10, RecordedAt: time.Now(),
				Model: "tooled-model", Priced: true, NanoUSD: 1234, PriceVersion: "test"}, time.UTC, &m); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := b.store.AppendTurnMessage(ctx, "s01", key, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.store.FinishTurn(ctx, "s01", workKey, "done", "", "", 2); err != nil {
		t.Fatal(err)
	}
	return turn
}

// counts are the rows of everything a turn writes.
func (b bundle) counts(t *testing.T) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, table := range []string{"turns", "turn_messages", "turn_rounds", "usage_counters", "messages", "tickets", "tool_calls", "eval_usage"} {
		var n int64
		if err := b.db.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[table] = n
	}
	return out
}

// Nothing changed: the replay asks the same call, answers it from the
// record, and ends on the recorded answer byte for byte, with the same
// system prompt; it writes nothing of the seat's, only its eval charge.
func TestReplayWithNothingChangedReproducesTheRecordedAnswer(t *testing.T) {
	b := setup(t, org)
	turn := b.record(t, "record invoice 7")
	before := b.counts(t)
	r, err := b.engine.Replay(context.Background(), turn.TurnID, "tester", Change{})
	if err != nil {
		t.Fatal(err)
	}
	th := r.Threads[0]
	if !th.Same || th.Replayed != "recorded: written: invoice 7" || th.Recorded != th.Replayed {
		t.Fatalf("replayed %q, recorded %q, same %v; want both %q", th.Replayed, th.Recorded, th.Same, "recorded: written: invoice 7")
	}
	if len(th.Rounds) != 2 || len(th.Rounds[0].Calls) != 1 || th.Rounds[0].Calls[0].Outcome != Matched || th.Rounds[0].Calls[0].Recorded != crewlet.ThreadKey(turn.Mail[0].EventID)+":1:0" {
		t.Fatalf("rounds %+v; want round 1's call matched to the recorded r1c0", th.Rounds)
	}
	if !th.Rounds[0].SystemAsRecorded || !th.Rounds[1].SystemAsRecorded {
		t.Errorf("system prompt not as recorded: %+v", th.Rounds)
	}
	// The recorded cost is the receipts' as charged; the replay's is at the
	// org's price now ($2 and $10 a million tokens).
	if r.Recorded != (Tokens{Input: 200, Output: 20, NanoUSD: 2468}) || r.Replayed.Input == 0 ||
		r.Replayed.NanoUSD != r.Replayed.Input*2000+r.Replayed.Output*10_000 || r.Replayed.Unpriced != 0 {
		t.Errorf("recorded %+v, replayed %+v; want the receipts' 2468 nano-dollars and the replay's tokens at $2/$10", r.Recorded, r.Replayed)
	}
	var charged int64
	if err := b.db.QueryRow(context.Background(), `SELECT sum(nano_usd) FROM eval_usage WHERE turn_id = $1`, turn.TurnID).Scan(&charged); err != nil || charged != r.Replayed.NanoUSD {
		t.Errorf("eval_usage holds %d nano-dollars (%v); want the replay's %d", charged, err, r.Replayed.NanoUSD)
	}
	after := b.counts(t)
	for table, n := range before {
		want := n
		if table == "eval_usage" {
			want = n + 2
		}
		if after[table] != want {
			t.Errorf("%s has %d rows after the replay, %d before; want %d", table, after[table], n, want)
		}
	}
}

// Another profile asks the tool with other arguments: the call diverges,
// is not answered from the record, and the answer differs. A changed
// charter changes the system prompt sent.
func TestReplayWithAnotherProfileDivergesOnNewArguments(t *testing.T) {
	b := setup(t, org)
	turn := b.record(t, "record invoice 7")
	r, err := b.engine.Replay(context.Background(), turn.TurnID, "tester", Change{Profile: "other", Charter: "keeps the books"})
	if err != nil {
		t.Fatal(err)
	}
	th := r.Threads[0]
	call := th.Rounds[0].Calls[0]
	if call.Outcome != Diverged || call.Result != NoRecordText || string(call.Args) != `{"text": "INV-invoice 7"}` {
		t.Fatalf("call %+v; want diverged with the stated no-record answer", call)
	}
	if th.Same || th.Replayed != "recorded: "+NoRecordText || r.Diverged != 1 || r.Matched != 0 {
		t.Fatalf("replayed %q (same %v, diverged %d); want the no-record answer", th.Replayed, th.Same, r.Diverged)
	}
	if th.Rounds[0].SystemAsRecorded || th.Rounds[0].Profile != "other" {
		t.Errorf("round 1 %+v; want profile other and a system prompt unlike the recorded one", th.Rounds[0])
	}
}

// liveLedger makes the engine start the MCP test server as s01's ledger
// for a live replay, logging every call it gets to the returned file; the
// count says how often the servers were started.
func (b bundle) liveLedger(t *testing.T) (callsFile string, starts *int) {
	t.Helper()
	bin := toolstest.BuildT(t)
	dir := t.TempDir()
	callsFile = filepath.Join(dir, "calls")
	starts = new(int)
	b.engine.StartTools = func(ctx context.Context, handle string) (LiveTools, error) {
		*starts++
		s, err := tools.Start(ctx, []tools.ServerConfig{{Name: "ledger", Command: []string{bin},
			Env: []string{"TESTSERVER_COUNT_FILE=" + filepath.Join(dir, "count"), "TESTSERVER_CALLS_FILE=" + callsFile}}}, b.engine.Log)
		if s == nil {
			return nil, err
		}
		return s, err
	}
	return callsFile, starts
}

// With live_read_only, a new call to an MCP tool its server marks
// read-only runs for real and its result answers the model; a new write
// and a new call of crewlet's own read-only recall stay diverged and never
// run. Without it, nothing is started. Either way nothing of the seat's is
// written.
func TestLiveReplayRunsOnlyTheReadOnlyMCPCalls(t *testing.T) {
	b := setup(t, org)
	turn := b.record(t, "record invoice 7")
	callsFile, starts := b.liveLedger(t)
	before := b.counts(t)

	r, err := b.engine.Replay(context.Background(), turn.TurnID, "tester", Change{Profile: "looker"})
	if err != nil {
		t.Fatal(err)
	}
	if *starts != 0 || r.Live != 0 || r.Diverged != 3 {
		t.Fatalf("replay without live_read_only: servers started %d times, %d live, %d diverged; want none started, 0 live, 3 diverged", *starts, r.Live, r.Diverged)
	}

	r, err = b.engine.Replay(context.Background(), turn.TurnID, "tester", Change{Profile: "looker", LiveReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	calls := r.Threads[0].Rounds[0].Calls
	if len(calls) != 3 {
		t.Fatalf("round 1 asked %d calls; want 3: %+v", len(calls), calls)
	}
	const found = "found: INV-invoice 7 among 0 writes"
	for i, want := range []Call{
		{Name: "ledger__lookup", Outcome: Live, Result: found},
		{Name: "ledger__write", Outcome: Diverged, Result: NoRecordText, IsError: true},
		{Name: "recall", Outcome: Diverged, Result: NoRecordText, IsError: true},
	} {
		if got := calls[i]; got.Name != want.Name || got.Outcome != want.Outcome || got.Result != want.Result || got.IsError != want.IsError {
			t.Errorf("call %d: %s %s %q (error %v); want %s %s %q", i, got.Name, got.Outcome, got.Result, got.IsError, want.Name, want.Outcome, want.Result)
		}
	}
	if want := found + " | " + NoRecordText + " | " + NoRecordText; r.Threads[0].Replayed != want || r.Live != 1 || r.Diverged != 2 {
		t.Errorf("replayed %q, %d live, %d diverged; want %q, 1 live, 2 diverged", r.Threads[0].Replayed, r.Live, r.Diverged, want)
	}
	got := toolstest.Calls(t, callsFile)
	if len(got) != 1 || got[0].Tool != "lookup" || string(got[0].Args) != `{"text":"INV-invoice 7"}` {
		t.Errorf("the MCP server got %+v; want the one lookup of INV-invoice 7", got)
	}
	if *starts != 1 {
		t.Errorf("servers started %d times; want once", *starts)
	}
	after := b.counts(t)
	for table, n := range after {
		if table != "eval_usage" && n != before[table] {
			t.Errorf("%s: %d rows after the replays, %d before; want it unchanged", table, n, before[table])
		}
	}
}

// Each recorded call answers once: a model asking the same call twice gets
// the record once and the no-record answer the second time.
func TestReplayAnswersEachRecordedCallOnce(t *testing.T) {
	calls := []*recordedCall{{key: "k:1:0", name: "t", argsHash: "", result: crewlet.ChatMessage{Content: "done"}}}
	c := crewlet.ToolCall{Name: "t", Args: json.RawMessage(`{"a": 1}`)}
	calls[0].argsHash = approvals.ArgsHash(c.Args)
	if got := answerCall(calls, crewlet.ToolCall{Name: "t", Args: json.RawMessage(`{"a":1}`)}); got.Outcome != Matched || got.Result != "done" {
		t.Fatalf("first call %+v; want matched", got)
	}
	if got := answerCall(calls, c); got.Outcome != Diverged {
		t.Fatalf("second call %+v; want diverged", got)
	}
}

// Past evals.budget a replay is refused before its next model call.
func TestReplayPastTheEvalBudgetIsRefused(t *testing.T) {
	b := setup(t, org+"evals: { budget: { tokens_per_day: 1 } }\n")
	turn := b.record(t, "record invoice 7")
	_, err := b.engine.Replay(context.Background(), turn.TurnID, "tester", Change{})
	if crewlet.ErrorCode(err) != crewlet.ERATELIMITED || !strings.Contains(crewlet.ErrorMessage(err), "evals.budget.tokens_per_day") {
		t.Fatalf("replay past the budget: %v; want ERATELIMITED naming evals.budget.tokens_per_day", err)
	}
}

// What a replay cannot do is refused with what to do instead.
func TestReplayRefusals(t *testing.T) {
	b := setup(t, org)
	turn := b.record(t, "record invoice 7")
	for _, tt := range []struct {
		id     string
		change Change
		code   string
	}{
		{turn.TurnID, Change{LiveReadOnly: true}, crewlet.EUNAVAILABLE},
		{turn.TurnID, Change{Profile: "nope"}, crewlet.EINVALID},
		{turn.TurnID, Change{Revision: 99}, crewlet.ENOTFOUND},
		{"turn/s01/none", Change{}, crewlet.ENOTFOUND},
		{"not a turn", Change{}, crewlet.EINVALID},
	} {
		if _, err := b.engine.Replay(context.Background(), tt.id, "tester", tt.change); crewlet.ErrorCode(err) != tt.code {
			t.Errorf("replay %s %+v: %v; want %s", tt.id, tt.change, err, tt.code)
		}
	}
}

// A call an approval policy gated shows the recorded decision beside its
// recorded result.
func TestReplayShowsTheRecordedApprovalDecision(t *testing.T) {
	b := setup(t, org)
	ctx := context.Background()
	turn := b.record(t, "record invoice 7")
	callKey := crewlet.ThreadKey(turn.Mail[0].EventID) + ":1:0"
	a, _, err := b.store.CreateApproval(ctx, crewlet.Approval{ID: "ap-1", Handle: "s01", TurnID: turn.TurnID, CallKey: callKey, Tool: "ledger__write",
		Args: `{"text":"invoice 7"}`, ArgsHash: approvals.ArgsHash(json.RawMessage(`{"text":"invoice 7"}`)), Role: "clerk", Policy: "p",
		Approvers: []string{"olga"}, OnTimeout: "deny", Until: time.Now().Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.store.DecideApproval(ctx, a.ID, store.Decision{Status: crewlet.ApprovalApproved, By: "olga", Reason: "checked"}); err != nil {
		t.Fatal(err)
	}
	r, err := b.engine.Replay(ctx, turn.TurnID, "tester", Change{})
	if err != nil {
		t.Fatal(err)
	}
	call := r.Threads[0].Rounds[0].Calls[0]
	if call.Outcome != Matched || call.Approval != "approved by olga: checked" || call.Result != "written: invoice 7" {
		t.Fatalf("call %+v; want matched, with the recorded decision and result", call)
	}
	if rec := r.Threads[0].RecordedRounds[0].Calls[0]; rec.Approval != call.Approval {
		t.Errorf("recorded call %+v; want the same decision", rec)
	}
}

// A round's context is read as it stood when the round ran: a compaction
// summary made after the turn is left out, as the turn had no summary.
func TestContextIsCutAtTheRound(t *testing.T) {
	b := setup(t, org)
	ctx := context.Background()
	first := b.record(t, "record invoice 6")
	second := b.record(t, "record invoice 7")
	trigger := second.Mail[0]
	key := crewlet.ThreadKey(trigger.EventID)
	receipts, err := b.store.TurnRounds(ctx, "s01", key)
	if err != nil || len(receipts) == 0 {
		t.Fatalf("receipts %v, %v", receipts, err)
	}
	var seq int64
	if err := b.db.QueryRow(ctx, `SELECT seq FROM messages WHERE id = $1`, first.Mail[0].EventID).Scan(&seq); err != nil {
		t.Fatal(err)
	}
	if _, err := b.store.SaveSummary(ctx, wire.Summary{Seat: "s01", Conversation: "c1", Profile: "tooled",
		ConversationSummary: crewlet.ConversationSummary{ThroughID: first.Mail[0].EventID, ThroughSeq: seq, Covered: 1, Text: "made later"}}); err != nil {
		t.Fatal(err)
	}
	now, err := b.store.ThreadContext(ctx, "s01", "c1", trigger.EventID, key, turnrules.TriggerText)
	if err != nil || now.Summary == nil {
		t.Fatalf("context now: %+v, %v; want the summary made later", now, err)
	}
	then, err := b.store.ThreadContextAsOf(ctx, "s01", "c1", trigger.EventID, key, turnrules.TriggerText, receipts[0].RecordedAt)
	if err != nil || then.Summary != nil || len(then.Earlier) != 1 || len(then.Earlier[0].Messages) != 4 {
		t.Fatalf("context as of round 1: %+v, %v; want no summary and the first turn's exchange whole", then, err)
	}
}

// The maintenance duty deletes the charges no budget window counts any
// more, and keeps the month's.
func TestOldEvalChargesAreTrimmed(t *testing.T) {
	b := setup(t, org)
	ctx := context.Background()
	for _, at := range []time.Time{time.Now().Add(-40 * 24 * time.Hour), time.Now().Add(-30 * 24 * time.Hour)} {
		if err := b.store.ChargeEval(ctx, store.EvalCharge{TurnID: "turn/s01/k", Principal: "p", Profile: "tooled", InputTokens: 5, RecordedAt: at}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := b.store.TrimEvalUsage(ctx); err != nil || n != 1 {
		t.Fatalf("trimmed %d, %v; want the 40-day-old charge only", n, err)
	}
}

// A replay makes no more rounds than the role's max_rounds allows.
func TestReplayStopsAtMaxRounds(t *testing.T) {
	b := setup(t, strings.Replace(org, "max_rounds: 4", "max_rounds: 1", 1))
	turn := b.record(t, "record invoice 7")
	r, err := b.engine.Replay(context.Background(), turn.TurnID, "tester", Change{})
	if err != nil {
		t.Fatal(err)
	}
	th := r.Threads[0]
	if len(th.Rounds) != 1 || th.Same || !strings.Contains(th.Stopped, "max_rounds") {
		t.Fatalf("%d rounds, same %v, stopped %q; want one round, stopped at max_rounds", len(th.Rounds), th.Same, th.Stopped)
	}
}
