package e2e

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// evalProfiles are replayOrg's tooled rules answered after a delay, so an
// eval run's replays are under way when a node is killed, and a judge that
// passes an answer saying what was recorded.
const evalProfiles = `  slow:
    provider: scripted
    delay: 150ms
    rules:
      - match: '^record (.*)'
        tools: [ { name: ledger__write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'recorded: {{index .Results 0}}, count {{.Last}}'
      - on_result: '^written: (.*)'
        tools: [ { name: ledger__read_counter, args: {} } ]
  judge:
    provider: scripted
    rules:
      - match: '(?s)Answer: recorded: written: '
        reply: 'PASS: it says what was written'
      - match: '(?s)Answer: '
        reply: 'FAIL: it does not say what was written'`

// newEvalCompany is newReplayCompany with evalProfiles, and its node;
// top are more top-level keys of the org file.
func newEvalCompany(t testing.TB, top ...string) (*company, *proc) {
	dir := t.TempDir()
	c := newCompany(t, replayOrg(t, filepath.Join(dir, "count"), filepath.Join(dir, "pid"), append([]string{evalProfiles}, top...)...))
	c.setenv("CREWLET_E2E_TOKEN_OPERATOR="+replayOperatorToken, "CREWLET_E2E_TOKEN_VIEWER="+replayViewerToken)
	c.token = replayOperatorToken
	c.apiServer()
	n1 := c.worker("n1")
	c.waitAttached(60 * time.Second)
	return c, n1
}

// recordTurns has s01 answer n messages, one after another, and waits
// until its n turns are recorded finished.
func (c *company) recordTurns(n int) {
	c.t.Helper()
	for i := range n {
		c.waitReply(c.send("s01", fmt.Sprintf("record invoice %d", i)), 60*time.Second)
	}
	testenv.Eventually(c.t, 30*time.Second, "the turns recorded finished", func() error {
		if got := c.count("SELECT count(*) FROM turns WHERE seat = 's01' AND finished_at IS NOT NULL"); got < int64(n) {
			return fmt.Errorf("%d of %d turns finished", got, n)
		}
		return nil
	})
}

// count is a number the query reads from the company's database.
func (c *company) count(query string, args ...any) int64 {
	c.t.Helper()
	db, err := pgxpool.New(context.Background(), c.dbURL)
	if err != nil {
		c.t.Fatal(err)
	}
	defer db.Close()
	var n int64
	if err := db.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		c.t.Fatal(err)
	}
	return n
}

// An eval run of 50 recorded turns whose worker node is killed (SIGKILL)
// mid-run finishes once on the other node: every turn scored exactly once,
// its replay's three rounds and its judge's call charged once each, the
// charges summing to the report's tokens.
func TestEvalRunSurvivesAKilledNodeAndChargesOnce(t *testing.T) {
	const turns = 50
	c, n1 := newEvalCompany(t)
	c.recordTurns(turns)
	var ds wire.Dataset
	if err := c.call(http.MethodPost, "/evals/datasets", wire.DatasetRequest{Name: "ledger",
		DatasetSelector: wire.DatasetSelector{Seat: "s01", Since: time.Now().Add(-time.Hour)}}, &ds); err != nil {
		t.Fatal(err)
	}
	if ds.Size != turns {
		t.Fatalf("dataset of %d turns; want %d", ds.Size, turns)
	}
	c.worker("n2")
	var run wire.EvalRun
	if err := c.call(http.MethodPost, "/evals/runs", api.EvalRunRequest{Dataset: "ledger", Change: replay.Change{Profile: "slow"},
		Checks: []evals.Check{{Kind: evals.Contains, Text: "recorded: written: invoice"}, {Kind: evals.SameTools},
			{Kind: evals.Judge, Profile: "judge", Rubric: "says what was written"}}}, &run); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "some turns scored, not all", func() error {
		if n := c.count("SELECT count(*) FROM eval_results WHERE run = $1 AND status = 'scored'", run.ID); n < 8 {
			return fmt.Errorf("%d scored", n)
		}
		return nil
	})
	n1.kill(t)
	atKill := c.count("SELECT count(*) FROM eval_results WHERE run = $1 AND status = 'scored'", run.ID)
	if atKill >= turns {
		t.Fatalf("all %d turns were scored before the kill; the run must be under way", atKill)
	}
	t.Logf("%d of %d turns scored when n1 was killed", atKill, turns)
	testenv.Eventually(t, 3*time.Minute, "the run done", func() error {
		if err := c.call(http.MethodGet, "/evals/runs/"+run.ID, nil, &run); err != nil {
			return err
		}
		if run.Status != wire.EvalDone {
			return fmt.Errorf("status %s, %d scored", run.Status, run.Totals.Scored)
		}
		return nil
	})
	if run.Totals.Scored != turns || run.Totals.Passed != turns || len(run.Results) != turns {
		t.Fatalf("totals %+v, %d results; want all %d turns scored and passed", run.Totals, len(run.Results), turns)
	}
	if n := c.count("SELECT count(*) FROM eval_results WHERE run = $1", run.ID); n != turns {
		t.Errorf("%d result rows; want one per turn, %d", n, turns)
	}
	// Three replayed rounds and one judge's call per turn, each charged
	// once whatever the kill interrupted.
	if n := c.count("SELECT count(*) FROM eval_usage WHERE run = $1", run.ID); n != 4*turns {
		t.Errorf("%d charges of the run; want %d: three rounds and a judge per turn, none twice", n, 4*turns)
	}
	charged := c.count("SELECT COALESCE(sum(input_tokens + output_tokens), 0) FROM eval_usage WHERE run = $1", run.ID)
	var replayed int64
	for _, res := range run.Results {
		replayed += res.InputTokens + res.OutputTokens
		if len(res.Checks) != 3 || res.Replayed != res.Recorded {
			t.Errorf("%s: checks %+v, replayed %q, recorded %q; want three checks and the recorded answer", res.Turn, res.Checks, res.Replayed, res.Recorded)
		}
	}
	if total := run.Totals.InputTokens + run.Totals.OutputTokens; charged != replayed || charged != total || charged == 0 {
		t.Errorf("charged %d tokens; the turns' results sum to %d, the totals to %d; want the three equal", charged, replayed, total)
	}
	out, err := c.cli("eval", "show", run.ID, "--token", replayOperatorToken)
	if run.Totals.RecordedNanoUSD == 0 {
		t.Errorf("the run's totals give the recorded turns no cost: %+v", run.Totals)
	}
	if err != nil || !strings.Contains(out, "pass rate: 100.0%") || !strings.Contains(out, "cost: $") || !strings.Contains(out, "the recorded turns cost $") {
		t.Errorf("crewlet eval show: %v\n%s", err, out)
	}
	t.Logf("crewlet eval show:\n%s", out)
}

