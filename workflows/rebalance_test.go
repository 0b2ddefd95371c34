package workflows

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// runDuty runs a duty's workflow (registered as name) whose one activity
// (registered as activityName) is pass, and returns its result.
func runDuty[T any](t *testing.T, name string, duty func(workflow.Context) (T, error), activityName string, pass func(context.Context) (T, error)) (T, error) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(duty, workflow.RegisterOptions{Name: name})
	env.RegisterActivityWithOptions(pass, activity.RegisterOptions{Name: activityName})
	env.ExecuteWorkflow(name)
	if !env.IsWorkflowCompleted() {
		t.Fatalf("%s did not complete", name)
	}
	var out T
	err := env.GetWorkflowError()
	if err == nil {
		if gerr := env.GetWorkflowResult(&out); gerr != nil {
			t.Fatalf("decode %s result: %v", name, gerr)
		}
	}
	return out, err
}

func runRebalance(t *testing.T, pass func(context.Context) (crewlet.RebalanceOutput, error)) (crewlet.RebalanceOutput, error) {
	t.Helper()
	return runDuty(t, crewlet.WorkflowRebalance, Rebalance, crewlet.ActivityRebalance, pass)
}

func TestRebalance(t *testing.T) {
	t.Parallel()
	t.Run("returns what the pass did", func(t *testing.T) {
		want := crewlet.RebalanceOutput{
			Moves:       []crewlet.SeatMove{{Handle: "ana", From: "node-a"}},
			Unplaceable: []string{"gpu-seat"},
		}
		out, err := runRebalance(t, func(context.Context) (crewlet.RebalanceOutput, error) { return want, nil })
		if err != nil {
			t.Fatalf("rebalance: %v", err)
		}
		eq(t, "output", out, want)
	})
	t.Run("retries a failing pass, three attempts in all", func(t *testing.T) {
		calls := 0
		_, err := runRebalance(t, func(context.Context) (crewlet.RebalanceOutput, error) {
			calls++
			return crewlet.RebalanceOutput{}, errors.New("postgres unavailable")
		})
		if err == nil {
			t.Fatalf("rebalance: got no error, want the pass failure")
		}
		eq(t, "attempts", calls, 3)
	})
	t.Run("a pass that fails once succeeds on retry", func(t *testing.T) {
		calls := 0
		out, err := runRebalance(t, func(context.Context) (crewlet.RebalanceOutput, error) {
			calls++
			if calls == 1 {
				return crewlet.RebalanceOutput{}, errors.New("postgres unavailable")
			}
			return crewlet.RebalanceOutput{Moves: []crewlet.SeatMove{{Handle: "bo", From: "node-b"}}}, nil
		})
		if err != nil {
			t.Fatalf("rebalance: %v", err)
		}
		eq(t, "attempts", calls, 2)
		eq(t, "moves", out.Moves, []crewlet.SeatMove{{Handle: "bo", From: "node-b"}})
	})
}
