package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// Evals are the steps of an eval run (workflows.EvalRun): each turn's
// replay is the replay engine's, its charges held back and written with
// the turn's result in one transaction, so a retried or resumed turn is
// never charged or scored twice.
type Evals struct {
	Store *store.Store
	// Engine replays the turns; its Charge is set per turn.
	Engine *replay.Engine
	Grader evals.Grader
	// Beat is how often a turn's replay heartbeats; zero is evalBeat.
	Beat time.Duration
	Log  *slog.Logger
}

// evalBeat is how often a replay heartbeats, well inside the workflow's
// heartbeat timeout.
const evalBeat = 2 * time.Second

// EvalPlan reads the turns of the run still pending.
func (a *Evals) EvalPlan(ctx context.Context, in crewlet.EvalRunInput) (crewlet.EvalPlan, error) {
	p, err := a.Store.EvalPending(ctx, in.Run)
	if err != nil {
		return crewlet.EvalPlan{}, err
	}
	return crewlet.EvalPlan{Turns: p.Turns, Concurrency: p.Concurrency}, nil
}

// EvalTurn replays one turn of the run with the run's change and scores it
// with the run's checks. A turn already scored is skipped; a turn the
// budget refuses is left pending for EvalFinish to mark.
func (a *Evals) EvalTurn(ctx context.Context, in crewlet.EvalTurnInput) (crewlet.EvalTurnOutput, error) {
	setup, err := a.Store.EvalTurnSetup(ctx, in.Run, in.Turn)
	if err != nil {
		return crewlet.EvalTurnOutput{}, err
	}
	if setup.Status != wire.EvalTurnPending {
		return crewlet.EvalTurnOutput{Status: crewlet.EvalTurnAlready}, nil
	}
	var change replay.Change
	var checks []evals.Check
	if err := json.Unmarshal(setup.Change, &change); err != nil {
		return crewlet.EvalTurnOutput{}, fmt.Errorf("decode change of %s: %w", in.Run, err)
	}
	if err := json.Unmarshal(setup.Checks, &checks); err != nil {
		return crewlet.EvalTurnOutput{}, fmt.Errorf("decode checks of %s: %w", in.Run, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go heartbeatWhile(ctx, a.beat(), stop)

	var charges []store.EvalCharge
	engine := *a.Engine
	engine.Charge = func(_ context.Context, c store.EvalCharge) error {
		charges = append(charges, c)
		return nil
	}
	out := store.EvalOutcome{Run: in.Run, Turn: in.Turn}
	report, err := engine.Replay(ctx, in.Turn, setup.Principal, change)
	switch code := crewlet.ErrorCode(err); {
	case code == crewlet.ERATELIMITED:
		// The budget is spent: the run stops, and this turn is refused
		// with what its replay spent before the refusal.
		out.Status, out.Error = wire.EvalTurnRefused, crewlet.ErrorMessage(err)
	case code == crewlet.EINVALID || code == crewlet.ENOTFOUND || code == crewlet.ECONFLICT:
		out.Status, out.Error = wire.EvalTurnFailed, crewlet.ErrorMessage(err)
	case err != nil:
		return crewlet.EvalTurnOutput{}, err
	default:
		results, judged, err := a.Grader.Score(ctx, checks, report, setup.Principal)
		if crewlet.ErrorCode(err) == crewlet.EINVALID {
			out.Status, out.Error = wire.EvalTurnFailed, crewlet.ErrorMessage(err)
			break
		}
		if err != nil {
			return crewlet.EvalTurnOutput{}, err
		}
		now := time.Now()
		for _, c := range judged {
			c.RecordedAt = now
			charges = append(charges, c)
		}
		passed := true
		for _, r := range results {
			passed = passed && r.Pass
		}
		out.Status, out.Passed, out.Report, out.Checks, out.Diverged = wire.EvalTurnScored, &passed, report, results, report.Diverged
	}
	out.Charges = charges
	wrote, err := a.Store.RecordEvalResult(ctx, out)
	if err != nil {
		return crewlet.EvalTurnOutput{}, err
	}
	if !wrote {
		return crewlet.EvalTurnOutput{Status: crewlet.EvalTurnAlready}, nil
	}
	return crewlet.EvalTurnOutput{Status: out.Status}, nil
}

// ReplayTurn runs one replay the API handed to a worker node because it
// may run read-only MCP tools live (workflows.ReplayTurn). A refusal of
// the replay engine is its answer, not a failure; the report's tool
// results are clipped at in.ClipAt, to keep it within what Temporal
// carries.
func (a *Evals) ReplayTurn(ctx context.Context, in crewlet.ReplayTurnInput) (crewlet.ReplayTurnOutput, error) {
	var change replay.Change
	if err := json.Unmarshal(in.Change, &change); err != nil {
		return crewlet.ReplayTurnOutput{}, fmt.Errorf("decode change of the replay of %s: %w", in.Turn, err)
	}
	stop := make(chan struct{})
	defer close(stop)
	go heartbeatWhile(ctx, a.beat(), stop)
	report, err := a.Engine.Replay(ctx, in.Turn, in.Principal, change)
	var domain *crewlet.Error
	if errors.As(err, &domain) {
		return crewlet.ReplayTurnOutput{ErrorCode: crewlet.ErrorCode(err), Error: crewlet.ErrorMessage(err)}, nil
	}
	if err != nil {
		return crewlet.ReplayTurnOutput{}, err
	}
	if in.ClipAt > 0 {
		report.ClipResults(in.ClipAt)
	}
	raw, err := json.Marshal(report)
	if err != nil {
		return crewlet.ReplayTurnOutput{}, fmt.Errorf("encode the report of %s: %w", in.Turn, err)
	}
	return crewlet.ReplayTurnOutput{Report: raw}, nil
}

// EvalFinish ends the run.
func (a *Evals) EvalFinish(ctx context.Context, in crewlet.EvalFinishInput) error {
	if err := a.Store.FinishEvalRun(ctx, in.Run, in.Status); err != nil {
		return err
	}
	a.log().Info("eval_run_finished", "run", in.Run, "status", in.Status)
	return nil
}

func (a *Evals) beat() time.Duration {
	if a.Beat == 0 {
		return evalBeat
	}
	return a.Beat
}

func (a *Evals) log() *slog.Logger {
	if a.Log == nil {
		return slog.Default()
	}
	return a.Log
}
