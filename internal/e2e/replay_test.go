package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
	"github.com/crewlet/crewlet/internal/wire"
)

// replayOrg is toolsOrg's clerk with a three-round rule (write, read the
// counter, answer), priced at $3 and $15 a million tokens, and three more profiles to replay it on: terse answers
// in other words from the same calls, other writes other arguments, looker
// asks the read-only ledger__lookup and a write with other arguments and
// answers with both results. Its MCP server logs every call it gets in the
// file calls beside countFile (callsFile). Its tokens are an operator's
// and a viewer's. extra are more profiles, in YAML indented under
// profiles.
func replayOrg(t testing.TB, countFile, pidFile string, extra ...string) string {
	t.Helper()
	bin := toolstest.BuildT(t)
	rules := func(args, reply string) string {
		return fmt.Sprintf(`
    rules:
      - match: '^record (.*)'
        tools: [ { name: ledger__write, args: { text: '%s' } } ]
        reply: '%s'
      - on_result: '^written: (.*)'
        tools: [ { name: ledger__read_counter, args: {} } ]`, args, reply)
	}
	org := fmt.Sprintf(`company: { name: replayco }
prices: [ { model: clerk-model, input_mtok: 3, output_mtok: 15 } ]
auth:
  tokens:
    - { name: opal, role: operator, token_env: CREWLET_E2E_TOKEN_OPERATOR }
    - { name: vic, role: viewer, token_env: CREWLET_E2E_TOKEN_VIEWER }
profiles:
  tooled:
    provider: scripted
    model: clerk-model%s
  terse:
    provider: scripted%s
  other:
    provider: scripted%s
  looker:
    provider: scripted
    rules:
      - match: '^record (.*)'
        tools:
          - { name: ledger__lookup, args: { text: 'INV-{{index .Groups 1}}' } }
          - { name: ledger__write, args: { text: 'INV-{{index .Groups 1}}' } }
        reply: '{{index .Results 0}} | {{index .Results 1}}'
%s
roles:
  clerk:
    charter: keeps the ledger
    profile: tooled
    mcp:
      - { name: ledger, command: [ %q ], env: [ "TESTSERVER_COUNT_FILE=%s", "TESTSERVER_PID_FILE=%s", "TESTSERVER_CALLS_FILE=%s" ] }
    sandbox: { write: [ %q, %q ] }
seats:
  - { handle: s01, role: clerk }
`, rules("{{index .Groups 1}}", "recorded: {{index .Results 0}}, count {{.Last}}"),
		rules("{{index .Groups 1}}", "done ({{.Last}} so far)"),
		rules("INV-{{index .Groups 1}}", "recorded: {{index .Results 0}}, count {{.Last}}"),
		strings.Join(extra, "\n"), bin, countFile, pidFile, callsFile(countFile), filepath.Dir(countFile), filepath.Dir(pidFile))
	return writeFile(t, "org.yaml", org)
}

// callsFile is where replayOrg's MCP server logs the calls it gets.
func callsFile(countFile string) string {
	return filepath.Join(filepath.Dir(countFile), "calls")
}

const (
	replayOperatorToken = "e2e-operator-token-0123456789"
	replayViewerToken   = "e2e-viewer-token-0123456789"
)

// newReplayCompany starts replayOrg's company with the operator's token.
func newReplayCompany(t testing.TB) (c *company, countFile, pidFile string) {
	dir := t.TempDir()
	countFile, pidFile = filepath.Join(dir, "count"), filepath.Join(dir, "pid")
	c = newCompany(t, replayOrg(t, countFile, pidFile))
	c.setenv("CREWLET_E2E_TOKEN_OPERATOR="+replayOperatorToken, "CREWLET_E2E_TOKEN_VIEWER="+replayViewerToken)
	c.token = replayOperatorToken
	c.apiServer()
	c.worker("n1")
	c.waitAttached(60 * time.Second)
	return c, countFile, pidFile
}

