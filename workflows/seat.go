// Package workflows holds crewlet's Temporal workflows. Workflow code is
// deterministic and does no I/O; activities are referred to by name.
package workflows

import (
	"encoding/json"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// Tunables of the seat loop.
const (
	// defaultBackstop wakes an idle seat even if every wake signal was
	// lost. It is a timer, not a poll: an idle seat costs one timer per
	// period.
	defaultBackstop = time.Hour
	// holdBackstop is the backstop of a run begun before node-level
	// liveness, which still holds its tenure with a heartbeating activity.
	// COMPAT(node-liveness@1)
	holdBackstop = 5 * time.Minute
	// cyclesPerRun bounds the history of a run below node-liveness 5; it
	// continues as new after this many loop cycles even if Temporal does
	// not suggest it yet. COMPAT(node-liveness@5)
	cyclesPerRun = 200
	// failureBackoff is the default cap on how long a seat waits after a
	// failed turn before it reads again, so a message that always fails
	// cannot spin the seat; its delivery budget ends it.
	failureBackoff = 10 * time.Second
	// placeBackoff caps the wait between placements that found no node, so
	// a seat runs soon after a node able to run it joins.
	// COMPAT(unplaceable-backoff@1): runs below version 1 wait this way.
	placeBackoff = 5 * time.Second
	// placeRetryFirst and placeRetryMax bound an unplaceable seat's wait
	// between establish attempts (unplaceable-backoff 1): it doubles from
	// the first to the most, so a seat no node can take costs one
	// placement and one timer a minute, and a node joining wakes it.
	placeRetryFirst = time.Second
	placeRetryMax   = time.Minute
	// budgetRecheck is the longest a seat held by a budget cap waits before
	// it tries a turn again.
	budgetRecheck           = time.Hour
	defaultReadBatch        = 16
	defaultHeartbeatTimeout = 3 * time.Second
	defaultReleaseWait      = 30 * time.Second
)

// seat is the running state of one seat workflow.
type seat struct {
	in          crewlet.SeatInput
	state       crewlet.SeatState
	attached    bool
	wakePending bool
	// move is a pending move request (rebalance, node drain).
	move *crewlet.MoveRequest
	// stop is set when the seat left the org.
	stop *crewlet.StopRequest
	// hostLost is set when the tenure's Hold on the host ended without the
	// seat asking: the host died, wedged, restarted or was partitioned.
	hostLost bool
	// exclude lists nodes the next placement must avoid.
	exclude []string
	// cancelHold ends the running Hold activity; nil when none runs.
	cancelHold workflow.CancelFunc
	holdID     int
	// placeFailures counts consecutive placements that found no node.
	// COMPAT(unplaceable-backoff@1): only runs below version 1 count them;
	// later ones keep the count in state.Unplaceable.
	placeFailures int
	// wakes counts the wake signals received, so a wait can end on the
	// next one whatever wakePending was when it began; attemptWakes is
	// the count when the last establish attempt began, so a wake that
	// arrives while a placement runs is not lost to the wait after it.
	wakes, attemptWakes int
	// unattachedSince is when this run began trying to establish a tenure;
	// zero while attached.
	unattachedSince time.Time
	// failures counts consecutive failed turns, for back-off.
	failures int
	// interrupts counts consecutive turns that new mail interrupted
	// (on_busy: interrupt); at crewlet.MaxInterrupts the next turn runs to
	// its end.
	interrupts int
	// upserted is the last search-attribute snapshot written, so unchanged
	// state writes nothing to history.
	upserted crewlet.SeatState
	// perSeatHold is set for a run begun before node-level liveness: it
	// holds its tenure with a heartbeating Hold activity on the host.
	// COMPAT(node-liveness@1): every use of it serves runs below version 1.
	perSeatHold bool
	// keepBackstop is set for a run that keeps one backstop timer across
	// its sleeps (node-liveness 3); backstopTimer is that timer, nil
	// until the next sleep starts one. COMPAT(node-liveness@3): a run
	// below version 3 starts a timer per sleep.
	keepBackstop  bool
	backstopTimer workflow.Future
	// turnShowsRunning is set for a run that leaves "running" out of its
	// search attributes (node-liveness 4): its open Turn workflow says so
	// (seatclient.Statuses). COMPAT(node-liveness@4): a run below version
	// 4 upserts running and idle around every turn.
	turnShowsRunning bool
	// inlineTurns is set for a run that runs its turns in its own workflow
	// (node-liveness 5) and continues as new only when Temporal suggests
	// it. COMPAT(node-liveness@5): a run below version 5 starts a Turn
	// child workflow per turn and continues as new every cyclesPerRun
	// loop cycles too.
	inlineTurns bool
	// mergedSteps is set for a run whose reply takes four local activities
	// (node-liveness 6): ReadMail prepares the turn, BeginTurn acquires its
	// profile, FinishTurn releases it and acks the mail.
	// COMPAT(node-liveness@6): a run below version 6 runs PrepareTurn,
	// AcquireProfile, ReleaseProfile and AckMail as local activities of
	// their own.
	mergedSteps bool
	// handOverAsked is set by the hand_over signal: the run continues as
	// new at the top of its loop.
	handOverAsked bool
	// inline is the seat's hold on its inline turn in flight, nil when
	// none runs.
	inline *inlineTurnFuture
	logger interface {
		Info(string, ...interface{})
		Warn(string, ...interface{})
	}
}

// Seat is the long-running workflow of one agent seat
// (docs/architecture.md, "The seat workflow"): it holds the seat's tenure,
// reads its mailbox and runs its turns, one at a time.
func Seat(ctx workflow.Context, in crewlet.SeatInput) error {
	if in.ReadBatch <= 0 {
		in.ReadBatch = defaultReadBatch
	}
	if in.HeartbeatTimeout <= 0 {
		in.HeartbeatTimeout = defaultHeartbeatTimeout
	}
	if in.ReleaseWait <= 0 {
		in.ReleaseWait = defaultReleaseWait
	}
	if in.RetryBackoff <= 0 {
		in.RetryBackoff = failureBackoff
	}
	if in.Backstop <= 0 {
		in.Backstop = defaultBackstop
	}
	s := &seat{in: in, logger: workflow.GetLogger(ctx)}
	// A run begun since node-level liveness runs no activity while idle:
	// the failure detector's host_lost signal, and any host-queue activity
	// that times out, tell it its host is gone.
	version := workflow.GetVersion(ctx, changeNodeLiveness, workflow.DefaultVersion, nodeLivenessVersion)
	s.perSeatHold = version == workflow.DefaultVersion
	s.keepBackstop = version >= backstopTimerVersion
	s.turnShowsRunning = version >= turnShowsRunningVersion
	s.inlineTurns = version >= inlineTurnsVersion
	s.mergedSteps = version >= mergedStepsVersion
	if in.Carry != nil {
		s.state = in.Carry.State
		s.attached = in.Carry.Attached
		s.wakePending = in.Carry.WakePending
		s.move = in.Carry.Move
		s.exclude = in.Carry.Exclude
		s.state.Counters.ContinuedRuns++
	} else {
		s.state = crewlet.SeatState{Handle: in.Handle, Role: in.Role, Status: crewlet.StatusEstablishing}
		s.wakePending = true
		// COMPAT(node-liveness@2): a run below version 2 writes its
		// start's search attributes again.
		if version >= startAttributesVersion {
			s.upserted = s.state
		}
	}
	s.state.Role = in.Role

	if err := workflow.SetQueryHandler(ctx, crewlet.QueryState, func() (crewlet.SeatState, error) {
		return s.query(), nil
	}); err != nil {
		return fmt.Errorf("register state query: %w", err)
	}
	if err := s.handleNudges(ctx); err != nil {
		return fmt.Errorf("register %s update: %w", crewlet.UpdateNudgeTurn, err)
	}
	signals := newSeatSignals(ctx, s)
	workflow.Go(ctx, signals.run)

	if s.attached && s.perSeatHold { // COMPAT(node-liveness@1)
		s.startHold(ctx)
	}
	for cycle := 0; ; cycle++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.upsert(ctx)
		if s.handsOver(ctx, cycle) {
			return s.continueAsNew(ctx, signals)
		}
		switch {
		case s.stop != nil:
			return s.stopSeat(ctx)
		case s.hostLost:
			s.abandon(ctx, "host_lost")
			continue
		case s.state.Drain != nil:
			if err := s.drain(ctx); err != nil {
				return err
			}
			continue
		case s.move != nil:
			s.moveAway(ctx)
			continue
		case !s.attached:
			s.establish(ctx)
			continue
		case s.state.Budget != nil && s.state.Pause == nil:
			s.awaitBudget(ctx)
			continue
		case s.state.Pause != nil:
			s.setStatus(ctx, crewlet.StatusPaused)
			s.recordStatus(ctx, "paused")
			if err := workflow.Await(ctx, func() bool { return s.state.Pause == nil || s.interrupted() }); err != nil {
				return err
			}
			if s.state.Pause == nil {
				s.recordStatus(ctx, "active")
			}
			continue
		}
		s.setStatus(ctx, crewlet.StatusIdle)
		s.wakePending = false
		mail, prep, err := s.readMail(ctx)
		if err != nil {
			if !s.tenureEnded(ctx, err) {
				s.noteError(fmt.Sprintf("read mail: %v", err))
				_ = workflow.Sleep(ctx, failureBackoff)
			}
			continue
		}
		if len(mail) == 0 {
			s.upsert(ctx)
			if err := s.sleep(ctx); err != nil {
				return err
			}
			continue
		}
		s.runBatch(ctx, mail, prep)
	}
}

