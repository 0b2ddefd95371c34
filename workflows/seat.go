// Package workflows holds crewlet's Temporal workflows. Workflow code is
// deterministic and does no I/O; activities are referred to by name.
package workflows

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// SeatInput starts or continues a seat workflow.
type SeatInput struct {
	Handle string `json:"handle"`
	Role   string `json:"role"`
	// ReadBatch is the most mailbox entries one read takes; 0 means 16.
	ReadBatch int `json:"read_batch,omitempty"`
	// HeartbeatTimeout is the host heartbeat timeout: how long a host may
	// stay silent before the seat re-establishes elsewhere. 0 means 3s.
	HeartbeatTimeout time.Duration `json:"heartbeat_timeout,omitempty"`
	// ReleaseWait bounds how long a voluntary release (move, drain) waits for
	// the turn in flight before it cancels it. 0 means 30s.
	ReleaseWait time.Duration `json:"release_wait,omitempty"`
	// RetryBackoff caps the wait after a failed turn (2s, 4s, ...). 0 means 10s.
	RetryBackoff time.Duration `json:"retry_backoff,omitempty"`
	// Backstop is how long an idle seat waits for a wake before it reads
	// its mailbox anyway, should every wake signal have been lost. 0 means
	// 1h.
	Backstop time.Duration `json:"backstop,omitempty"`
	// Carry is the state handed over by continue-as-new; nil on a first start.
	Carry *SeatCarry `json:"carry,omitempty"`
}

// SeatCarry is what a seat keeps across continue-as-new.
type SeatCarry struct {
	State    crewlet.SeatState `json:"state"`
	Attached bool              `json:"attached"`
	// Move is a move request not yet carried out.
	Move *crewlet.MoveRequest `json:"move,omitempty"`
	// Exclude lists nodes the next placement avoids (a host just lost).
	Exclude []string `json:"exclude,omitempty"`
	// WakePending is a wake that arrived before the hand-over.
	WakePending bool `json:"wake_pending"`
}

// Tunables of the seat loop.
const (
	// defaultBackstop wakes an idle seat even if every wake signal was
	// lost. It is a timer, not a poll: an idle seat costs one timer per
	// period.
	defaultBackstop = time.Hour
	// holdBackstop is the backstop of a run begun before node-level
	// liveness, which still holds its tenure with a heartbeating activity.
	holdBackstop = 5 * time.Minute
	// startAttributesVersion is the newest version of the seat's
	// "node-liveness" change. Version 1 made the host's liveness the
	// node's: no per-seat activity holds the tenure. Version 2 also knows
	// that a fresh run starts with SeatSearchAttributes and does not write
	// them again: one visibility write fewer per seat established. One
	// change id for both adds no second marker, and no second
	// TemporalChangeVersion write, to every run.
	startAttributesVersion = 2
	// cyclesPerRun bounds a run's history; the seat continues as new after
	// this many loop cycles even if Temporal does not suggest it yet.
	cyclesPerRun = 200
	// failureBackoff is the default cap on how long a seat waits after a
	// failed turn before it reads again, so a message that always fails
	// cannot spin the seat; its delivery budget ends it.
	failureBackoff = 10 * time.Second
	// placeBackoff caps the wait between placements that found no node, so
	// a seat runs soon after a node able to run it joins.
	placeBackoff = 5 * time.Second
	// budgetRecheck is the longest a seat held by a budget cap waits before
	// it tries a turn again.
	budgetRecheck           = time.Hour
	defaultReadBatch        = 16
	defaultHeartbeatTimeout = 3 * time.Second
	defaultReleaseWait      = 30 * time.Second
)

var (
	saHandle = temporal.NewSearchAttributeKeyKeyword(crewlet.SAHandle)
	saRole   = temporal.NewSearchAttributeKeyKeyword(crewlet.SARole)
	saStatus = temporal.NewSearchAttributeKeyKeyword(crewlet.SAStatus)
	saNode   = temporal.NewSearchAttributeKeyKeyword(crewlet.SANode)
	saEpoch  = temporal.NewSearchAttributeKeyInt64(crewlet.SAEpoch)
	saPaused = temporal.NewSearchAttributeKeyBool(crewlet.SAPaused)
)

