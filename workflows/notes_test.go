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

// notesRun runs PersonNotes for alice in a test environment whose note
// activity records each note and when, after start, it was written.
type notesRun struct {
	env   *testsuite.TestWorkflowEnvironment
	start time.Time
	mu    sync.Mutex
	notes [][]string
	at    []time.Duration
}

func newNotesRun() *notesRun {
	var suite testsuite.WorkflowTestSuite
	r := &notesRun{env: suite.NewTestWorkflowEnvironment()}
	r.env.SetTestTimeout(10 * time.Second)
	r.start = r.env.Now()
	r.env.RegisterWorkflowWithOptions(PersonNotes, workflow.RegisterOptions{Name: crewlet.WorkflowPersonNotes})
	r.env.RegisterActivityWithOptions(func(_ context.Context, in crewlet.TicketNoteInput) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.notes = append(r.notes, in.Tickets)
		r.at = append(r.at, r.env.Now().Sub(r.start))
		return nil
	}, activity.RegisterOptions{Name: crewlet.ActivityTicketNote})
	return r
}

// signalAt sends a ticket_note payload at after.
func (r *notesRun) signalAt(after time.Duration, payload any) {
	r.env.RegisterDelayedCallback(func() { r.env.SignalWorkflow(crewlet.SignalTicketNote, payload) }, after)
}

// run runs the workflow until it is cancelled at end, and returns the
// notes written and when.
func (r *notesRun) run(end time.Duration) ([][]string, []time.Duration) {
	r.env.RegisterDelayedCallback(r.env.CancelWorkflow, end)
	r.env.ExecuteWorkflow(PersonNotes, crewlet.PersonNotesInput{Person: "alice"})
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.notes, r.at
}

// Ticket changes that come within the quiet window of each other make one
// note; one that comes later makes its own. Changes keep arriving through
// the note's writing. Runs from before note-signal-check coalesce the same.
func TestPersonNotesCoalesceChangesThatComeTogether(t *testing.T) {
	t.Parallel()
	for _, version := range []workflow.Version{noteSignalCheckVersion, workflow.DefaultVersion} {
		t.Run(fmt.Sprint(changeNoteSignalCheck, "@", version), func(t *testing.T) {
			t.Parallel()
			r := newNotesRun()
			r.env.OnGetVersion(changeNoteSignalCheck, workflow.DefaultVersion, noteSignalCheckVersion).Return(version)
			r.signalAt(time.Second, "t-1")
			r.signalAt(2*time.Second, "t-2")
			r.signalAt(3500*time.Millisecond, "t-1")
			r.signalAt(time.Minute, "t-3")
			notes, at := r.run(2 * time.Minute)
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
	r := newNotesRun()
	bad := []any{"", "t 1", "t-1\x00", strings.Repeat("t", crewlet.MaxIDBytes+1), map[string]string{"ticket": "t-1"}, 42, nil}
	for i, payload := range bad {
		r.signalAt(time.Duration(i+1)*time.Second, payload)
	}
	r.signalAt(10*time.Second, crewlet.TicketNoteSignal("t-2"))
	for i, payload := range bad {
		r.signalAt(10*time.Second+time.Duration(i+1)*200*time.Millisecond, payload)
	}
	notes, at := r.run(time.Minute)
	eq(t, "notes", notes, [][]string{{"t-2"}})
	if len(at) == 1 && (at[0] < 12*time.Second || at[0] > 12500*time.Millisecond) {
		t.Errorf("note written at %v; want 2s after t-2, the bad payloads after it not stretching the wait", at[0])
	}
}
