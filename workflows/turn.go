package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Tunables of a turn.
const (
	// modelCallTimeout bounds one model call, retries not counted.
	modelCallTimeout = 5 * time.Minute
	// toolCallTimeout bounds one tool call.
	toolCallTimeout = 10 * time.Minute
	// modelAttempts is how often a model call is tried before the turn
	// gives up on it; rate limits and server errors are worth it.
	modelAttempts = 8
	// readOnlyAttempts is how often a read-only tool call is tried.
	readOnlyAttempts = 3
	// profileRecheck is the longest a turn held for want of a profile waits
	// before it asks again, should the signal that one freed be lost. A
	// timer, not a poll: a quarantine's end is waited for exactly.
	profileRecheck = 5 * time.Minute
)

// turn is the running state of one turn workflow.
type turn struct {
	in    crewlet.TurnInput
	out   crewlet.TurnOutput
	stop  *crewlet.StopTurnRequest
	stops workflow.ReceiveChannel
	// interrupts receives the seat's interrupt_turn signals; interruptMail
	// is the mail they carried, which the next turn answers with this one's
	// triggers.
	interrupts    workflow.ReceiveChannel
	interruptMail []crewlet.MailRef
	// tickets and approvals receive the signals of the tickets and
	// approvals the turn waits on.
	tickets, approvals workflow.ReceiveChannel
	// freed receives the nudges that a profile of the pool may have freed.
	freed workflow.ReceiveChannel
	// profile is the one the turn holds a slot of, "" while it holds none.
	profile string
	wrote   bool
	// refused says why threads ended without an answer; their senders
	// were told, and the turn is recorded failed.
	refused []string
	// ended are the stops of threads whose ticket ended meanwhile; when
	// every thread ended so, the turn is recorded stopped.
	ended []crewlet.StopTurnRequest
	// progress answers the state query.
	progress crewlet.TurnProgress
	// describe shows the turn's progress in its seat's current details;
	// nil for a Turn child workflow, which shows only its waits.
	describe func(workflow.Context, *turn)
	// mergedSteps is set for a turn of a seat run at node-liveness 6 or
	// later: BeginTurn takes its profile slot, FinishTurn gives it back and
	// acks the seat's entries (in.Ack). COMPAT(node-liveness@6): a Turn
	// child and an inline turn below version 6 run AcquireProfile and
	// ReleaseProfile as steps of their own, and their seat acks.
	mergedSteps bool
	// released is set once FinishTurn gave back the profile slot.
	released bool
	// threadKeys are BeginTurn's keys of the turn's threads, which its
	// steps pass on so they read a thread with its turn.
	threadKeys []string
	logger     interface {
		Info(string, ...interface{})
		Warn(string, ...interface{})
	}
}

// turnSignals are where a turn hears from outside: a person's stop, the
// seat's interrupt for new mail, the tickets and approvals it waits on, and
// nudges that a profile freed. A Turn workflow receives them as its own
// signals; a turn run inline in its seat (inlineTurnSignals) hears the
// seat's stop and interrupt from the seat and the rest as the seat's
// signals.
type turnSignals struct {
	stops, interrupts, tickets, approvals, freed workflow.ReceiveChannel
}

func newTurn(ctx workflow.Context, in crewlet.TurnInput, signals turnSignals) *turn {
	if in.HeartbeatTimeout <= 0 {
		in.HeartbeatTimeout = defaultHeartbeatTimeout
	}
	return &turn{in: in, stops: signals.stops, interrupts: signals.interrupts, tickets: signals.tickets,
		approvals: signals.approvals, freed: signals.freed, logger: workflow.GetLogger(ctx)}
}

// currentProgress is the turn's answer to "how far did it get".
func (t *turn) currentProgress() crewlet.TurnProgress {
	p := t.progress
	if t.stop != nil {
		p.StopRequested = t.stop.By
	}
	p.Rounds = t.out.Rounds
	return p
}

