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
)

// turn is the running state of one turn workflow.
type turn struct {
	in    crewlet.TurnInput
	out   crewlet.TurnOutput
	stop  *crewlet.StopTurnRequest
	stops workflow.ReceiveChannel
	// tickets receives the signals of tickets the turn waits on.
	tickets workflow.ReceiveChannel
	wrote   bool
	// refused says why threads ended without an answer; their senders
	// were told, and the turn is recorded failed.
	refused []string
	// progress answers the state query.
	progress crewlet.TurnProgress
	logger   interface {
		Info(string, ...interface{})
		Warn(string, ...interface{})
	}
}

// Turn is one turn of a seat over a batch of triggers (DESIGN §6): every
// trigger that needs an answer is one model conversation of rounds, a model
// call then the tool calls it asked for. The conversation lives in Postgres
// and every step is keyed on the work, so a turn re-run after its tenure was
// lost repeats nothing that finished: it reads back what is recorded.
func Turn(ctx workflow.Context, in crewlet.TurnInput) (crewlet.TurnOutput, error) {
	if in.HeartbeatTimeout <= 0 {
		in.HeartbeatTimeout = defaultHeartbeatTimeout
	}
	t := &turn{in: in, stops: workflow.GetSignalChannel(ctx, crewlet.SignalStopTurn),
		tickets: workflow.GetSignalChannel(ctx, crewlet.SignalTicket), logger: workflow.GetLogger(ctx)}
	if err := workflow.SetQueryHandler(ctx, crewlet.QueryState, func() (crewlet.TurnProgress, error) {
		p := t.progress
		if t.stop != nil {
			p.StopRequested = t.stop.By
		}
		p.Rounds = t.out.Rounds
		return p, nil
	}); err != nil {
		return crewlet.TurnOutput{}, fmt.Errorf("register state query: %w", err)
	}

	var begin crewlet.BeginTurnOutput
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityBeginTurn, crewlet.BeginTurnInput{
		Handle: in.Handle, Epoch: in.Epoch, TurnID: in.TurnID, WorkKey: in.WorkKey, Mail: in.Mail,
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
	t.out.Status = crewlet.TurnDone
	t.progress.Threads, t.progress.MaxRounds = begin.Threads, begin.MaxRounds
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
	if t.out.Status == crewlet.TurnDone && len(t.refused) > 0 {
		t.out.Status = crewlet.TurnFailed
		t.out.Note = strings.Join(t.refused, "; ")
	}
	if begin.Reflect && t.out.Status == crewlet.TurnDone {
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
	err := workflow.ExecuteActivity(t.modelContext(ctx), crewlet.ActivityReflect, crewlet.ReflectInput{
		Handle: t.in.Handle, Epoch: t.in.Epoch, TurnID: t.in.TurnID, WorkKey: t.in.WorkKey,
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
// calling a tool, a person stops the turn, or the turn runs out of rounds.
func (t *turn) converse(ctx workflow.Context, thread, maxRounds int) error {
	for round := 1; ; round++ {
		if t.stopRequested() {
			t.out.Status = crewlet.TurnStopped
			t.out.Note = fmt.Sprintf("Turn stopped by %s", t.stop.By)
			if t.stop.Reason != "" {
				t.out.Note += ": " + t.stop.Reason
			}
			return nil
		}
		if t.out.Rounds >= maxRounds {
			t.out.Note = fmt.Sprintf("I stopped after %d rounds, the most this role allows in one turn (max_rounds), before finishing. Ask again to continue.", maxRounds)
			return nil
		}
		t.out.Rounds++
		t.progress.Round = round
		var answer crewlet.ModelRoundOutput
		err := workflow.ExecuteActivity(t.modelContext(ctx), crewlet.ActivityModelRound, crewlet.ModelRoundInput{
			Handle: t.in.Handle, Epoch: t.in.Epoch, WorkKey: t.in.WorkKey, Thread: thread, Round: round,
		}).Get(ctx, &answer)
		if err != nil {
			return err
		}
		if answer.Failed != "" {
			t.refused = append(t.refused, answer.Failed)
			return nil
		}
		if len(answer.Calls) == 0 {
			return nil
		}
		for _, call := range answer.Calls {
			var res crewlet.ToolCallOutput
			err := workflow.ExecuteActivity(t.toolContext(ctx, call.ReadOnly), crewlet.ActivityToolCall, crewlet.ToolCallInput{
				Handle: t.in.Handle, Epoch: t.in.Epoch, WorkKey: t.in.WorkKey, Thread: thread, Round: round, Call: call,
			}).Get(ctx, &res)
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

// wait holds the turn durably until the ticket it waits on changes, the
// wait's time runs out, or a person stops the turn: a timer and signals,
// nothing held open, so the wait survives restarts and failovers and its
// history does not grow while it waits. Then the call's result is recorded
// from the ticket as it stands.
func (t *turn) wait(ctx workflow.Context, thread, round int, call crewlet.ToolCallRef, w crewlet.TicketWait) error {
	now := workflow.Now(ctx)
	t.progress.Waiting = &crewlet.TicketWaiting{Ticket: w.Ticket, Kind: w.Kind, Since: now, Until: now.Add(w.For)}
	workflow.SetCurrentDetails(ctx, fmt.Sprintf("waiting on ticket %s (%s) until %s", w.Ticket, w.Kind, now.Add(w.For).UTC().Format(time.RFC3339)))
	defer func() {
		t.progress.Waiting = nil
		workflow.SetCurrentDetails(ctx, "")
	}()
	t.logger.Info("turn_waiting", "seat", t.in.Handle, "turn", t.in.TurnID, "ticket", w.Ticket, "kind", w.Kind, "for", w.For)
	timerCtx, cancelTimer := workflow.WithCancel(ctx)
	defer cancelTimer()
	timer := workflow.NewTimer(timerCtx, w.For)
	in := crewlet.ResolveWaitInput{
		Handle: t.in.Handle, Epoch: t.in.Epoch, WorkKey: t.in.WorkKey, Thread: thread, Round: round, Call: call, Wait: w,
	}
	for done := false; !done; {
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(timer, func(workflow.Future) { in.TimedOut, done = true, true })
		sel.AddReceive(t.tickets, func(c workflow.ReceiveChannel, _ bool) {
			var raw converter.RawValue
			c.Receive(ctx, &raw)
			sig, err := decodeSignal(raw, checkTicket)
			if err != nil {
				t.rejected(crewlet.SignalTicket, raw, err)
				return
			}
			done = done || sig.Ticket == w.Ticket
		})
		sel.AddReceive(t.stops, func(c workflow.ReceiveChannel, _ bool) {
			var raw converter.RawValue
			c.Receive(ctx, &raw)
			req, err := decodeSignal(raw, checkStopTurn)
			if err != nil {
				t.rejected(crewlet.SignalStopTurn, raw, err)
				return
			}
			if t.stop == nil {
				t.stop = &req
			}
			in.StoppedBy, done = t.stop.By, true
		})
		sel.Select(ctx)
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityResolveWait, in).Get(ctx, nil)
	t.logger.Info("turn_waited", "seat", t.in.Handle, "turn", t.in.TurnID, "ticket", w.Ticket, "timed_out", in.TimedOut, "stopped_by", in.StoppedBy)
	return err
}

// stopRequested takes in the stop signals received so far.
func (t *turn) stopRequested() bool {
	var raw converter.RawValue
	for t.stops.ReceiveAsync(&raw) {
		req, err := decodeSignal(raw, checkStopTurn)
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
		Handle: t.in.Handle, Epoch: t.in.Epoch, TurnID: t.in.TurnID, WorkKey: t.in.WorkKey,
		Status: t.out.Status, Rounds: t.out.Rounds, Note: t.out.Note, StoppedBy: stoppedBy,
	}).Get(ctx, &fin)
	if err != nil {
		if isFenced(err) {
			return t.fenced(), nil
		}
		return crewlet.TurnOutput{}, err
	}
	t.out.Answered = fin.Answered
	t.out.Replies = fin.Replies
	t.logger.Info("turn_finished", "seat", t.in.Handle, "turn", t.in.TurnID, "status", t.out.Status, "rounds", t.out.Rounds, "replies", fin.Replies)
	return t.out, nil
}

func (t *turn) modelContext(ctx workflow.Context) workflow.Context {
	// The heartbeat timeout notices a model call whose worker died; the
	// retry on another worker finds the answer if it was recorded. A
	// cancelled turn waits for its model call to stop (the call learns of
	// it at its next heartbeat), so the seat's next tenure never has this
	// tenure's call still running beside its own.
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: modelCallTimeout,
		HeartbeatTimeout:    t.in.HeartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			MaximumAttempts:        modelAttempts,
			NonRetryableErrorTypes: []string{crewlet.FencedErrorType, crewlet.PanicErrorType, crewlet.ProviderErrorType, crewlet.PermanentErrorType},
		},
	})
}

// toolContext runs a tool call on the seat's host. A read-only call is
// retried; any other is attempted once, because a second attempt of a write
// whose outcome is unknown could do it twice.
func (t *turn) toolContext(ctx workflow.Context, readOnly bool) workflow.Context {
	attempts := int32(1)
	if readOnly {
		attempts = readOnlyAttempts
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              t.in.HostQueue,
		ScheduleToStartTimeout: t.in.HeartbeatTimeout,
		StartToCloseTimeout:    toolCallTimeout,
		HeartbeatTimeout:       t.in.HeartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumAttempts:        attempts,
			NonRetryableErrorTypes: []string{crewlet.FencedErrorType, crewlet.PanicErrorType},
		},
	})
}

func isFenced(err error) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == crewlet.FencedErrorType
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
	return errors.As(err, &panicErr) || (errors.As(err, &appErr) && appErr.Type() == crewlet.PanicErrorType)
}

// failureKind names a failure for a note a sender reads: the application
// error's type ("provider_error", "turn_panicked"), never its message.
func failureKind(err error) string {
	var appErr *temporal.ApplicationError
	var panicErr *temporal.PanicError
	switch {
	case errors.As(err, &panicErr):
		return crewlet.PanicErrorType
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