// recordedTurn sends text to s01 and returns its reply and its turn, once
// the turn is recorded finished.
func (c *company) recordedTurn(text string) (string, wire.TurnRow) {
	c.t.Helper()
	msg := c.send("s01", text)
	reply := c.waitReply(msg, 60*time.Second)
	var turn wire.TurnRow
	testenv.Eventually(c.t, 30*time.Second, "the turn recorded finished", func() error {
		var turns []wire.TurnRow
		if err := c.call(http.MethodGet, "/seats/s01/turns?limit=5", nil, &turns); err != nil {
			return err
		}
		for _, t := range turns {
			if slices.ContainsFunc(t.Mail, func(m crewlet.Message) bool { return m.EventID == msg.EventID }) && t.FinishedAt != nil {
				turn = t
				return nil
			}
		}
		return fmt.Errorf("no finished turn of %s yet", msg.EventID)
	})
	// The seat told its last event of the turn, and acked its mail: what
	// the turn changes is all there.
	c.waitAnswered(30*time.Second, "s01")
	testenv.Eventually(c.t, 30*time.Second, "the turn's turn_finished event", func() error {
		entries, err := c.mailbox().Redis().XRevRangeN(context.Background(), events.SeatStream(c.prefix, "s01"), "+", "-", 50).Result()
		if err != nil {
			return err
		}
		for _, e := range entries {
			if ev, _ := e.Values["e"].(string); strings.Contains(ev, events.TurnFinished) && strings.Contains(ev, turn.WorkKey) {
				return nil
			}
		}
		return fmt.Errorf("no turn_finished event of %s yet", turn.TurnID)
	})
	return reply, turn
}

func (c *company) replay(turn wire.TurnRow, change replay.Change) replay.Report {
	c.t.Helper()
	var r replay.Report
	if err := c.call(http.MethodPost, "/turns/s01/"+turn.WorkKey+"/replay", change, &r); err != nil {
		c.t.Fatalf("replay %s %+v: %v", turn.TurnID, change, err)
	}
	return r
}

// world is what of the company a turn changes: the rows it writes, the
// tokens it charges, the Redis streams it appends to (mail and events).
func (c *company) world() map[string]int64 {
	c.t.Helper()
	ctx := context.Background()
	out := map[string]int64{}
	db, err := pgxpool.New(ctx, c.dbURL)
	if err != nil {
		c.t.Fatal(err)
	}
	defer db.Close()
	for _, table := range []string{"messages", "completion_ledger", "agent_diary", "episodes", "turns", "turn_messages", "turn_rounds",
		"tool_calls", "tickets", "approvals", "conversation_summaries", "seat_events", "person_mail", "eval_usage"} {
		var n int64
		if err := db.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n); err != nil {
			c.t.Fatal(err)
		}
		out[table] = n
	}
	var tokens int64
	if err := db.QueryRow(ctx, "SELECT COALESCE(sum(tokens), 0) FROM usage_counters").Scan(&tokens); err != nil {
		c.t.Fatal(err)
	}
	out["usage_counters tokens"] = tokens
	rdb := c.mailbox().Redis()
	iter := rdb.Scan(ctx, 0, c.prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		if kind, _ := rdb.Type(ctx, key).Result(); kind != "stream" {
			continue
		}
		n, err := rdb.XLen(ctx, key).Result()
		if err != nil && err != redis.Nil {
			c.t.Fatal(err)
		}
		out["redis "+strings.TrimPrefix(key, c.prefix)] = n
	}
	if err := iter.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// sameWorld fails unless after is before but for the replays' eval
// charges.
func sameWorld(t *testing.T, before, after map[string]int64) {
	t.Helper()
	for k, n := range after {
		if k == "eval_usage" {
			if n <= before[k] {
				t.Errorf("eval_usage: %d rows after the replays, %d before; want the replays charged", n, before[k])
			}
			continue
		}
		if n != before[k] {
			t.Errorf("%s: %d after the replays, %d before; want it unchanged", k, n, before[k])
		}
	}
	for k := range before {
		if _, ok := after[k]; !ok {
			t.Errorf("%s is gone after the replays", k)
		}
	}
}

