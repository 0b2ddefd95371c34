package workflows

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// fireWorld is what a fire's activities see: every delivery and wait,
// and how the next ones answer.
type fireWorld struct {
	delivered []crewlet.DeliverFireInput
	awaited   []crewlet.AwaitFireInput
	// failDeliveries fails that many deliveries first.
	failDeliveries int
	human          bool
}

func (w *fireWorld) deliver(_ context.Context, in crewlet.DeliverFireInput) (crewlet.DeliverFireOutput, error) {
	w.delivered = append(w.delivered, in)
	if len(w.delivered) <= w.failDeliveries {
		return crewlet.DeliverFireOutput{}, errors.New("redis unreachable")
	}
	return crewlet.DeliverFireOutput{Seat: "cto", EventID: crewlet.ScheduleFireEventID(in.Schedule, in.FireTime), Await: !w.human}, nil
}

func (w *fireWorld) await(_ context.Context, in crewlet.AwaitFireInput) (bool, error) {
	w.awaited = append(w.awaited, in)
	return true, nil
}

// runFire runs one fire; setup names how it was started (its id, search
// attributes).
func runFire(t *testing.T, w *fireWorld, in crewlet.ScheduleFireInput, setup func(*testsuite.TestWorkflowEnvironment)) (crewlet.ScheduleFireResult, error) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(ScheduleFire, workflow.RegisterOptions{Name: crewlet.WorkflowScheduleFire})
	env.RegisterActivityWithOptions(w.deliver, activity.RegisterOptions{Name: crewlet.ActivityDeliverFire})
	env.RegisterActivityWithOptions(w.await, activity.RegisterOptions{Name: crewlet.ActivityAwaitFire})
	if setup != nil {
		setup(env)
	}
	env.ExecuteWorkflow(crewlet.WorkflowScheduleFire, in)
	if !env.IsWorkflowCompleted() {
		t.Fatalf("fire did not complete")
	}
	var out crewlet.ScheduleFireResult
	err := env.GetWorkflowError()
	if err == nil {
		if gerr := env.GetWorkflowResult(&out); gerr != nil {
			t.Fatalf("decode fire result: %v", gerr)
		}
	}
	return out, err
}

func TestScheduleFire(t *testing.T) {
	t.Parallel()
	nine := time.Date(2026, 1, 2, 9, 0, 0, 0, time.UTC)
	t.Run("the scheduled start time names the fire, not the clock", func(t *testing.T) {
		w := &fireWorld{}
		out, err := runFire(t, w, crewlet.ScheduleFireInput{Schedule: "standup"}, func(env *testsuite.TestWorkflowEnvironment) {
			// Started late, as a caught-up fire is: its identity stays 09:00.
			env.SetStartTime(nine.Add(42 * time.Minute))
			if err := env.SetTypedSearchAttributesOnStart(temporal.NewSearchAttributes(scheduledStartTime.ValueSet(nine))); err != nil {
				t.Fatal(err)
			}
		})
		if err != nil {
			t.Fatalf("fire: %v", err)
		}
		eq(t, "delivered", w.delivered, []crewlet.DeliverFireInput{{Schedule: "standup", FireTime: nine}})
		eq(t, "awaited", w.awaited, []crewlet.AwaitFireInput{{Schedule: "standup", FireTime: nine, Seat: "cto", EventID: crewlet.ScheduleFireEventID("standup", nine)}})
		eq(t, "result", out, crewlet.ScheduleFireResult{Seat: "cto", EventID: crewlet.ScheduleFireEventID("standup", nine), FireTime: nine, Handled: true})
	})
	t.Run("without the attribute, the time Temporal appends to the id", func(t *testing.T) {
		w := &fireWorld{}
		_, err := runFire(t, w, crewlet.ScheduleFireInput{Schedule: "standup"}, func(env *testsuite.TestWorkflowEnvironment) {
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "crewlet-schedule/crewlet/standup-2026-01-02T09:00:00Z"})
		})
		if err != nil {
			t.Fatalf("fire: %v", err)
		}
		eq(t, "delivered", w.delivered, []crewlet.DeliverFireInput{{Schedule: "standup", FireTime: nine}})
	})
	t.Run("a fire time in the input wins", func(t *testing.T) {
		w := &fireWorld{}
		eight := nine.Add(-time.Hour)
		_, err := runFire(t, w, crewlet.ScheduleFireInput{Schedule: "standup", FireTime: eight}, func(env *testsuite.TestWorkflowEnvironment) {
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "crewlet-schedule/crewlet/standup-2026-01-02T09:00:00Z"})
		})
		if err != nil {
			t.Fatalf("fire: %v", err)
		}
		eq(t, "delivered", w.delivered, []crewlet.DeliverFireInput{{Schedule: "standup", FireTime: eight}})
	})
	t.Run("no fire time at all fails without delivering", func(t *testing.T) {
		w := &fireWorld{}
		_, err := runFire(t, w, crewlet.ScheduleFireInput{Schedule: "standup"}, func(env *testsuite.TestWorkflowEnvironment) {
			env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: "by-hand"})
		})
		var app *temporal.ApplicationError
		if !errors.As(err, &app) || app.Type() != crewlet.EINVALID || !app.NonRetryable() {
			t.Fatalf("fire error = %v; want a non-retryable %s", err, crewlet.EINVALID)
		}
		eq(t, "deliveries", len(w.delivered), 0)
	})
	t.Run("a retried delivery keeps the fire time", func(t *testing.T) {
		w := &fireWorld{failDeliveries: 2}
		_, err := runFire(t, w, crewlet.ScheduleFireInput{Schedule: "standup", FireTime: nine}, nil)
		if err != nil {
			t.Fatalf("fire: %v", err)
		}
		want := crewlet.DeliverFireInput{Schedule: "standup", FireTime: nine}
		eq(t, "delivered", w.delivered, []crewlet.DeliverFireInput{want, want, want})
		eq(t, "awaits", len(w.awaited), 1)
	})
	t.Run("a person's mail is not waited on", func(t *testing.T) {
		w := &fireWorld{human: true}
		out, err := runFire(t, w, crewlet.ScheduleFireInput{Schedule: "remind", FireTime: nine}, nil)
		if err != nil {
			t.Fatalf("fire: %v", err)
		}
		eq(t, "awaits", len(w.awaited), 0)
		eq(t, "handled", out.Handled, false)
	})
}