// query answers the state query: the seat's state, with its inline turn's
// progress (a Turn child answers for itself).
func (s *seat) query() crewlet.SeatState {
	st := s.state
	if st.Turn != nil && s.inline != nil {
		cur := *st.Turn
		p := s.inline.turn.currentProgress()
		cur.Progress = &p
		st.Turn = &cur
	}
	return st
}

// sleep waits, idle, for a wake, a pause or a reason to leave the tenure,
// at most until the backstop. A run since node-liveness 3 keeps one
// backstop timer over its sleeps, started by the first sleep after the
// last one fired, so a seat wakes at least once per backstop however often
// it sleeps. A timer per sleep cost every sleep a timer write, and an hour
// later a workflow task: AwaitWithTimeout leaves its timer running when
// the condition comes first.
func (s *seat) sleep(ctx workflow.Context) error {
	woken := func() bool { return s.wakePending || s.state.Pause != nil || s.interrupted() }
	if !s.keepBackstop { // COMPAT(node-liveness@3)
		_, err := workflow.AwaitWithTimeout(ctx, s.backstop(), woken)
		return err
	}
	if woken() {
		return nil
	}
	if s.backstopTimer == nil {
		s.backstopTimer = workflow.NewTimer(ctx, s.in.Backstop)
	}
	err := workflow.Await(ctx, func() bool { return woken() || s.backstopTimer.IsReady() })
	if s.backstopTimer.IsReady() {
		s.backstopTimer = nil
	}
	return err
}

