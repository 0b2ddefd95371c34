// The seat's tenure: placing it on a node, attaching, holding, releasing
// and abandoning it, and the activity contexts that reach its host.

package workflows

import (
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// establish starts a tenure: place the seat on a node, Attach there (which
// bumps the epoch in Postgres), then hold the tenure with a heartbeating
// activity on that node's host queue. An attempt that fails backs off
// (establishFailed).
func (s *seat) establish(ctx workflow.Context) {
	if s.unattachedSince.IsZero() {
		s.unattachedSince = workflow.Now(ctx)
	}
	if s.state.Status != crewlet.StatusUnplaceable {
		// An unplaceable seat stays so through its attempts: one
		// visibility write when it begins to wait and one when it is
		// placed, none per attempt.
		s.setStatus(ctx, crewlet.StatusEstablishing)
	}
	s.attemptWakes = s.wakes
	var place crewlet.PlaceSeatOutput
	err := workflow.ExecuteLocalActivity(placeContext(ctx), crewlet.ActivityPlaceSeat, crewlet.PlaceSeatInput{
		Handle: s.in.Handle, Exclude: s.exclude,
	}).Get(ctx, &place)
	if err != nil {
		s.noteError(fmt.Sprintf("place seat: %v", err))
		if s.backsOff(ctx) {
			s.establishFailed(ctx, "")
			return
		}
		// COMPAT(unplaceable-backoff@1): a run below version 1 retries a
		// placement refused with nodes excluded at once, and waits at most
		// placeBackoff otherwise. A run takes this branch only when its
		// history holds a failed attempt from before the version, so
		// `crewlet versions` cannot tell such runs from those that never
		// failed (both have no marker). This branch, the one below,
		// placeBackoff and placeFailures may go once every worker runs
		// version 1 and no running Seat run began before that deploy
		// (temporal workflow count -q "WorkflowType='Seat' AND
		// ExecutionStatus='Running' AND StartTime < 'DEPLOY TIME'"): a
		// seat continues as new every 200 loop cycles, so allow days for
		// an idle one.
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
		if s.backsOff(ctx) {
			s.establishFailed(ctx, place.Node)
			return
		}
		// COMPAT(unplaceable-backoff@1): a run below version 1 places again
		// at once, without that node.
		s.exclude = append(s.exclude, place.Node)
		return
	}
	s.exclude = nil
	s.attached = true
	s.hostLost = false
	s.state.Unplaceable = nil
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
	if s.perSeatHold { // COMPAT(node-liveness@1)
		s.startHold(ctx)
	}
	s.setStatus(ctx, crewlet.StatusIdle)
}

// backsOff reports whether this run backs off after a failed establish
// attempt (unplaceable-backoff 1). It is asked only once an attempt
// failed, so a seat that is placed at once records no marker.
func (s *seat) backsOff(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, changeUnplaceable, workflow.DefaultVersion, unplaceableVersion) >= unplaceableVersion
}

// establishFailed follows an establish attempt that failed: the placement
// was refused (refusedBy empty), or the node it chose, refusedBy, refused
// the tenure or did not answer. The first failure of a run of them is
// retried at once when the next attempt can go elsewhere: without the node
// that refused, or with the nodes a move or a lost host excluded (they
// were excluded for one placement only). Every other failure waits
// placeRetry, doubling up to placeRetryMax, so each wait costs one
// placement and one timer however long no node takes the seat. A node
// that refused stays excluded until a placement finds no other; a wake
// (a node joining sends one to unplaceable seats) or a reason to leave
// ends the wait early and makes every node eligible again.
func (s *seat) establishFailed(ctx workflow.Context, refusedBy string) {
	h := s.state.Unplaceable
	first := h == nil
	if first {
		h = &crewlet.UnplaceableHold{Since: workflow.Now(ctx)}
		s.state.Unplaceable = h
	}
	h.Attempts++
	elsewhere := refusedBy != "" || len(s.exclude) > 0
	if refusedBy != "" {
		s.exclude = appendBounded(s.exclude, refusedBy, maxCarriedExclude)
	} else {
		s.exclude = nil
	}
	if first && elsewhere {
		return
	}
	wait := placeRetry(h.Waits)
	h.Waits++
	h.Retry = workflow.Now(ctx).Add(wait)
	s.setStatus(ctx, crewlet.StatusUnplaceable)
	s.logger.Warn("seat_unplaceable", "seat", s.in.Handle, "attempts", h.Attempts, "since", h.Since, "retry_in", wait, "error", s.state.LastError)
	timerCtx, cancel := workflow.WithCancel(ctx)
	timer := workflow.NewTimer(timerCtx, wait)
	_ = workflow.Await(ctx, func() bool { return timer.IsReady() || s.wakes != s.attemptWakes || s.interrupted() })
	if !timer.IsReady() {
		// Woken early: a timer left running would cost a workflow task
		// when it fires.
		cancel()
		s.exclude = nil
	}
	s.attemptWakes = s.wakes
}