// Turn is one turn of a seat over a batch of triggers, as a child workflow
// of its seat: the shape of seat runs below node-liveness 5, kept registered
// for the turns they still start (docs/versioning.md). Newer seats run the
// same turn inline (seat.runInlineTurn). COMPAT(node-liveness@5)
func Turn(ctx workflow.Context, in crewlet.TurnInput) (crewlet.TurnOutput, error) {
	t := newTurn(ctx, in, turnSignals{
		stops:      workflow.GetSignalChannel(ctx, crewlet.SignalStopTurn),
		interrupts: workflow.GetSignalChannel(ctx, crewlet.SignalInterruptTurn),
		tickets:    workflow.GetSignalChannel(ctx, crewlet.SignalTicket),
		approvals:  workflow.GetSignalChannel(ctx, crewlet.SignalApproval),
		freed:      workflow.GetSignalChannel(ctx, crewlet.SignalProfileFree),
	})
	if err := workflow.SetQueryHandler(ctx, crewlet.QueryState, func() (crewlet.TurnProgress, error) {
		return t.currentProgress(), nil
	}); err != nil {
		return crewlet.TurnOutput{}, fmt.Errorf("register state query: %w", err)
	}
	return t.run(ctx)
}

// run is one turn (docs/architecture.md, "A turn"): every trigger that needs
// an answer is one model conversation of rounds, a model call then the tool
// calls it asked for. The conversation lives in Postgres and every step is
// keyed on the work, so a turn re-run after its tenure was lost repeats
// nothing that finished: it reads back what is recorded.
func (t *turn) run(ctx workflow.Context) (crewlet.TurnOutput, error) {
	in := t.in
	var begin crewlet.BeginTurnOutput
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityBeginTurn, crewlet.BeginTurnInput{
		Tenure: in.Tenure, TurnID: in.TurnID, WorkKey: in.WorkKey, Mail: in.Mail, Acquire: t.mergedSteps,
	}).Get(ctx, &begin)
	if err != nil {
		if isFenced(err) {
			return t.fenced(), nil
		}
		return crewlet.TurnOutput{}, err
	}
	if begin.Hold != nil {
		return crewlet.TurnOutput{Status: crewlet.TurnHeld, Hold: begin.Hold}, nil
	}
	t.progress.Threads, t.progress.MaxRounds = begin.Threads, begin.MaxRounds
	t.threadKeys = begin.ThreadKeys
	// A turn of replies only makes no model call, so it takes no profile.
	if begin.Threads > 0 {
		defer t.release(ctx)
		if err := t.acquire(ctx, begin.Profile); err != nil {
			if isFenced(err) {
				return t.fenced(), nil
			}
			return crewlet.TurnOutput{}, err
		}
	}
	t.out.Status = crewlet.TurnDone
	for thread := 0; thread < begin.Threads && t.out.Status == crewlet.TurnDone; thread++ {
		t.progress.Thread = thread
		err := t.converse(ctx, thread, begin.MaxRounds)
		switch {
		case err == nil:
		case isFenced(err):
			return t.fenced(), nil
		case temporal.IsCanceledError(err) || hostLost(err):
			// Left to the next tenure, which resumes the turn.
			return crewlet.TurnOutput{}, err
		case isPanic(err) || t.wrote:
			// Recorded and acked, never replayed: it may already have
			// acted, or it would only panic again.
			// The note reaches the sender: it names the kind of failure,
			// never its internal text (the log has that).
			t.out.Status = crewlet.TurnFailed
			t.out.Note = fmt.Sprintf("This turn failed (%s) and will not be retried, because it may already have acted. The seat's events and the server log say more.", failureKind(err))
			t.logger.Warn("turn_failed", "seat", t.in.Handle, "turn", t.in.TurnID, "error", err)
		default:
			// Nothing reached outside: fail, and the triggers are
			// redelivered.
			return crewlet.TurnOutput{}, err
		}
	}
	if t.out.Status == crewlet.TurnInterrupted {
		return t.out, nil
	}
	if t.out.Status == crewlet.TurnDone && len(t.refused) == 0 && len(t.ended) == begin.Threads && begin.Threads > 0 {
		// Nothing is left that anyone waits for: the turn stops, as a
		// person's stop would, by the ticket.
		t.stop = &t.ended[0]
		t.stopped()
	}
	if t.out.Status == crewlet.TurnDone && len(t.refused) > 0 {
		t.out.Status = crewlet.TurnFailed
		t.out.Note = strings.Join(t.refused, "; ")
	}
	if begin.Reflect && begin.Threads > 0 && t.out.Status == crewlet.TurnDone {
		if err := t.reflect(ctx); err != nil {
			if isFenced(err) {
				return t.fenced(), nil
			}
			return crewlet.TurnOutput{}, err
		}
	}
	return t.finish(ctx)
}