// SeatSearchAttributes are the attributes a seat starts with, before its
// workflow first upserts them.
func SeatSearchAttributes(handle, role string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		saHandle.ValueSet(handle),
		saRole.ValueSet(role),
		saStatus.ValueSet(string(crewlet.StatusEstablishing)),
		saPaused.ValueSet(false),
	)
}

// seat is the running state of one seat workflow.
type seat struct {
	in          SeatInput
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
	placeFailures int
	// unattachedSince is when this run began trying to establish a tenure;
	// zero while attached.
	unattachedSince time.Time
	// failures counts consecutive failed turns, for back-off.
	failures int
	// upserted is the last search-attribute snapshot written, so unchanged
	// state writes nothing to history.
	upserted crewlet.SeatState
	// perSeatHold is set for a run begun before node-level liveness: it
	// holds its tenure with a heartbeating Hold activity on the host.
	perSeatHold bool
	logger      interface {
		Info(string, ...interface{})
		Warn(string, ...interface{})
	}
}

// Seat is the long-running workflow of one agent seat (DESIGN §3): it holds
// the seat's tenure, reads its mailbox and runs its turns, one at a time.
func Seat(ctx workflow.Context, in SeatInput) error {
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
	version := workflow.GetVersion(ctx, "node-liveness", workflow.DefaultVersion, startAttributesVersion)
	s.perSeatHold = version == workflow.DefaultVersion
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
		if version >= startAttributesVersion {
			s.upserted = s.state
		}
	}
	s.state.Role = in.Role

	if err := workflow.SetQueryHandler(ctx, crewlet.QueryState, func() (crewlet.SeatState, error) {
		return s.state, nil
	}); err != nil {
		return fmt.Errorf("register state query: %w", err)
	}
	signals := newSeatSignals(ctx, s)
	workflow.Go(ctx, signals.run)

	if s.attached && s.perSeatHold {
		s.startHold(ctx)
	}
	for cycle := 0; ; cycle++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.upsert(ctx)
		if cycle >= cyclesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
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
		mail, err := s.readMail(ctx)
		if err != nil {
			if !s.tenureEnded(err) {
				s.noteError(fmt.Sprintf("read mail: %v", err))
				_ = workflow.Sleep(ctx, failureBackoff)
			}
			continue
		}
		if len(mail) == 0 {
			s.upsert(ctx)
			if _, err := workflow.AwaitWithTimeout(ctx, s.backstop(), func() bool {
				return s.wakePending || s.state.Pause != nil || s.interrupted()
			}); err != nil {
				return err
			}
			continue
		}
		s.runBatch(ctx, mail)
	}
}

// awaitBudget holds the seat's turns until the budget window that holds them
// turns. The held triggers stay in the mailbox and the seat reads nothing
// meanwhile: a read would spend a delivery of each. It asks whether the cap
// still holds when the window turns, and at least every budgetRecheck, so a
// cap raised in config lets it go on within that time.
func (s *seat) awaitBudget(ctx workflow.Context) {
	s.setStatus(ctx, crewlet.StatusIdle)
	wait := min(max(s.state.Budget.ResetsAt.Sub(workflow.Now(ctx)), time.Second), budgetRecheck)
	_, _ = workflow.AwaitWithTimeout(ctx, wait, func() bool { return s.state.Pause != nil || s.interrupted() })
	if s.state.Pause != nil || s.interrupted() {
		return
	}
	var hold *crewlet.BudgetHold
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityCheckBudget, crewlet.CheckBudgetInput{
		Handle: s.in.Handle,
	}).Get(ctx, &hold)
	if err != nil {
		// The next turn checks again; a check that cannot run must not
		// hold the seat.
		s.noteError(fmt.Sprintf("check budget: %v", err))
		hold = nil
	}
	s.state.Budget = hold
	if hold == nil {
		s.wakePending = true
	}
}

