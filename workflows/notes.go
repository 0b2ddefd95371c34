package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Tunables of a person's ticket notes.
const (
	// noteQuiet is how long the notes wait for another ticket change
	// before they write: changes that come together make one note.
	noteQuiet = 2 * time.Second
	// noteMostDelay bounds how long a change waits for its note however
	// busy the tickets are.
	noteMostDelay = 30 * time.Second
	// notesPerRun bounds a run's history; it continues as new after that
	// many notes.
	notesPerRun = 100
)

// PersonNotes writes a person's ticket notes: every change of a ticket the
// person opened (it ended, or asks a question) arrives as a signal, and the
// changes that come within noteQuiet of each other are written as one note
// in the person's inbox. Idle, it waits on its signal channel: no timer, no
// activity.
func PersonNotes(ctx workflow.Context, in crewlet.PersonNotesInput) error {
	changes := workflow.GetSignalChannel(ctx, crewlet.SignalTicketNote)
	pending := in.Pending
	take := func(c workflow.ReceiveChannel, _ bool) {
		var id string
		c.Receive(ctx, &id)
		pending = append(pending, id)
	}
	for notes := 0; notes < notesPerRun; notes++ {
		if len(pending) == 0 {
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(changes, take)
			sel.Select(ctx)
		}
		deadline := workflow.Now(ctx).Add(noteMostDelay)
		for {
			wait := min(noteQuiet, deadline.Sub(workflow.Now(ctx)))
			if wait <= 0 {
				break
			}
			more := false
			timerCtx, cancelTimer := workflow.WithCancel(ctx)
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(changes, func(c workflow.ReceiveChannel, open bool) { take(c, open); more = true })
			sel.AddFuture(workflow.NewTimer(timerCtx, wait), func(workflow.Future) {})
			sel.Select(ctx)
			cancelTimer()
			if !more {
				break
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		note := crewlet.TicketNoteInput{Person: in.Person, Tickets: pending}
		noteCtx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			StartToCloseTimeout: 10 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: time.Minute},
		})
		if err := workflow.ExecuteLocalActivity(noteCtx, crewlet.ActivityTicketNote, note).Get(ctx, nil); err != nil {
			return err
		}
		pending = nil
	}
	for {
		var id string
		if !changes.ReceiveAsync(&id) {
			break
		}
		pending = append(pending, id)
	}
	return workflow.NewContinueAsNewError(ctx, PersonNotes, crewlet.PersonNotesInput{Person: in.Person, Pending: pending})
}