// reflect runs the post-turn reflection, before the turn is finished: a
// turn cut short before its ledger row re-runs, and its reflection with it
// (keyed on the work, so it writes once). Memory only records, so a
// reflection that fails is logged and the turn goes on; only a lost tenure
// or a cancellation stops it.
func (t *turn) reflect(ctx workflow.Context) error {
	err := workflow.ExecuteActivity(t.modelContext(ctx, "reflect on turn "+t.in.TurnID), crewlet.ActivityReflect, crewlet.ReflectInput{
		Tenure: t.in.Tenure, TurnID: t.in.TurnID, WorkKey: t.in.WorkKey, Profile: t.profile,
	}).Get(ctx, nil)
	switch {
	case err == nil:
	case isFenced(err) || temporal.IsCanceledError(err):
		return err
	default:
		t.logger.Warn("turn_reflection_failed", "seat", t.in.Handle, "turn", t.in.TurnID, "error", err)
	}
	return nil
}

// converse runs one trigger's conversation until the model answers without
// calling a tool, a person stops the turn, new mail interrupts it, or the
// turn runs out of rounds.
func (t *turn) converse(ctx workflow.Context, thread, maxRounds int) error {
	for round := 1; ; round++ {
		if t.stopRequested() {
			t.stopped()
			return nil
		}
		if t.interruptRequested(ctx) {
			return t.interrupted(ctx, thread)
		}
		if t.out.Rounds >= maxRounds {
			t.out.Note = fmt.Sprintf("I stopped after %d rounds, the most this role allows in one turn (max_rounds), before finishing. Ask again to continue.", maxRounds)
			return nil
		}
		t.out.Rounds++
		t.progress.Round = round
		t.show(ctx)
		answer, err := t.modelRound(ctx, thread, round)
		if err != nil {
			return err
		}
		if t.stop != nil && t.profile == "" {
			// Stopped while it waited for a profile.
			t.stopped()
			return nil
		}
		if answer.Ended != nil {
			t.ended = append(t.ended, *answer.Ended)
			return nil
		}
		if answer.Failed != "" {
			t.refused = append(t.refused, answer.Failed)
			return nil
		}
		if len(answer.Calls) == 0 {
			return nil
		}
		for _, call := range answer.Calls {
			res, err := t.toolCall(ctx, thread, round, call)
			if hostLost(err) {
				// The seat's host did not take the call or stopped
				// answering mid-call: the seat re-establishes, and the turn
				// resumes on the next tenure from what it recorded (a write
				// that started is reported "outcome unknown" there).
				return err
			}
			t.wrote = t.wrote || res.Wrote || (err != nil && !call.ReadOnly)
			if err != nil {
				if isFenced(err) || temporal.IsCanceledError(err) || isPanic(err) {
					return err
				}
				// The next round tells the model what became of the call:
				// a failed read, or a write whose outcome is unknown.
				t.logger.Warn("tool_call_failed", "seat", t.in.Handle, "round", round, "tool", call.Name, "error", err)
				continue
			}
			if res.Wait != nil {
				if err := t.wait(ctx, thread, round, call, *res.Wait); err != nil {
					return err
				}
			}
		}
	}
}

// show refreshes what the turn's seat says of it.
func (t *turn) show(ctx workflow.Context) {
	if t.describe != nil {
		t.describe(ctx, t)
	}
}

