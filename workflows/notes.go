package workflows

import (
	"time"

	"go.temporal.io/sdk/converter"
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
// activity. A change whose payload is not a ticket id (TicketNoteSignal's
// check) is dropped and logged: the Temporal frontend is a second door, and
// a note about no ticket would retry forever.
func PersonNotes(ctx workflow.Context, in crewlet.PersonNotesInput) error {
	changes := workflow.GetSignalChannel(ctx, crewlet.SignalTicketNote)
	checked := workflow.GetVersion(ctx, changeNoteSignalCheck, workflow.DefaultVersion, noteSignalCheckVersion) >= noteSignalCheckVersion
	pending := in.Pending
	// take receives one change, waiting for it when wait is set, and adds
	// it to pending; it reports false when none was there.
	take := func(wait bool) bool {
		if !checked { // COMPAT(note-signal-check@1)
			var id string
			if wait {
				changes.Receive(ctx, &id)
			} else if !changes.ReceiveAsync(&id) {
				return false
			}
			pending = append(pending, id)
			return true
		}
		var raw converter.RawValue
		if wait {
			changes.Receive(ctx, &raw)
		} else if !changes.ReceiveAsync(&raw) {
			return false
		}
		id, err := decodeSignal(raw, crewlet.TicketNoteSignal.Validate)
		if err != nil {
			workflow.GetLogger(ctx).Warn("signal_rejected", "person", in.Person, "signal", crewlet.SignalTicketNote,
				"bytes", payloadBytes(raw), "error", err)
			return true
		}
		pending = append(pending, string(id))
		return true
	}
	for notes := 0; notes < notesPerRun; notes++ {
		for len(pending) == 0 {
			take(true)
		}
		// The note waits until noteQuiet has passed with no change taken,
		// or noteMostDelay since the first; a dropped change moves neither.
		deadline := workflow.Now(ctx).Add(noteMostDelay)
		quietUntil := workflow.Now(ctx).Add(noteQuiet)
		for {
			now := workflow.Now(ctx)
			wait := min(quietUntil.Sub(now), deadline.Sub(now))
			if wait <= 0 {
				break
			}
			quiet := false
			timerCtx, cancelTimer := workflow.WithCancel(ctx)
			sel := workflow.NewSelector(ctx)
			sel.AddReceive(changes, func(workflow.ReceiveChannel, bool) {
				before := len(pending)
				take(true)
				if len(pending) > before {
					quietUntil = workflow.Now(ctx).Add(noteQuiet)
				}
			})
			sel.AddFuture(workflow.NewTimer(timerCtx, wait), func(workflow.Future) { quiet = true })
			sel.Select(ctx)
			cancelTimer()
			if quiet {
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
	for take(false) {
	}
	return workflow.NewContinueAsNewError(ctx, PersonNotes, crewlet.PersonNotesInput{Person: in.Person, Pending: pending})
}
