package workflows

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Ticket changes that come within the quiet window of each other make one
// note; one that comes later makes its own. Changes keep arriving through
// the note's writing.
func TestPersonNotesCoalesceChangesThatComeTogether(t *testing.T) {
	t.Parallel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(10 * time.Second)
	var mu sync.Mutex
	var notes [][]string
	var at []time.Duration
	start := env.Now()
	env.RegisterWorkflowWithOptions(PersonNotes, workflow.RegisterOptions{Name: crewlet.WorkflowPersonNotes})
	env.RegisterActivityWithOptions(func(_ context.Context, in crewlet.TicketNoteInput) error {
		mu.Lock()
		defer mu.Unlock()
		notes = append(notes, in.Tickets)
		at = append(at, env.Now().Sub(start))
		return nil
	}, activity.RegisterOptions{Name: crewlet.ActivityTicketNote})
	for _, s := range []struct {
		after  time.Duration
		ticket string
	}{
		{time.Second, "t-1"}, {2 * time.Second, "t-2"}, {3500 * time.Millisecond, "t-1"},
		{time.Minute, "t-3"},
	} {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(crewlet.SignalTicketNote, s.ticket) }, s.after)
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, 2*time.Minute)
	env.ExecuteWorkflow(PersonNotes, crewlet.PersonNotesInput{Person: "alice"})
	mu.Lock()
	defer mu.Unlock()
	eq(t, "notes", notes, [][]string{{"t-1", "t-2", "t-1"}, {"t-3"}})
	if len(at) == 2 && (at[0] < 5500*time.Millisecond || at[0] > 6*time.Second || at[1] < 62*time.Second || at[1] > 63*time.Second) {
		t.Errorf("notes written at %v; want each 2s after the last change that came with it", at)
	}
}