// backstop is how long the idle seat waits for a wake.
func (s *seat) backstop() time.Duration {
	if s.perSeatHold { // COMPAT(node-liveness@1)
		return holdBackstop
	}
	return s.in.Backstop
}

// interrupted reports whether something asks the seat to leave its tenure:
// a drain, a move, or a lost host.
func (s *seat) interrupted() bool {
	return s.state.Drain != nil || s.move != nil || s.hostLost || s.stop != nil
}

// stopSeat ends a seat that left the org: the turn in flight has finished,
// the tenure is released, and the workflow completes. Its mailbox is kept
// for the retirement grace period, so a seat added back finds its mail.
func (s *seat) stopSeat(ctx workflow.Context) error {
	if s.state.Epoch > 0 {
		// Fenced by the epoch like every seat write: a drained seat still
		// holds the latest one, a seat whose tenure moved on writes nothing.
		s.recordStatus(ctx, "stopped")
	}
	if s.attached && !s.hostLost {
		s.release(ctx, "stopped: "+s.stop.Reason)
	}
	s.stopHold()
	s.state.Node, s.state.HostQueue = "", ""
	s.setStatus(ctx, crewlet.StatusStopped)
	s.logger.Info("seat_stopped", "seat", s.in.Handle, "reason", s.stop.Reason, "by", s.stop.By)
	return nil
}