// placeRetry is the wait after an unplaceable seat's n-th back-off
// (counted from 0): placeRetryFirst doubled n times, at most
// placeRetryMax.
func placeRetry(n int) time.Duration {
	d := placeRetryFirst
	for i := 0; i < n && d < placeRetryMax; i++ {
		d *= 2
	}
	return min(d, placeRetryMax)
}

// appendBounded appends x to list, keeping at most the last most entries.
func appendBounded(list []string, x string, most int) []string {
	list = append(list, x)
	if len(list) > most {
		list = list[len(list)-most:]
	}
	return list
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
//
// COMPAT(node-liveness@1): startHold, stopHold and the seat's cancelHold
// and holdID serve runs below version 1 only.
func (s *seat) startHold(ctx workflow.Context) {
	holdCtx, cancel := workflow.WithCancel(ctx)
	s.holdID++
	id := s.holdID
	s.cancelHold = cancel
	future := workflow.ExecuteActivity(s.hostContext(holdCtx, 0), crewlet.ActivityHold, crewlet.HoldInput{
		Tenure: s.tenure(),
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
		Tenure: s.tenure(), Reason: reason,
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

// movesAway reports whether the pending move asks the seat to leave the node
// it is on; a move naming another node is ignored, so it must not cut a turn
// short either.
func (s *seat) movesAway() bool {
	return s.move != nil && (s.move.ExcludeNode == "" || s.move.ExcludeNode == s.state.Node)
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
	// A drained seat waits for a resume, not for a node: a seat drained
	// while unplaceable shows no back-off, and its next attempt starts a
	// fresh one.
	s.state.Unplaceable = nil
	s.state.Node, s.state.HostQueue = "", ""
	s.setStatus(ctx, crewlet.StatusDrained)
	return workflow.Await(ctx, func() bool { return s.state.Drain == nil || s.stop != nil })
}

// tenureEnded reports whether err means the tenure is over: the epoch moved
// on (fenced) or the host did not answer in time (a schedule-to-start or
// heartbeat timeout on its queue). The seat then re-establishes before it
// touches anything again. Any other timeout (a local activity whose retries
// ran out while Postgres was down for every node) says nothing about the
// host: the seat retries on the same tenure, and the node's liveness tells
// it if the host is lost (docs/architecture.md, "Tenure: which node runs a seat").
func (s *seat) tenureEnded(ctx workflow.Context, err error) bool {
	var timeoutErr *temporal.TimeoutError
	switch {
	case isFenced(err):
		s.fenced()
		return true
	case errors.As(err, &timeoutErr) && (hostTimeout(timeoutErr) ||
		workflow.GetVersion(ctx, changeOutageNotLoss, workflow.DefaultVersion, outageNotLossVersion) == workflow.DefaultVersion):
		// COMPAT(outage-not-host-loss@1): the GetVersion call keeps runs that
		// ended a tenure on any timeout doing so.
		s.logger.Warn("seat_host_lost", "seat", s.in.Handle, "epoch", s.state.Epoch, "node", s.state.Node, "error", err)
		s.hostLost = true
		return true
	case s.hostLost:
		return true
	}
	return false
}

// hostTimeout reports whether a timeout is the host's: its queue left the
// task unstarted, or the activity on it stopped heartbeating.
func hostTimeout(err *temporal.TimeoutError) bool {
	t := err.TimeoutType()
	return t == enumspb.TIMEOUT_TYPE_SCHEDULE_TO_START || t == enumspb.TIMEOUT_TYPE_HEARTBEAT
}

// fenced ends a tenure whose epoch moved on: another establish outranks it,
// so the seat stops holding it and establishes again.
func (s *seat) fenced() {
	s.logger.Warn("seat_fenced", "seat", s.in.Handle, "epoch", s.state.Epoch)
	s.stopHold()
	s.attached = false
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

// tenure is the seat's tenure as its activities carry it, to be fenced.
func (s *seat) tenure() crewlet.Tenure {
	return crewlet.Tenure{Handle: s.in.Handle, Epoch: s.state.Epoch}
}