// showWait shows a durable wait beginning (on names it, details is the
// child's line) or ending (both ""): an inline turn in its seat's details
// and CrewletWaiting attribute, a Turn child in its own details.
func (t *turn) showWait(ctx workflow.Context, on, details string) {
	if t.describe == nil {
		workflow.SetCurrentDetails(ctx, details)
		return
	}
	t.show(ctx)
	t.upsertWaiting(ctx, on)
}

// threadKey is the key of thread as BeginTurn gave it, "" if it gave none.
func (t *turn) threadKey(thread int) string {
	if thread < len(t.threadKeys) {
		return t.threadKeys[thread]
	}
	return ""
}

// stopped ends the turn as a person asked.
func (t *turn) stopped() {
	t.out.Status = crewlet.TurnStopped
	t.out.Note = fmt.Sprintf("Turn stopped by %s", t.stop.By)
	if t.stop.Reason != "" {
		t.out.Note += ": " + t.stop.Reason
	}
}

// modelRound makes one model call of a thread on the turn's profile. When
// that profile can no longer be used (a usage limit quarantined its
// credential, it cooled off, its model was switched off) the turn fails
// over to another of its pool, or waits for one, and the call is made
// again; the round counts once. It returns with no profile held when a
// person stopped the turn while it waited.
func (t *turn) modelRound(ctx workflow.Context, thread, round int) (crewlet.ModelRoundOutput, error) {
	for {
		var answer crewlet.ModelRoundOutput
		summary := fmt.Sprintf("model round %d of thread %d, turn %s", round, thread+1, t.in.TurnID)
		err := workflow.ExecuteActivity(t.modelContext(ctx, summary), crewlet.ActivityModelRound, crewlet.ModelRoundInput{
			Tenure: t.in.Tenure, WorkKey: t.in.WorkKey, Thread: thread, Round: round,
			TurnID: t.in.TurnID, Profile: t.profile, ThreadKey: t.threadKey(thread),
		}).Get(ctx, &answer)
		if !isProfileUnavailable(err) {
			return answer, err
		}
		t.logger.Warn("turn_failing_over", "seat", t.in.Handle, "turn", t.in.TurnID, "profile", t.profile, "error", err)
		if err := t.acquire(ctx, nil); err != nil || t.profile == "" {
			return answer, err
		}
	}
}

// acquire takes a slot of a profile of the turn's pool: the one it ran on
// while that one can take it, else the pool's pick. With none able to, the
// turn waits, durably (a timer and signals, nothing held open), until the
// soonest quarantine or cooling-off ends, a nudge says a slot or a model
// freed, or profileRecheck passes; then it asks again. Its triggers stay
// read and unanswered meanwhile: no delivery is spent and nothing is
// dead-lettered. A person's stop ends the wait with no profile held. first
// is the answer BeginTurn already got, if it asked: the first ask then
// runs no step of its own.
func (t *turn) acquire(ctx workflow.Context, first *crewlet.AcquireProfileOutput) error {
	var since time.Time
	defer func() {
		t.progress.Held = nil
		if !since.IsZero() {
			t.upsertWaiting(ctx, "")
		}
	}()
	for {
		var raw converter.RawValue
		for t.freed.ReceiveAsync(&raw) {
			// Nudges from before this ask are answered by it.
		}
		var out crewlet.AcquireProfileOutput
		if first != nil {
			out, first = *first, nil
		} else if err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityAcquireProfile, crewlet.AcquireProfileInput{
			Tenure: t.in.Tenure, TurnID: t.in.TurnID, WorkKey: t.in.WorkKey,
		}).Get(ctx, &out); err != nil {
			return err
		}
		if out.Profile != "" {
			if !since.IsZero() {
				t.logger.Info("turn_unheld", "seat", t.in.Handle, "turn", t.in.TurnID, "profile", out.Profile, "held_for", workflow.Now(ctx).Sub(since))
			}
			t.profile, t.progress.Profile = out.Profile, out.Profile
			return nil
		}
		t.profile, t.progress.Profile = "", ""
		now := workflow.Now(ctx)
		if since.IsZero() {
			since = now
			t.logger.Warn("turn_held", "seat", t.in.Handle, "turn", t.in.TurnID, "reason", "no profile of the pool can take it")
			t.upsertWaiting(ctx, "profile")
		}
		hold := out.Hold
		if hold == nil {
			hold = &crewlet.ProfileHold{}
		}
		hold.Since = since
		t.progress.Held = hold
		t.show(ctx)
		if stopped, err := t.awaitProfile(ctx, heldWait(hold, now)); err != nil || stopped {
			return err
		}
	}
}