// A recorded three-round turn (write, read the counter, answer) replayed:
// unchanged, it ends on the recorded answer byte for byte with every call
// matched; on a profile whose rule answers in other words, the answer
// differs and the calls are still answered from the record; on one that
// writes other arguments, the write diverges and the model is told there
// is no record. The MCP server counts no call and its process is the same,
// and the seat's rows, tokens, mail and events are as they were; the CLI
// prints the same side by side; a viewer may not replay.
func TestReplayAnswersFromTheRecordAndTouchesNothing(t *testing.T) {
	c, countFile, pidFile := newReplayCompany(t)
	child := readPID(t, pidFile)
	reply, turn := c.recordedTurn("record invoice 7")
	if want := "recorded: written: invoice 7, count 1"; reply != want {
		t.Fatalf("recorded reply %q; want %q", reply, want)
	}
	if turn.Rounds != 3 {
		t.Fatalf("recorded turn has %d rounds; want 3", turn.Rounds)
	}
	writes := len(toolstest.Writes(t, countFile))
	if writes != 1 {
		t.Fatalf("the MCP server counted %d writes of the recorded turn; want 1", writes)
	}
	calls := len(toolstest.Calls(t, callsFile(countFile)))
	if calls != 2 {
		t.Fatalf("the MCP server got %d calls of the recorded turn; want 2 (write, read_counter)", calls)
	}
	before := c.world()

	same := c.replay(turn, replay.Change{})
	th := same.Threads[0]
	if !th.Same || th.Replayed != reply || th.Recorded != reply {
		t.Fatalf("unchanged replay: replayed %q, recorded %q (same %v); want both the reply %q", th.Replayed, th.Recorded, th.Same, reply)
	}
	if len(th.Rounds) != 3 || same.Matched != 2 || same.Diverged != 0 {
		t.Fatalf("unchanged replay: %d rounds, %d matched, %d diverged; want 3, 2, 0", len(th.Rounds), same.Matched, same.Diverged)
	}
	if same.Recorded.Input == 0 || same.Recorded.NanoUSD == 0 || same.Replayed != same.Recorded {
		t.Errorf("tokens and cost recorded %+v, replayed %+v; want the same tokens at the same price, priced", same.Recorded, same.Replayed)
	}

	terse := c.replay(turn, replay.Change{Profile: "terse"})
	if th := terse.Threads[0]; th.Same || th.Replayed != "done (1 so far)" || terse.Matched != 2 || terse.Diverged != 0 {
		t.Fatalf("replay on terse: %q, %d matched, %d diverged; want %q from the recorded calls", th.Replayed, terse.Matched, terse.Diverged, "done (1 so far)")
	}

	other := c.replay(turn, replay.Change{Profile: "other"})
	call := other.Threads[0].Rounds[0].Calls[0]
	if call.Outcome != replay.Diverged || call.Result != replay.NoRecordText || other.Threads[0].Same {
		t.Fatalf("replay on other: first call %+v, answer %q; want the write diverged and told there is no record", call, other.Threads[0].Replayed)
	}
	// A new read-only call without live_read_only diverges like a write.
	looker := c.replay(turn, replay.Change{Profile: "looker"})
	if looker.Diverged != 2 || looker.Live != 0 {
		t.Fatalf("replay on looker: %d diverged, %d live; want the lookup and the write diverged", looker.Diverged, looker.Live)
	}

	out, err := c.cli("replay", turn.TurnID, "--profile", "terse", "--charter", writeFile(t, "charter.txt", "keeps the books"), "--token", replayOperatorToken)
	if err != nil || !strings.Contains(out, "differs") || !strings.Contains(out, "2 matched, 0 diverged") || !strings.Contains(out, "system prompt changed") {
		t.Fatalf("crewlet replay: %v\n%s", err, out)
	}
	if status, body, _ := c.rawAs(replayViewerToken, http.MethodPost, "/turns/s01/"+turn.WorkKey+"/replay", replay.Change{}); status != http.StatusForbidden {
		t.Fatalf("a viewer's replay: %d %s; want 403", status, body)
	}

	after := c.world()
	sameWorld(t, before, after)
	if n := len(toolstest.Writes(t, countFile)); n != writes {
		t.Errorf("the MCP server counted %d writes after the replays, %d before; want none more", n, writes)
	}
	if n := len(toolstest.Calls(t, callsFile(countFile))); n != calls {
		t.Errorf("the MCP server got %d calls after the replays, %d before; want none more", n, calls)
	}
	if got := readPID(t, pidFile); got != child {
		t.Errorf("the MCP child's pid file says %d after the replays, %d before; want no process started", got, child)
	}
	rows, err := c.store().Audit(context.Background(), store.AuditFilter{Principal: "opal", Action: "POST /turns/{handle}/{work_key}/replay", Limit: 10})
	if err != nil || len(rows) != 5 {
		t.Errorf("audit of the operator's replays: %d rows, %v; want 5", len(rows), err)
	}
}