// backstop is how long the idle seat waits for a wake.
func (s *seat) backstop() time.Duration {
	if s.perSeatHold {
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

// runBatch answers the entries read in one turn (mail that arrived while the
// last turn ran is batched into this one). Entries the completion ledger
// already holds are acked without running. On failure nothing is acked: the
// entries are reclaimed by the next read, so nothing is lost and order is
// kept.
func (s *seat) runBatch(ctx workflow.Context, mail []crewlet.MailRef) {
	if s.state.Pause != nil || s.interrupted() || !s.attached {
		return
	}
	if err := s.runTurn(ctx, mail); err != nil {
		if s.tenureEnded(err) {
			return
		}
		if temporal.IsCanceledError(err) && (s.movesAway() || s.state.Drain != nil) {
			// Cut short by a release that waited long enough: not a
			// failure; the entries stay unacked for the next tenure.
			return
		}
		s.state.Counters.Failures++
		s.failures++
		if reason, ok := permanent(err); ok && len(mail) == 1 {
			// It will never succeed: dead-lettered now, with the reason,
			// rather than after its whole delivery budget.
			s.deadLetter(ctx, mail, reason)
			return
		}
		s.noteError(fmt.Sprintf("turn failed: %v", err))
		s.setStatus(ctx, crewlet.StatusIdle)
		_ = workflow.Sleep(ctx, min(s.in.RetryBackoff, time.Duration(s.failures)*2*time.Second))
		return
	}
	s.failures = 0
}

func (s *seat) runTurn(ctx workflow.Context, mail []crewlet.MailRef) error {
	var prep crewlet.PrepareTurnOutput
	if err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityPrepareTurn, crewlet.PrepareTurnInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch, Mail: mail,
	}).Get(ctx, &prep); err != nil {
		return err
	}
	var out crewlet.TurnOutput
	var turnID string
	if len(prep.Run) > 0 {
		eventIDs := make([]string, len(prep.Run))
		for i, m := range prep.Run {
			eventIDs[i] = m.EventID
		}
		workKey := crewlet.WorkKey(eventIDs)
		turnID = crewlet.TurnWorkflowID(s.in.Handle, workKey)
		s.state.Turn = &crewlet.CurrentTurn{ID: turnID, WorkKey: workKey, Triggers: len(prep.Run), StartedAt: workflow.Now(ctx)}
		s.setStatus(ctx, crewlet.StatusRunning)
		defer func() { s.state.Turn = nil }()

		turnCtx, cancelTurn := workflow.WithCancel(ctx)
		turnCtx = workflow.WithChildOptions(turnCtx, workflow.ChildWorkflowOptions{
			WorkflowID:          turnID,
			WaitForCancellation: true,
			// A turn's workflow task held by a dead worker is retried
			// elsewhere as fast as a lost host is noticed.
			WorkflowTaskTimeout: s.in.HeartbeatTimeout,
		})
		future := workflow.ExecuteChildWorkflow(turnCtx, crewlet.WorkflowTurn, crewlet.TurnInput{
			Handle: s.in.Handle, Epoch: s.state.Epoch, HostQueue: s.state.HostQueue, TurnID: turnID, WorkKey: workKey,
			Mail: prep.Run, HeartbeatTimeout: s.in.HeartbeatTimeout,
		})
		if err := s.awaitTurn(ctx, future, turnID, cancelTurn); err != nil {
			return err
		}
		if err := future.Get(ctx, &out); err != nil {
			return err
		}
		switch out.Status {
		case crewlet.TurnFenced:
			s.fenced()
			return nil
		case crewlet.TurnHeld:
			s.state.Budget = out.Hold
			s.logger.Info("turn_held", "seat", s.in.Handle, "scope", out.Hold.Scope, "window", out.Hold.Window, "resets_at", out.Hold.ResetsAt)
			return nil
		}
		s.state.Counters.Turns++
	}
	// The ledger holds every one of these triggers now, so acking is safe;
	// if the ack is lost the redelivery is skipped by the ledger.
	streamIDs := make([]string, 0, len(mail))
	for _, m := range mail {
		streamIDs = append(streamIDs, m.StreamID)
	}
	if err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityAckMail, crewlet.AckMailInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch, StreamIDs: streamIDs,
	}).Get(ctx, nil); err != nil {
		return err
	}
	s.state.Counters.Triggers += int64(len(out.Answered))
	s.state.Counters.Skipped += int64(len(prep.Skipped))
	switch {
	case out.Status == crewlet.TurnFailed:
		// Acked, so the mailbox forgets it: the seat's state keeps saying
		// so until a turn succeeds.
		s.noteError(fmt.Sprintf("turn failed: %s", out.Note))
		s.state.FailedTurn = turnID
	case len(prep.Run) > 0:
		s.state.LastError, s.state.FailedTurn = "", ""
	}
	return nil
}