// heldWait is how long a held turn waits before it asks again: until the
// soonest quarantine or cooling-off ends, exactly; but no longer than
// profileRecheck while a profile waits on something with no known end (a
// slot, a switch), whose nudge may be lost.
func heldWait(hold *crewlet.ProfileHold, now time.Time) time.Duration {
	openEnded := len(hold.Profiles) == 0
	for _, p := range hold.Profiles {
		openEnded = openEnded || p.Until == nil
	}
	switch {
	case hold.Until == nil:
		return profileRecheck
	case openEnded:
		return min(profileRecheck, max(hold.Until.Sub(now), time.Second))
	}
	return max(hold.Until.Sub(now), time.Second)
}

// awaitProfile waits up to d for a nudge that a profile freed, or a stop.
func (t *turn) awaitProfile(ctx workflow.Context, d time.Duration) (stopped bool, err error) {
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(workflow.NewTimer(timerCtx, d), func(workflow.Future) {})
	sel.AddReceive(t.freed, func(c workflow.ReceiveChannel, _ bool) {
		var raw converter.RawValue
		c.Receive(ctx, &raw)
	})
	sel.AddReceive(t.stops, func(workflow.ReceiveChannel, bool) {})
	sel.Select(ctx)
	if err := ctx.Err(); err != nil {
		return false, err
	}
	return t.stopRequested(), nil
}

// release gives back the turn's profile slot, whatever ended the turn: it
// runs on a context no cancellation reaches. Losing it only costs the
// slot's lease, so a failure is logged. A turn whose FinishTurn gave it
// back already has nothing to release.
func (t *turn) release(ctx workflow.Context) {
	if t.released {
		return
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	err := workflow.ExecuteLocalActivity(localContext(dctx), crewlet.ActivityReleaseProfile, crewlet.ReleaseProfileInput{
		Tenure: t.in.Tenure, TurnID: t.in.TurnID,
	}).Get(dctx, nil)
	if err != nil {
		t.logger.Warn("profile_unreleased", "seat", t.in.Handle, "turn", t.in.TurnID, "error", err)
	}
	t.profile = ""
}

// wait holds the turn durably until the ticket it waits on changes, the
// wait's time runs out, or a person stops the turn: a timer and signals,
// nothing held open, so the wait survives restarts and failovers and its
// history does not grow while it waits. Then the call's result is recorded
// from the ticket as it stands.
func (t *turn) wait(ctx workflow.Context, thread, round int, call crewlet.ToolCallRef, w crewlet.TicketWait) error {
	now := workflow.Now(ctx)
	t.progress.Waiting = &crewlet.TicketWaiting{Ticket: w.Ticket, Kind: w.Kind, Since: now, Until: now.Add(w.For)}
	t.showWait(ctx, "ticket "+w.Ticket, fmt.Sprintf("waiting on ticket %s (%s) until %s", w.Ticket, w.Kind, now.Add(w.For).UTC().Format(time.RFC3339)))
	defer func() {
		t.progress.Waiting = nil
		t.showWait(ctx, "", "")
	}()
	t.logger.Info("turn_waiting", "seat", t.in.Handle, "turn", t.in.TurnID, "ticket", w.Ticket, "kind", w.Kind, "for", w.For)
	// A wait uses no model: the profile's slot goes to another turn
	// meanwhile, and the next round takes one again.
	t.release(ctx)
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timer := workflow.NewTimer(timerCtx, w.For)
	in := crewlet.ResolveWaitInput{
		Tenure: t.in.Tenure, WorkKey: t.in.WorkKey, Thread: thread, Round: round, Call: call, Wait: w,
	}
	var err error
	in.TimedOut, in.StoppedBy, err = awaitSignal(ctx, t, timer, t.tickets, crewlet.SignalTicket, crewlet.TicketSignal.Validate,
		func(sig crewlet.TicketSignal) bool { return sig.Ticket == w.Ticket })
	if err != nil {
		return err
	}
	err = workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityResolveWait, in).Get(ctx, nil)
	t.logger.Info("turn_waited", "seat", t.in.Handle, "turn", t.in.TurnID, "ticket", w.Ticket, "timed_out", in.TimedOut, "stopped_by", in.StoppedBy)
	if err != nil || t.stop != nil {
		return err
	}
	return t.acquire(ctx, nil)
}

