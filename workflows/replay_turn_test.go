package workflows

import (
	"context"
	"errors"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"

	"github.com/crewlet/crewlet"
)

// A live replay that fails is not tried again: a second try would call the
// model and the live tools again and charge evals.budget twice.
func TestReplayTurnTriesItsReplayOnce(t *testing.T) {
	t.Parallel()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	tries := 0
	env.RegisterActivityWithOptions(func(context.Context, crewlet.ReplayTurnInput) (crewlet.ReplayTurnOutput, error) {
		tries++
		return crewlet.ReplayTurnOutput{}, errors.New("the worker lost Postgres")
	}, activity.RegisterOptions{Name: crewlet.ActivityReplayTurn})
	env.ExecuteWorkflow(ReplayTurn, crewlet.ReplayTurnInput{Turn: "turn/s01/k1", Principal: "opal"})
	if !env.IsWorkflowCompleted() || env.GetWorkflowError() == nil {
		t.Fatalf("ReplayTurn completed %v with error %v; want it failed", env.IsWorkflowCompleted(), env.GetWorkflowError())
	}
	if tries != 1 {
		t.Errorf("the replay was tried %d times; want once", tries)
	}
}