// awaitTurn waits for the turn in flight. A person's pause with stop_turn
// asks the turn to stop at its next round boundary. A voluntary release
// (move, drain) lets it finish for up to ReleaseWait, then cancels it; a lost
// host cancels it at once. A cancelled turn's triggers stay unacked, so the
// next tenure runs them, and the turn's recorded steps are not repeated.
func (s *seat) awaitTurn(ctx workflow.Context, turn workflow.ChildWorkflowFuture, turnID string, cancel workflow.CancelFunc) error {
	stopSent := false
	stopTurn := func() bool { return !stopSent && s.state.Pause != nil && s.state.Pause.StopTurn }
	for {
		if err := workflow.Await(ctx, func() bool {
			return turn.IsReady() || stopTurn() || s.hostLost || s.state.Drain != nil || s.movesAway()
		}); err != nil {
			return err
		}
		switch {
		case turn.IsReady():
			return nil
		case stopTurn():
			stopSent = true
			req := crewlet.StopTurnRequest{By: s.state.Pause.By, Reason: s.state.Pause.Reason}
			if err := turn.SignalChildWorkflow(ctx, crewlet.SignalStopTurn, req).Get(ctx, nil); err != nil {
				s.logger.Warn("turn_stop_failed", "seat", s.in.Handle, "turn", turnID, "error", err)
			}
			continue
		case s.hostLost:
			s.logger.Warn("turn_cancelled", "seat", s.in.Handle, "turn", turnID, "reason", "host lost")
			cancel()
			return workflow.Await(ctx, turn.IsReady)
		}
		done, err := workflow.AwaitWithTimeout(ctx, s.in.ReleaseWait, func() bool { return turn.IsReady() || s.hostLost })
		if err != nil {
			return err
		}
		if !done || !turn.IsReady() {
			s.logger.Warn("turn_cancelled", "seat", s.in.Handle, "turn", turnID, "reason", "release wait exceeded", "wait", s.in.ReleaseWait)
			cancel()
		}
		return workflow.Await(ctx, turn.IsReady)
	}
}

// movesAway reports whether the pending move asks the seat to leave the node
// it is on; a move naming another node is ignored, so it must not cut a turn
// short either.
func (s *seat) movesAway() bool {
	return s.move != nil && (s.move.ExcludeNode == "" || s.move.ExcludeNode == s.state.Node)
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

func (s *seat) readMail(ctx workflow.Context) ([]crewlet.MailRef, error) {
	// A failed turn's error is about a trigger already acked, so it is no
	// reason for an entry dead-lettered now.
	lastError := s.state.LastError
	if s.state.FailedTurn != "" {
		lastError = ""
	}
	var out crewlet.ReadMailOutput
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityReadMail, crewlet.ReadMailInput{
		Handle:     s.in.Handle,
		Epoch:      s.state.Epoch,
		Consumer:   fmt.Sprintf("%s:e%d", s.state.Node, s.state.Epoch),
		Max:        s.readBatch(),
		ClearAwake: true,
		LastError:  lastError,
	}).Get(ctx, &out)
	if err != nil {
		return nil, err
	}
	s.state.QueuedMail = out.Lag
	return out.Mail, nil
}

// establish starts a tenure: place the seat on a node, Attach there (which
// bumps the epoch in Postgres), then hold the tenure with a heartbeating
// activity on that node's host queue.
func (s *seat) establish(ctx workflow.Context) {
	if s.unattachedSince.IsZero() {
		s.unattachedSince = workflow.Now(ctx)
	}
	s.setStatus(ctx, crewlet.StatusEstablishing)
	var place crewlet.PlaceSeatOutput
	err := workflow.ExecuteLocalActivity(placeContext(ctx), crewlet.ActivityPlaceSeat, crewlet.PlaceSeatInput{
		Handle: s.in.Handle, Exclude: s.exclude,
	}).Get(ctx, &place)
	if err != nil {
		s.noteError(fmt.Sprintf("place seat: %v", err))
		if len(s.exclude) > 0 {
			// Nodes are excluded for one placement only; with none left, try
			// them again rather than leave the seat unrun.
			s.exclude = nil
			return
		}
		s.placeFailures++
		_, _ = workflow.AwaitWithTimeout(ctx, min(placeBackoff, time.Duration(s.placeFailures)*time.Second), s.interrupted)
		return
	}
	s.placeFailures = 0
	out, err := s.attach(ctx, place)
	if err != nil {
		s.noteError(fmt.Sprintf("attach on %s: %v", place.Node, err))
		s.exclude = append(s.exclude, place.Node)
		return
	}
	s.exclude = nil
	s.attached = true
	s.hostLost = false
	s.state.Epoch = out.Epoch
	s.state.Node = out.Node
	s.state.HostQueue = place.HostQueue
	s.state.Counters.Establishes++
	if s.state.FailedTurn == "" {
		s.state.LastError = ""
	}
	s.logger.Info("seat_attached", "seat", s.in.Handle, "epoch", out.Epoch, "node", out.Node)
	// The SDK's handler records nothing while replaying, so a replayed
	// establish is not counted twice.
	workflow.GetMetricsHandler(ctx).Timer(crewlet.MetricEstablish).Record(workflow.Now(ctx).Sub(s.unattachedSince))
	s.unattachedSince = time.Time{}
	if s.perSeatHold {
		s.startHold(ctx)
	}
	s.setStatus(ctx, crewlet.StatusIdle)
}