// awaitSignal holds a turn's wait until its timer fires, a signal on ch
// that ends it arrives (checked by validate; ends says whether it is the
// one waited for), or a person stops the turn. A payload that fails its
// checks is dropped and the wait goes on.
func awaitSignal[T any](ctx workflow.Context, t *turn, timer workflow.Future, ch workflow.ReceiveChannel, name string, validate func(T) error, ends func(T) bool) (timedOut bool, stoppedBy string, err error) {
	for done := false; !done; {
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { timedOut, done = true, true })
		sel.AddReceive(ch, func(c workflow.ReceiveChannel, _ bool) {
			var raw converter.RawValue
			c.Receive(ctx, &raw)
			sig, err := decodeSignal(raw, validate)
			if err != nil {
				t.rejected(name, raw, err)
				return
			}
			done = done || ends(sig)
		})
		sel.AddReceive(t.stops, func(c workflow.ReceiveChannel, _ bool) {
			var raw converter.RawValue
			c.Receive(ctx, &raw)
			req, err := decodeSignal(raw, crewlet.StopTurnRequest.Validate)
			if err != nil {
				t.rejected(crewlet.SignalStopTurn, raw, err)
				return
			}
			if t.stop == nil {
				t.stop = &req
			}
			stoppedBy, done = t.stop.By, true
		})
		sel.Select(ctx)
		if err := ctx.Err(); err != nil {
			return false, "", err
		}
	}
	return timedOut, stoppedBy, nil
}

// stopRequested takes in the stop signals received so far.
func (t *turn) stopRequested() bool {
	var raw converter.RawValue
	for t.stops.ReceiveAsync(&raw) {
		req, err := decodeSignal(raw, crewlet.StopTurnRequest.Validate)
		if err != nil {
			t.rejected(crewlet.SignalStopTurn, raw, err)
			continue
		}
		if t.stop == nil {
			t.stop = &req
		}
	}
	return t.stop != nil
}

// rejected logs a signal whose payload failed its checks: it is dropped and
// the turn goes on. The payload's content is never logged, only its size.
func (t *turn) rejected(name string, raw converter.RawValue, err error) {
	t.logger.Warn("signal_rejected", "seat", t.in.Handle, "turn", t.in.TurnID, "signal", name, "bytes", payloadBytes(raw), "error", err)
}

// fenced ends a turn whose tenure is over: its triggers stay unacked for
// the next tenure.
func (t *turn) fenced() crewlet.TurnOutput {
	t.logger.Warn("turn_fenced", "seat", t.in.Handle, "turn", t.in.TurnID, "epoch", t.in.Epoch)
	return crewlet.TurnOutput{Status: crewlet.TurnFenced, Rounds: t.out.Rounds}
}

