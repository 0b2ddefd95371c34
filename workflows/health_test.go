package workflows

import (
	"context"
	"errors"
	"testing"

	"github.com/crewlet/crewlet"
)

func runHealth(t *testing.T, pass func(context.Context) (crewlet.HealthOutput, error)) (crewlet.HealthOutput, error) {
	t.Helper()
	return runDuty(t, crewlet.WorkflowHealth, Health, crewlet.ActivityHealth, pass)
}

func TestHealth(t *testing.T) {
	t.Parallel()
	t.Run("returns what the pass found", func(t *testing.T) {
		want := crewlet.HealthOutput{Seats: 2, Transitions: []crewlet.HealthTransition{{Seat: "eng", From: crewlet.HealthPaused, To: crewlet.HealthGone, Cause: "gone"}}, TicketsFailed: 1}
		out, err := runHealth(t, func(context.Context) (crewlet.HealthOutput, error) { return want, nil })
		if err != nil {
			t.Fatalf("health: %v", err)
		}
		eq(t, "output", out, want)
	})
	t.Run("a failing pass is not retried: the next tick is sooner", func(t *testing.T) {
		calls := 0
		_, err := runHealth(t, func(context.Context) (crewlet.HealthOutput, error) {
			calls++
			return crewlet.HealthOutput{}, errors.New("postgres unavailable")
		})
		if err == nil {
			t.Fatalf("health: got no error, want the pass failure")
		}
		eq(t, "attempts", calls, 1)
	})
}