// With live_read_only, a replay whose model looks the invoice up in a new
// way runs that read-only call for real on the worker node: the MCP
// server gets exactly that call and the model its real result, while the
// new write in the same round stays diverged and never reaches the server.
// The seat's rows, tokens, mail and events are as they were. The CLI's
// --live-read-only and an eval run with live_read_only do the same, and a
// refusal on the node is answered as the API's own.
func TestLiveReplayRunsTheNewReadOnlyCallOnAWorker(t *testing.T) {
	c, countFile, _ := newReplayCompany(t)
	_, turn := c.recordedTurn("record invoice 7")
	log := callsFile(countFile)
	recorded := len(toolstest.Calls(t, log))
	before := c.world()

	r := c.replay(turn, replay.Change{Profile: "looker", LiveReadOnly: true})
	const found = "found: INV-invoice 7 among 1 writes"
	calls := r.Threads[0].Rounds[0].Calls
	if len(calls) != 2 || calls[0].Outcome != replay.Live || calls[0].Result != found || calls[1].Outcome != replay.Diverged || calls[1].Result != replay.NoRecordText {
		t.Fatalf("round 1's calls %+v; want ledger__lookup live with %q, ledger__write diverged", calls, found)
	}
	if want := found + " | " + replay.NoRecordText; r.Threads[0].Replayed != want || r.Live != 1 || r.Diverged != 1 {
		t.Fatalf("replayed %q, %d live, %d diverged; want %q from the real result, 1 live, 1 diverged", r.Threads[0].Replayed, r.Live, r.Diverged, want)
	}
	got := toolstest.Calls(t, log)[recorded:]
	if len(got) != 1 || got[0].Tool != "lookup" || string(got[0].Args) != `{"text":"INV-invoice 7"}` {
		t.Fatalf("the MCP server got %+v in the replay; want exactly the lookup of INV-invoice 7", got)
	}

	// A refusal on the worker node comes back as the API's own would.
	if status, body, _ := c.rawAs(replayOperatorToken, http.MethodPost, "/turns/s01/nope/replay", replay.Change{LiveReadOnly: true}); status != http.StatusNotFound || !strings.Contains(string(body), "nope") {
		t.Errorf("a live replay of an unknown turn: %d %s; want 404 naming it", status, body)
	}

	out, err := c.cli("replay", turn.TurnID, "--profile", "looker", "--live-read-only", "--token", replayOperatorToken)
	if err != nil || !strings.Contains(out, "0 matched, 1 diverged (never run), 1 live") {
		t.Fatalf("crewlet replay --live-read-only: %v\n%s", err, out)
	}

	if err := c.call(http.MethodPost, "/evals/datasets", wire.DatasetRequest{Name: "one",
		DatasetSelector: wire.DatasetSelector{Turns: []string{turn.TurnID}}}, nil); err != nil {
		t.Fatal(err)
	}
	var run wire.EvalRun
	if err := c.call(http.MethodPost, "/evals/runs", api.EvalRunRequest{Dataset: "one", Change: replay.Change{Profile: "looker", LiveReadOnly: true},
		Checks: []evals.Check{{Kind: evals.Contains, Text: found}}}, &run); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the eval run done", func() error {
		if err := c.call(http.MethodGet, "/evals/runs/"+run.ID, nil, &run); err != nil {
			return err
		}
		if run.Status != wire.EvalDone {
			return fmt.Errorf("status %s", run.Status)
		}
		return nil
	})
	if run.Totals.Passed != 1 {
		t.Errorf("eval run totals %+v; want its one turn passed, its answer holding the lookup's real result", run.Totals)
	}
	got = toolstest.Calls(t, log)[recorded:]
	if len(got) != 3 || slices.ContainsFunc(got, func(c toolstest.Call) bool { return c.Tool != "lookup" }) {
		t.Errorf("the MCP server got %+v from the replay, the CLI's and the eval run's; want three lookups and nothing else", got)
	}
	if n := len(toolstest.Writes(t, countFile)); n != 1 {
		t.Errorf("the MCP server counted %d writes; want the recorded turn's one", n)
	}
	sameWorld(t, before, c.world())
}
