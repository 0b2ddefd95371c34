package store_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// A turn's result is written once with its charges: a second attempt at
// the same (run, turn), as a retried or resumed replay makes, writes and
// charges nothing, and the run's pending turns are those not written.
func TestEvalResultIsWrittenAndChargedOnce(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	turns := []string{"turn/s01/k1", "turn/s01/k2", "turn/s01/k3"}
	if _, err := st.CreateDataset(ctx, wire.Dataset{Name: "d", CreatedBy: "opal", Turns: turns}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateEvalRun(ctx, wire.EvalRun{ID: "r1", Dataset: "d", Change: json.RawMessage(`{}`), Checks: json.RawMessage(`[]`), Concurrency: 2, Principal: "opal"}); err != nil {
		t.Fatal(err)
	}
	passed := true
	outcome := store.EvalOutcome{Run: "r1", Turn: "turn/s01/k2", Status: wire.EvalTurnScored, Passed: &passed, Report: map[string]any{"threads": []any{}},
		Charges: []store.EvalCharge{
			{TurnID: "turn/s01/k2", Principal: "opal", Profile: "p", InputTokens: 100, OutputTokens: 10, RecordedAt: time.Now()},
			{TurnID: "turn/s01/k2", Principal: "opal", Profile: "judge", InputTokens: 20, OutputTokens: 2, RecordedAt: time.Now()},
		}}
	for attempt, want := range []bool{true, false} {
		wrote, err := st.RecordEvalResult(ctx, outcome)
		if err != nil || wrote != want {
			t.Fatalf("attempt %d: wrote %v, %v; want %v", attempt+1, wrote, err, want)
		}
	}
	var charges, tokens int64
	if err := db.QueryRow(ctx, `SELECT count(*), COALESCE(sum(input_tokens + output_tokens), 0) FROM eval_usage WHERE run = 'r1'`).Scan(&charges, &tokens); err != nil {
		t.Fatal(err)
	}
	if charges != 2 || tokens != 132 {
		t.Errorf("%d charges of %d tokens; want the first attempt's 2 of 132", charges, tokens)
	}
	plan, err := st.EvalPending(ctx, "r1")
	if err != nil || len(plan.Turns) != 2 || plan.Turns[0] != "turn/s01/k1" || plan.Turns[1] != "turn/s01/k3" || plan.Concurrency != 2 {
		t.Fatalf("pending %+v, %v; want k1 and k3 in the dataset's order, concurrency 2", plan, err)
	}
	if err := st.FinishEvalRun(ctx, "r1", wire.EvalBudgetExhausted); err != nil {
		t.Fatal(err)
	}
	run, err := st.EvalRun(ctx, "r1", true)
	if err != nil {
		t.Fatal(err)
	}
	if run.Status != wire.EvalBudgetExhausted || run.Totals.Scored != 1 || run.Totals.Refused != 2 || run.Totals.InputTokens != 120 || run.Totals.PassRate != 1 {
		t.Errorf("run %s, totals %+v; want budget_exhausted, 1 scored, 2 refused, 120 input tokens, pass rate 1", run.Status, run.Totals)
	}
}