// readBatch is how many entries the next read takes: one at a time after a
// failed turn, so a message that keeps failing spends only its own delivery
// budget, not its batch-mates'.
func (s *seat) readBatch() int {
	if s.failures > 0 {
		return 1
	}
	return s.in.ReadBatch
}

// readMail reads the seat's next entries and, since node-liveness 6, the
// preparation of their turn (nil below it).
func (s *seat) readMail(ctx workflow.Context) ([]crewlet.MailRef, *crewlet.PrepareTurnOutput, error) {
	// A failed turn's error is about a trigger already acked, so it is no
	// reason for an entry dead-lettered now.
	lastError := s.state.LastError
	if s.state.FailedTurn != "" {
		lastError = ""
	}
	var out crewlet.ReadMailOutput
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityReadMail, crewlet.ReadMailInput{
		Tenure:     s.tenure(),
		Consumer:   fmt.Sprintf("%s:e%d", s.state.Node, s.state.Epoch),
		Max:        s.readBatch(),
		ClearAwake: true,
		LastError:  lastError,
		Prepare:    s.mergedSteps,
	}).Get(ctx, &out)
	if err != nil {
		return nil, nil, err
	}
	s.state.QueuedMail = out.Lag
	return out.Mail, out.Prepared, nil
}

// recordStatus writes the seat's lifecycle status to Postgres. It only
// reports, so a failure is noted and never stops the seat.
func (s *seat) recordStatus(ctx workflow.Context, status string) {
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivitySetSeatStatus, crewlet.SeatStatusInput{
		Tenure: s.tenure(), Status: status,
	}).Get(ctx, nil)
	if err != nil && !isFenced(err) {
		s.noteError(fmt.Sprintf("record status %s: %v", status, err))
	}
}

func (s *seat) noteError(msg string) {
	// A turn's note can be long; the state is queried and carried.
	msg = clipText(msg, maxLastErrorBytes)
	s.state.LastError, s.state.FailedTurn = msg, ""
	s.logger.Warn("seat_error", "seat", s.in.Handle, "error", msg)
}

// handsOver reports whether the run ends here, between turns, and hands the
// seat to a fresh run (continueAsNew). A seat run is Pinned to the build
// that runs it (workers.RegisterWorkflows): it ends when Temporal suggests
// it (its history grew long) or when its deployment's current build is no
// longer its own, so the next run starts on the current build. A seat in a
// turn, a durable wait included, reaches this only when the turn ends, so it
// keeps its build until then; an idle one gets here at the next wake, which
// a node of the new build sends it (workers, build handover).
//
// A hand_over signal ends the run too, whatever its shape: the current
// build's nodes send it to the runs on other builds, and to the runs of the
// child-turn shape (below node-liveness 5), whose next run has the inline
// shape. Such a run also ends every cyclesPerRun cycles, so one that no
// node asks hands over in the end. COMPAT(node-liveness@5)
func (s *seat) handsOver(ctx workflow.Context, cycle int) bool {
	reason := s.handOverReason(ctx, cycle)
	if reason != "" {
		s.logger.Info("seat_hand_over", "seat", s.in.Handle, "reason", reason, "history_events", workflow.GetInfo(ctx).GetCurrentHistoryLength())
	}
	return reason != ""
}