// Bad dataset and run requests are refused, each saying what was wrong;
// a viewer may read evals but not run them.
func TestEvalRequestsRefusedWithWhatWasWrong(t *testing.T) {
	c, _ := newEvalCompany(t)
	_, turn := c.recordedTurn("record invoice 1")
	since := time.Now().Add(-time.Hour)
	ok := func(status int, body []byte, err error) {
		t.Helper()
		if err != nil || status >= 300 {
			t.Fatalf("%d %s %v", status, body, err)
		}
	}
	ok(c.raw(http.MethodPost, "/evals/datasets", wire.DatasetRequest{Name: "one", DatasetSelector: wire.DatasetSelector{Turns: []string{turn.TurnID}}}))
	many := make([]string, wire.MaxDatasetTurns+1)
	for i := range many {
		many[i] = fmt.Sprintf("turn/s01/k%d", i)
	}
	for _, c2 := range []struct {
		name   string
		path   string
		body   any
		status int
		says   string
	}{
		{"a name that is no name", "/evals/datasets", wire.DatasetRequest{Name: "Bad Name", DatasetSelector: wire.DatasetSelector{Seat: "s01", Since: since}}, 400, "is not a name"},
		{"an unknown seat", "/evals/datasets", wire.DatasetRequest{Name: "x", DatasetSelector: wire.DatasetSelector{Seat: "nobody", Since: since}}, 400, "is not in the org; `crewlet seats` lists them"},
		{"an unknown role", "/evals/datasets", wire.DatasetRequest{Name: "x", DatasetSelector: wire.DatasetSelector{Role: "nobody", Since: since}}, 400, "is not in the org; `crewlet config show` lists the roles"},
		{"an empty window", "/evals/datasets", wire.DatasetRequest{Name: "x", DatasetSelector: wire.DatasetSelector{Seat: "s01", Since: since, Until: since}}, 400, "the window is empty"},
		{"a window with no turn", "/evals/datasets", wire.DatasetRequest{Name: "x", DatasetSelector: wire.DatasetSelector{Seat: "s01", Since: since.Add(-48 * time.Hour), Until: since}}, 400, "no finished turn of s01"},
		{"over the bound", "/evals/datasets", wire.DatasetRequest{Name: "x", DatasetSelector: wire.DatasetSelector{Turns: many}}, 400, "at most 1000"},
		{"a turn not recorded", "/evals/datasets", wire.DatasetRequest{Name: "x", DatasetSelector: wire.DatasetSelector{Turns: []string{"turn/s01/nope"}}}, 400, "not finished turns: turn/s01/nope"},
		{"no turns said", "/evals/datasets", wire.DatasetRequest{Name: "x"}, 400, "say which turns"},
		{"a name taken", "/evals/datasets", wire.DatasetRequest{Name: "one", DatasetSelector: wire.DatasetSelector{Turns: []string{turn.TurnID}}}, 409, "dataset one exists"},
		{"an unknown dataset", "/evals/runs", api.EvalRunRequest{Dataset: "nothing"}, 404, "no dataset nothing"},
		{"an unknown profile", "/evals/runs", api.EvalRunRequest{Dataset: "one", Change: replay.Change{Profile: "nobody"}}, 400, "is not in the org; `crewlet profiles` lists them"},
		{"a concurrency out of range", "/evals/runs", api.EvalRunRequest{Dataset: "one", Concurrency: 33}, 400, "concurrency 33 is out of range"},
		{"a check that cannot run", "/evals/runs", api.EvalRunRequest{Dataset: "one", Checks: []evals.Check{{Kind: evals.Regex, Pattern: "("}}}, 400, "is not a regular expression"},
	} {
		status, body, err := c.raw(http.MethodPost, c2.path, c2.body)
		if err != nil || status != c2.status || !strings.Contains(string(body), c2.says) {
			t.Errorf("%s: %d %s %v; want %d saying %q", c2.name, status, body, err, c2.status, c2.says)
		}
	}
	if status, body, _ := c.rawAs(replayViewerToken, http.MethodPost, "/evals/runs", api.EvalRunRequest{Dataset: "one"}); status != http.StatusForbidden {
		t.Errorf("a viewer's run: %d %s; want 403", status, body)
	}
	if status, body, _ := c.rawAs(replayViewerToken, http.MethodGet, "/evals/datasets/one", nil); status != http.StatusOK || !strings.Contains(string(body), turn.TurnID) {
		t.Errorf("a viewer's read of the dataset: %d %s; want 200 with its turn", status, body)
	}
	rows, err := c.store().Audit(context.Background(), store.AuditFilter{Principal: "opal", Action: "POST /evals/datasets", Limit: 20})
	if err != nil || len(rows) != 10 {
		t.Errorf("audit of the operator's dataset requests: %d rows, %v; want 10, the refused ones too", len(rows), err)
	}
}