// attach starts the tenure on the placed node: by the Attach activity on
// its host queue, unless the placement ran on that node and attached there.
func (s *seat) attach(ctx workflow.Context, place crewlet.PlaceSeatOutput) (crewlet.AttachOutput, error) {
	switch {
	case place.Attached != nil:
		return *place.Attached, nil
	case place.AttachError != "":
		return crewlet.AttachOutput{}, errors.New(place.AttachError)
	}
	var out crewlet.AttachOutput
	attachCtx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              place.HostQueue,
		ScheduleToStartTimeout: s.in.HeartbeatTimeout,
		StartToCloseTimeout:    attachTimeout,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
	})
	err := workflow.ExecuteActivity(attachCtx, crewlet.ActivityAttach, crewlet.AttachInput{Handle: s.in.Handle}).Get(ctx, &out)
	return out, err
}

// startHold runs the tenure's Hold activity on the host, for a run begun
// before node-level liveness. If it ends on its own (heartbeat or
// schedule-to-start timeout, or the host no longer hosts the seat) the host
// is lost and the seat re-establishes elsewhere.
func (s *seat) startHold(ctx workflow.Context) {
	holdCtx, cancel := workflow.WithCancel(ctx)
	s.holdID++
	id := s.holdID
	s.cancelHold = cancel
	future := workflow.ExecuteActivity(s.hostContext(holdCtx, 0), crewlet.ActivityHold, crewlet.HoldInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch,
	})
	workflow.Go(ctx, func(gctx workflow.Context) {
		err := future.Get(gctx, nil)
		if id != s.holdID || s.cancelHold == nil {
			return // a hold the seat ended itself
		}
		s.cancelHold = nil
		s.hostLost = true
		s.logger.Warn("seat_host_lost", "seat", s.in.Handle, "epoch", s.state.Epoch, "node", s.state.Node, "error", err)
	})
}

// stopHold ends the Hold activity without waiting for it.
func (s *seat) stopHold() {
	if s.cancelHold != nil {
		cancel := s.cancelHold
		s.cancelHold = nil
		cancel()
	}
}

// release ends the tenure voluntarily: Detach on the host (which proves the
// teardown), then stop holding. A teardown that cannot be proven keeps the
// seat on its node for as long as the node lives (Detach heartbeats
// meanwhile, and the node alarms); only the node's end lets the seat go.
func (s *seat) release(ctx workflow.Context, reason string) {
	if !s.attached {
		return
	}
	detachCtx := s.hostContext(ctx, 0)
	err := workflow.ExecuteActivity(detachCtx, crewlet.ActivityDetach, crewlet.DetachInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch, Reason: reason,
	}).Get(ctx, nil)
	if err != nil {
		// The host did not answer: it is gone, and so is what it held.
		s.logger.Warn("seat_detach_failed", "seat", s.in.Handle, "epoch", s.state.Epoch, "node", s.state.Node, "error", err)
	}
	s.stopHold()
	s.attached = false
	s.logger.Info("seat_detached", "seat", s.in.Handle, "epoch", s.state.Epoch, "node", s.state.Node, "reason", reason)
}

