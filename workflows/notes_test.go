package workflows

import (
	"context"
	"fmt"
	"strings"
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
// the note's writing. Runs from before note-signal-check coalesce the same.
func TestPersonNotesCoalesceChangesThatComeTogether(t *testing.T) {
	t.Parallel()
	for _, version := range []workflow.Version{noteSignalCheckVersion, workflow.DefaultVersion} {
		t.Run(fmt.Sprint(changeNoteSignalCheck, "@", version), func(t *testing.T) {
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
			env.OnGetVersion(changeNoteSignalCheck, workflow.DefaultVersion, noteSignalCheckVersion).Return(version)
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
		})
	}
}

// A ticket_note payload that is not a ticket id is dropped: it makes no
// note, does not hold the waiting notes, and does not stretch the quiet
// window of the change before it.
func TestPersonNotesDropChangesThatAreNotTicketIDs(t *testing.T) {
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
	bad := []any{"", "t 1", "t-1\x00", strings.Repeat("t", crewlet.MaxIDBytes+1), map[string]string{"ticket": "t-1"}, 42, nil}
	for i, payload := range bad {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(crewlet.SignalTicketNote, payload) }, time.Duration(i+1)*time.Second)
	}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(crewlet.SignalTicketNote, crewlet.TicketNoteSignal("t-2")) }, 10*time.Second)
	for i, payload := range bad {
		env.RegisterDelayedCallback(func() { env.SignalWorkflow(crewlet.SignalTicketNote, payload) }, 10*time.Second+time.Duration(i+1)*200*time.Millisecond)
	}
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Minute)
	env.ExecuteWorkflow(PersonNotes, crewlet.PersonNotesInput{Person: "alice"})
	mu.Lock()
	defer mu.Unlock()
	eq(t, "notes", notes, [][]string{{"t-2"}})
	if len(at) == 1 && (at[0] < 12*time.Second || at[0] > 12500*time.Millisecond) {
		t.Errorf("note written at %v; want 2s after t-2, the bad payloads after it not stretching the wait", at[0])
	}
}