// finish records the turn: transcript, replies, ledger.
func (t *turn) finish(ctx workflow.Context) (crewlet.TurnOutput, error) {
	stoppedBy := ""
	if t.out.Status == crewlet.TurnStopped {
		stoppedBy = t.stop.By
	}
	var fin crewlet.FinishTurnOutput
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityFinishTurn, crewlet.FinishTurnInput{
		Tenure: t.in.Tenure, TurnID: t.in.TurnID, WorkKey: t.in.WorkKey,
		Status: t.out.Status, Rounds: t.out.Rounds, Note: t.out.Note, StoppedBy: stoppedBy,
		Release: t.mergedSteps && t.profile != "", Ack: t.in.Ack, ThreadKeys: t.threadKeys,
	}).Get(ctx, &fin)
	if err != nil {
		if isFenced(err) {
			return t.fenced(), nil
		}
		return crewlet.TurnOutput{}, err
	}
	t.out.Answered = fin.Answered
	t.out.Replies = fin.Replies
	t.out.Acked = fin.Acked
	if t.mergedSteps {
		// FinishTurn gave back the slot if the turn held one.
		t.released, t.profile = true, ""
	}
	t.logger.Info("turn_finished", "seat", t.in.Handle, "turn", t.in.TurnID, "status", t.out.Status, "rounds", t.out.Rounds, "replies", fin.Replies)
	return t.out, nil
}

// modelContext runs a model call; summary names the step in the Temporal
// UI and CLI.
func (t *turn) modelContext(ctx workflow.Context, summary string) workflow.Context {
	// The heartbeat timeout notices a model call whose worker died; the
	// retry on another worker finds the answer if it was recorded. A
	// cancelled turn waits for its model call to stop (the call learns of
	// it at its next heartbeat), so the seat's next tenure never has this
	// tenure's call still running beside its own.
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:             summary,
		StartToCloseTimeout: modelCallTimeout,
		HeartbeatTimeout:    t.in.HeartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			MaximumAttempts:        modelAttempts,
			NonRetryableErrorTypes: []string{crewlet.ErrorTypeFenced, crewlet.ErrorTypePanic, crewlet.ErrorTypeProvider, crewlet.ErrorTypePermanent, crewlet.ErrorTypeProfileUnavailable},
		},
	})
}

// toolContext runs a tool call on the seat's host. A read-only call is
// retried; any other is attempted once, because a second attempt of a write
// whose outcome is unknown could do it twice.
func (t *turn) toolContext(ctx workflow.Context, readOnly bool, summary string) workflow.Context {
	attempts := int32(1)
	if readOnly {
		attempts = readOnlyAttempts
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:                summary,
		TaskQueue:              t.in.HostQueue,
		ScheduleToStartTimeout: t.in.HeartbeatTimeout,
		StartToCloseTimeout:    toolCallTimeout,
		HeartbeatTimeout:       t.in.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumAttempts:        attempts,
			NonRetryableErrorTypes: []string{crewlet.ErrorTypeFenced, crewlet.ErrorTypePanic},
		},
	})
}

func isProfileUnavailable(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == crewlet.ErrorTypeProfileUnavailable
}

func isFenced(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == crewlet.ErrorTypeFenced
}

// hostLost reports whether err is a tool call's schedule-to-start or
// heartbeat timeout: the host queue went unanswered.
func hostLost(err error) bool {
	var timeoutErr *temporal.TimeoutError
	if !errors.As(err, &timeoutErr) {
		return false
	}
	switch timeoutErr.TimeoutType() {
	case enums.TIMEOUT_TYPE_SCHEDULE_TO_START, enums.TIMEOUT_TYPE_HEARTBEAT:
		return true
	}
	return false
}

func isPanic(err error) bool {
	var appErr *temporal.ApplicationError
	var panicErr *temporal.PanicError
	return errors.As(err, &panicErr) || (errors.As(err, &appErr) && appErr.Type() == crewlet.ErrorTypePanic)
}

// failureKind names a failure for a note a sender reads: the application
// error's type ("provider_error", "turn_panicked"), never its message.
func failureKind(err error) string {
	var appErr *temporal.ApplicationError
	var panicErr *temporal.PanicError
	switch {
	case errors.As(err, &panicErr):
		return crewlet.ErrorTypePanic
	case errors.As(err, &appErr) && appErr.Type() != "":
		return appErr.Type()
	}
	return "step_failed"
}

// rootMessage is the innermost message of an activity error chain, without
// Temporal's wrapping.
func rootMessage(err error) string {
	for {
		next := errors.Unwrap(err)
		if next == nil {
			return err.Error()
		}
		err = next
	}
}