// abandon ends a tenure the seat lost (fenced release): nothing is
// republished; unacked mail stays pending for the next tenure.
func (s *seat) abandon(ctx workflow.Context, reason string) {
	if s.hostLost && s.state.Node != "" {
		s.exclude = []string{s.state.Node}
	}
	s.stopHold()
	s.attached = false
	s.hostLost = false
	s.logger.Warn("seat_detached", "seat", s.in.Handle, "epoch", s.state.Epoch, "node", s.state.Node, "reason", reason)
	s.state.Node, s.state.HostQueue = "", ""
	s.setStatus(ctx, crewlet.StatusEstablishing)
}

// moveAway releases the seat and establishes it on another node.
func (s *seat) moveAway(ctx workflow.Context) {
	req := *s.move
	s.move = nil
	if !s.attached {
		return
	}
	if req.ExcludeNode != "" && req.ExcludeNode != s.state.Node {
		return // the seat already left that node
	}
	s.setStatus(ctx, crewlet.StatusMoving)
	s.release(ctx, "move: "+req.Reason)
	s.exclude = []string{s.state.Node}
	s.state.Node, s.state.HostQueue = "", ""
}

// drain releases the seat's tenure and holds it drained until resumed.
func (s *seat) drain(ctx workflow.Context) error {
	if s.attached {
		s.setStatus(ctx, crewlet.StatusDraining)
		s.recordStatus(ctx, "drained")
		s.release(ctx, "drain")
	}
	s.hostLost = false
	s.move = nil
	s.state.Node, s.state.HostQueue = "", ""
	s.setStatus(ctx, crewlet.StatusDrained)
	return workflow.Await(ctx, func() bool { return s.state.Drain == nil || s.stop != nil })
}

// recordStatus writes the seat's lifecycle status to Postgres. It only
// reports, so a failure is noted and never stops the seat.
func (s *seat) recordStatus(ctx workflow.Context, status string) {
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivitySetSeatStatus, crewlet.SeatStatusInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch, Status: status,
	}).Get(ctx, nil)
	if err != nil && !isFenced(err) {
		s.noteError(fmt.Sprintf("record status %s: %v", status, err))
	}
}

// tenureEnded reports whether err means the tenure is over: the epoch moved
// on (fenced) or the host did not answer in time (a schedule-to-start or
// heartbeat timeout on its queue). The seat then re-establishes before it
// touches anything again.
func (s *seat) tenureEnded(err error) bool {
	var timeoutErr *temporal.TimeoutError
	switch {
	case isFenced(err):
		s.fenced()
		return true
	case errors.As(err, &timeoutErr):
		s.logger.Warn("seat_host_lost", "seat", s.in.Handle, "epoch", s.state.Epoch, "node", s.state.Node, "error", err)
		s.hostLost = true
		return true
	case s.hostLost:
		return true
	}
	return false
}

// fenced ends a tenure whose epoch moved on: another establish outranks it,
// so the seat stops holding it and establishes again.
func (s *seat) fenced() {
	s.logger.Warn("seat_fenced", "seat", s.in.Handle, "epoch", s.state.Epoch)
	s.stopHold()
	s.attached = false
}

func (s *seat) noteError(msg string) {
	// A turn's note can be long; the state is queried and carried.
	msg = clipText(msg, maxLastErrorBytes)
	s.state.LastError, s.state.FailedTurn = msg, ""
	s.logger.Warn("seat_error", "seat", s.in.Handle, "error", msg)
}

func (s *seat) setStatus(ctx workflow.Context, status crewlet.SeatStatus) {
	s.state.Status = status
	s.upsert(ctx)
}

// upsert writes the search attributes when they changed since the last write.
func (s *seat) upsert(ctx workflow.Context) {
	cur := s.state
	prev := s.upserted
	var updates []temporal.SearchAttributeUpdate
	if cur.Handle != prev.Handle {
		updates = append(updates, saHandle.ValueSet(cur.Handle))
	}
	if cur.Role != prev.Role {
		updates = append(updates, saRole.ValueSet(cur.Role))
	}
	if cur.Status != prev.Status {
		updates = append(updates, saStatus.ValueSet(string(cur.Status)))
	}
	if cur.Node != prev.Node {
		updates = append(updates, saNode.ValueSet(cur.Node))
	}
	if cur.Epoch != prev.Epoch {
		updates = append(updates, saEpoch.ValueSet(cur.Epoch))
	}
	if (cur.Pause != nil) != (prev.Pause != nil) || prev.Handle == "" {
		updates = append(updates, saPaused.ValueSet(cur.Pause != nil))
	}
	if len(updates) == 0 {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		s.logger.Warn("upsert search attributes failed", "seat", s.in.Handle, "error", err)
		return
	}
	s.upserted = cur
}