// An eval run stops once evals.budget is spent: the turn its budget check
// refused is marked refused with what its replay spent charged, no turn
// starts after it, the rest are refused, and the run ends
// budget_exhausted.
func TestEvalRunStopsWhenTheBudgetIsSpent(t *testing.T) {
	const turns = 6
	// A replay of one of these turns spends about 3,300 tokens: two turns
	// fit under the cap, the third does not.
	c, _ := newEvalCompany(t, "evals:\n  budget:\n    tokens_per_day: 8000")
	c.recordTurns(turns)
	if err := c.call(http.MethodPost, "/evals/datasets", wire.DatasetRequest{Name: "few",
		DatasetSelector: wire.DatasetSelector{Seat: "s01", Since: time.Now().Add(-time.Hour)}}, nil); err != nil {
		t.Fatal(err)
	}
	var run wire.EvalRun
	if err := c.call(http.MethodPost, "/evals/runs", api.EvalRunRequest{Dataset: "few", Concurrency: 1}, &run); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the run ended", func() error {
		if err := c.call(http.MethodGet, "/evals/runs/"+run.ID, nil, &run); err != nil {
			return err
		}
		if run.Status == wire.EvalRunning {
			return fmt.Errorf("%d scored", run.Totals.Scored)
		}
		return nil
	})
	if run.Status != wire.EvalBudgetExhausted || run.Totals.Scored == 0 || run.Totals.Refused == 0 || run.Totals.Scored+run.Totals.Refused != turns {
		t.Fatalf("status %s, totals %+v; want budget_exhausted, some turns scored and the rest refused", run.Status, run.Totals)
	}
	for i, res := range run.Results {
		want := wire.EvalTurnScored
		if i >= run.Totals.Scored {
			want = wire.EvalTurnRefused
		}
		if res.Status != want || (want == wire.EvalTurnRefused && !strings.Contains(res.Error, "eval budget")) {
			t.Errorf("turn %d: %s %q; want %s, saying the eval budget was spent", i, res.Status, res.Error, want)
		}
	}
	charged := c.count("SELECT COALESCE(sum(input_tokens + output_tokens), 0) FROM eval_usage WHERE run = $1", run.ID)
	if charged <= 8000 || charged != run.Totals.InputTokens+run.Totals.OutputTokens {
		t.Errorf("charged %d tokens, totals %+v; want past the cap (the refused turn's rounds before the refusal charged) and equal to the totals", charged, run.Totals)
	}
}
