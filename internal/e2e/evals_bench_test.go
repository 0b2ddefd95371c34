package e2e

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// evalBenchTurns is how many recorded three-round turns
// BenchmarkEvalRunThroughput replays in one eval run.
const evalBenchTurns = 200

// BenchmarkEvalRunThroughput measures an eval run of evalBenchTurns
// recorded three-round turns (write, read the counter, answer; scripted
// provider, nothing changed, a contains and a same_tools check) at
// concurrency 8 on one node, from POST /evals/runs to the run done, in
// turns per second; beside it the p50 of single replays of the same turns
// (POST /turns/{handle}/{work_key}/replay, as BenchmarkReplayThreeRoundTurn
// measures it). Run it with
//
//	go test ./internal/e2e -run '^$' -bench EvalRunThroughput -benchtime 1x
func BenchmarkEvalRunThroughput(b *testing.B) {
	c, _ := newEvalCompany(b)
	defer c.stopAll()
	c.recordTurns(evalBenchTurns)
	var ds wire.Dataset
	if err := c.call(http.MethodPost, "/evals/datasets", wire.DatasetRequest{Name: "bench",
		DatasetSelector: wire.DatasetSelector{Seat: "s01", Since: time.Now().Add(-time.Hour)}}, &ds); err != nil {
		b.Fatal(err)
	}
	if ds.Size != evalBenchTurns {
		b.Fatalf("dataset of %d turns; want %d", ds.Size, evalBenchTurns)
	}
	var singles []time.Duration
	for _, id := range ds.Turns[:20] {
		handle, workKey, _ := crewlet.ParseTurnID(id)
		start := time.Now()
		var r replay.Report
		if err := c.call(http.MethodPost, "/turns/"+handle+"/"+workKey+"/replay", replay.Change{}, &r); err != nil {
			b.Fatal(err)
		}
		singles = append(singles, time.Since(start))
	}
	start := time.Now()
	var run wire.EvalRun
	if err := c.call(http.MethodPost, "/evals/runs", api.EvalRunRequest{Dataset: "bench", Concurrency: 8,
		Checks: []evals.Check{{Kind: evals.Contains, Text: "recorded: written:"}, {Kind: evals.SameTools}}}, &run); err != nil {
		b.Fatal(err)
	}
	testenv.Eventually(b, 5*time.Minute, "the run done", func() error {
		var runs []wire.EvalRun
		if err := c.call(http.MethodGet, "/evals/runs", nil, &runs); err != nil {
			return err
		}
		for _, r := range runs {
			if r.ID == run.ID && r.Status == wire.EvalDone {
				run = r
				return nil
			}
		}
		return fmt.Errorf("not done")
	})
	took := time.Since(start)
	if run.Totals.Passed != evalBenchTurns {
		b.Fatalf("totals %+v; want all %d turns passed", run.Totals, evalBenchTurns)
	}
	b.ReportMetric(float64(evalBenchTurns)/took.Seconds(), "turns/s")
	b.Logf("eval run of %d turns at concurrency 8: %s, %.1f turns/s", evalBenchTurns, took.Round(time.Millisecond), float64(evalBenchTurns)/took.Seconds())
	reportP50Max(b, "replay-", fmt.Sprintf("%d single replays of a 3-round turn, request to report", len(singles)), singles)
}