// continueAsNew hands the seat's state to a fresh run, between turns, after
// every signal received so far is applied.
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
	// Hold ends with the run.
	s.holdID++
	s.cancelHold = nil
	next := s.next()
	//workflowcheck:ignore encoding/json is deterministic; flagged only through reflect
	if b, err := json.Marshal(next); err != nil || len(b) > maxCarryBytes {
		// Only reports: every carried field is bounded, so this means a
		// field was added without a bound.
		s.logger.Warn("seat_carry_large", "seat", s.in.Handle, "bytes", len(b), "bound", maxCarryBytes, "error", err)
	}
	return workflow.NewContinueAsNewError(ctx, Seat, next)
}

// next is the input of the seat's next run: its settings and what it
// carries. What came from outside (signals, turn notes) is clipped to its
// bound, so a value this seat took in before signals were checked cannot
// grow the carry past maxCarryBytes.
func (s *seat) next() SeatInput {
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
		state.Pause = &crewlet.PauseHold{By: clipText(p.By, maxByBytes), Reason: clipText(p.Reason, maxReasonBytes), StopTurn: p.StopTurn, Since: p.Since}
	}
	if d := state.Drain; d != nil {
		state.Drain = &crewlet.DrainHold{By: clipText(d.By, maxByBytes), Reason: clipText(d.Reason, maxReasonBytes), Since: d.Since}
	}
	move := s.move
	if m := move; m != nil {
		move = &crewlet.MoveRequest{ExcludeNode: clipText(m.ExcludeNode, maxNodeBytes), Reason: clipText(m.Reason, maxReasonBytes), By: clipText(m.By, maxByBytes)}
	}
	next.Carry = &SeatCarry{State: state, Attached: s.attached && !s.hostLost, WakePending: s.wakePending, Move: move, Exclude: exclude}
	return next
}

// hostContext runs an activity on the seat's host. The schedule-to-start and
// heartbeat timeouts are what detect a lost host; startToClose 0 means the
// activity lasts the whole tenure (Hold).
func (s *seat) hostContext(ctx workflow.Context, startToClose time.Duration) workflow.Context {
	if startToClose == 0 {
		startToClose = 100 * 365 * 24 * time.Hour
	}
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue:              s.state.HostQueue,
		ScheduleToStartTimeout: s.in.HeartbeatTimeout,
		StartToCloseTimeout:    startToClose,
		HeartbeatTimeout:       s.in.HeartbeatTimeout,
		RetryPolicy:            &temporal.RetryPolicy{MaximumAttempts: 1},
	})
}

// attachTimeout bounds starting a tenure: the seat's MCP servers start
// within it.
const attachTimeout = 30 * time.Second

// placeContext runs the placement, which may attach the seat in place and
// so needs the attach's time as well.
func placeContext(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: attachTimeout + 10*time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: 100 * time.Millisecond,
			MaximumInterval: 10 * time.Second,
		},
	})
}

func localContext(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        100 * time.Millisecond,
			MaximumInterval:        10 * time.Second,
			NonRetryableErrorTypes: []string{crewlet.FencedErrorType},
		},
	})
}

// permanent reports whether a turn's error says its trigger can never
// succeed, and why.
func permanent(err error) (string, bool) {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && appErr.Type() == crewlet.PermanentErrorType {
		return rootMessage(err), true
	}
	return "", false
}

// deadLetter moves the one trigger that can never succeed to the dead
// letters. A move that fails leaves it to the delivery budget.
func (s *seat) deadLetter(ctx workflow.Context, mail []crewlet.MailRef, reason string) {
	ids := make([]string, len(mail))
	for i, m := range mail {
		ids[i] = m.StreamID
	}
	reason = clipText("the turn can never succeed: "+reason, crewlet.MaxReasonBytes)
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityDeadLetterMail, crewlet.DeadLetterMailInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch, StreamIDs: ids, Reason: reason,
	}).Get(ctx, nil)
	if err != nil {
		s.noteError(fmt.Sprintf("dead-letter %s: %v", mail[0].EventID, err))
		return
	}
	s.failures = 0
	s.noteError(reason)
}