// handOverReason says why the run hands over now, "" when it goes on.
func (s *seat) handOverReason(ctx workflow.Context, cycle int) string {
	info := workflow.GetInfo(ctx)
	switch {
	case info.GetContinueAsNewSuggested():
		return "suggested"
	case s.handOverAsked:
		return "asked"
	case s.inlineTurns && info.GetTargetWorkerDeploymentVersionChanged():
		return "build_changed"
	case !s.inlineTurns && cycle >= cyclesPerRun:
		return "cycles"
	}
	return ""
}

// continueAsNew hands the seat's state to a fresh run, between turns, after
// every signal received so far is applied. The next run starts on the
// deployment's current build (auto-upgrade for its first task), where it
// is pinned from then on.
func (s *seat) continueAsNew(ctx workflow.Context, signals *seatSignals) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	if err := signals.stop(ctx); err != nil {
		return err
	}
	if s.stop != nil {
		// The carry has no stop: a seat that left the org ends here.
		return s.stopSeat(ctx)
	}
	// The next run holds the same tenure with a Hold of its own; this run's
	// Hold ends with the run. COMPAT(node-liveness@1)
	s.holdID++
	s.cancelHold = nil
	next := s.next()
	//workflowcheck:ignore encoding/json is deterministic; flagged only through reflect
	if b, err := json.Marshal(next); err != nil || len(b) > maxCarryBytes {
		// Only reports: every carried field is bounded, so this means a
		// field was added without a bound.
		s.logger.Warn("seat_carry_large", "seat", s.in.Handle, "bytes", len(b), "bound", maxCarryBytes, "error", err)
	}
	return workflow.NewContinueAsNewErrorWithOptions(ctx, workflow.ContinueAsNewErrorOptions{
		InitialVersioningBehavior: workflow.ContinueAsNewVersioningBehaviorAutoUpgrade,
	}, Seat, next)
}

// next is the input of the seat's next run: its settings and what it
// carries. What came from outside (signals, turn notes) is clipped to its
// bound, so a value this seat took in before signals were checked cannot
// grow the carry past maxCarryBytes.
func (s *seat) next() crewlet.SeatInput {
	next := s.in
	exclude := s.exclude
	if s.hostLost && s.state.Node != "" {
		exclude = append(exclude, s.state.Node)
	}
	if len(exclude) > maxCarriedExclude {
		exclude = exclude[len(exclude)-maxCarriedExclude:]
	}
	state := s.state
	state.LastError = clipText(state.LastError, maxLastErrorBytes)
	if p := state.Pause; p != nil {
		state.Pause = &crewlet.PauseHold{By: clipText(p.By, crewlet.MaxByBytes), Reason: clipText(p.Reason, crewlet.MaxReasonBytes), StopTurn: p.StopTurn, Since: p.Since}
	}
	if d := state.Drain; d != nil {
		state.Drain = &crewlet.DrainHold{By: clipText(d.By, crewlet.MaxByBytes), Reason: clipText(d.Reason, crewlet.MaxReasonBytes), Since: d.Since}
	}
	move := s.move
	if m := move; m != nil {
		move = &crewlet.MoveRequest{ExcludeNode: clipText(m.ExcludeNode, crewlet.MaxNodeBytes), Reason: clipText(m.Reason, crewlet.MaxReasonBytes), By: clipText(m.By, crewlet.MaxByBytes)}
	}
	next.Carry = &crewlet.SeatCarry{State: state, Attached: s.attached && !s.hostLost, WakePending: s.wakePending, Move: move, Exclude: exclude}
	return next
}

func localContext(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        100 * time.Millisecond,
			MaximumInterval:        10 * time.Second,
			NonRetryableErrorTypes: []string{crewlet.ErrorTypeFenced},
		},
	})
}
