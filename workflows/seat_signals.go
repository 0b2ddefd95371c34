package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// seatSignals are the seat's signal channels. One coroutine receives them for
// the life of a run; before continue-as-new the main loop asks that coroutine,
// through handover, to apply what is left and stop.
//
// The hand-over must go through the receiving coroutine: a signal that arrives
// while its Select is blocked is taken off the channel at once and held by the
// Select until the coroutine next runs, so ReceiveAsync from the main loop
// cannot see it. If the same workflow task also wakes the main loop (a timer,
// an activity result), the main loop runs first and would continue as new
// without that signal: a pause or drain would be lost.
type seatSignals struct {
	wake, pause, resume, drain, move, stopSeat workflow.ReceiveChannel
	handover                                   workflow.Channel
	// stopped is set by the receiving coroutine once it has applied every
	// signal delivered so far and will receive no more.
	stopped bool
}

func newSeatSignals(ctx workflow.Context) *seatSignals {
	return &seatSignals{
		wake:     workflow.GetSignalChannel(ctx, crewlet.SignalWake),
		pause:    workflow.GetSignalChannel(ctx, crewlet.SignalPause),
		resume:   workflow.GetSignalChannel(ctx, crewlet.SignalResume),
		drain:    workflow.GetSignalChannel(ctx, crewlet.SignalDrain),
		move:     workflow.GetSignalChannel(ctx, crewlet.SignalMove),
		stopSeat: workflow.GetSignalChannel(ctx, crewlet.SignalStop),
		handover: workflow.NewBufferedChannel(ctx, 1),
	}
}

// run receives signals until a hand-over is requested.
func (sg *seatSignals) run(ctx workflow.Context, s *seat) {
	for !sg.stopped {
		sg.receive(ctx, s)
	}
}

// stop asks the receiving coroutine to apply every signal delivered so far and
// stop, and waits until it has.
func (sg *seatSignals) stop(ctx workflow.Context) error {
	sg.handover.SendAsync(struct{}{})
	return workflow.Await(ctx, func() bool { return sg.stopped })
}

// receive blocks until one signal (or the hand-over request) arrives and
// applies it.
func (sg *seatSignals) receive(ctx workflow.Context, s *seat) {
	sel := workflow.NewSelector(ctx)
	sel.AddReceive(sg.wake, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		s.wakePending = true
	})
	sel.AddReceive(sg.pause, func(c workflow.ReceiveChannel, _ bool) {
		var req crewlet.PauseRequest
		c.Receive(ctx, &req)
		s.applyPause(ctx, req)
	})
	sel.AddReceive(sg.resume, func(c workflow.ReceiveChannel, _ bool) {
		var req crewlet.ResumeRequest
		c.Receive(ctx, &req)
		s.applyResume(ctx, req)
	})
	sel.AddReceive(sg.drain, func(c workflow.ReceiveChannel, _ bool) {
		var req crewlet.DrainRequest
		c.Receive(ctx, &req)
		s.applyDrain(ctx, req)
	})
	sel.AddReceive(sg.move, func(c workflow.ReceiveChannel, _ bool) {
		var req crewlet.MoveRequest
		c.Receive(ctx, &req)
		s.applyMove(req)
	})
	sel.AddReceive(sg.stopSeat, func(c workflow.ReceiveChannel, _ bool) {
		var req crewlet.StopRequest
		c.Receive(ctx, &req)
		s.applyStop(req)
	})
	sel.AddReceive(sg.handover, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		sg.drainPending(ctx, s)
		sg.stopped = true
	})
	sel.Select(ctx)
}

// drainPending applies every signal already delivered but not yet received.
func (sg *seatSignals) drainPending(ctx workflow.Context, s *seat) {
	for sg.wake.ReceiveAsync(nil) {
		s.wakePending = true
	}
	for {
		var req crewlet.PauseRequest
		if !sg.pause.ReceiveAsync(&req) {
			break
		}
		s.applyPause(ctx, req)
	}
	for {
		var req crewlet.ResumeRequest
		if !sg.resume.ReceiveAsync(&req) {
			break
		}
		s.applyResume(ctx, req)
	}
	for {
		var req crewlet.DrainRequest
		if !sg.drain.ReceiveAsync(&req) {
			break
		}
		s.applyDrain(ctx, req)
	}
	for {
		var req crewlet.MoveRequest
		if !sg.move.ReceiveAsync(&req) {
			break
		}
		s.applyMove(req)
	}
	for {
		var req crewlet.StopRequest
		if !sg.stopSeat.ReceiveAsync(&req) {
			break
		}
		s.applyStop(req)
	}
}

// applyPause holds the seat: it finishes the turn in flight, then reads
// nothing until resumed. Pausing a paused seat changes nothing.
func (s *seat) applyPause(ctx workflow.Context, req crewlet.PauseRequest) {
	if s.state.Pause != nil {
		return
	}
	s.state.Pause = &crewlet.PauseHold{By: req.By, Reason: req.Reason, StopTurn: req.StopTurn, Since: workflow.Now(ctx)}
	s.logger.Info("seat_paused", "seat", s.in.Handle, "by", req.By, "reason", req.Reason)
	s.upsert(ctx)
}

// applyResume lifts a pause and a drain.
func (s *seat) applyResume(ctx workflow.Context, req crewlet.ResumeRequest) {
	if s.state.Pause == nil && s.state.Drain == nil {
		return
	}
	s.state.Pause = nil
	s.state.Drain = nil
	s.logger.Info("seat_resumed", "seat", s.in.Handle, "by", req.By)
	s.upsert(ctx)
}

// applyDrain asks the seat to finish its turn, start no new one and release
// its host until resumed.
func (s *seat) applyDrain(ctx workflow.Context, req crewlet.DrainRequest) {
	if s.state.Drain != nil {
		return
	}
	s.state.Drain = &crewlet.DrainHold{By: req.By, Reason: req.Reason, Since: workflow.Now(ctx)}
	s.logger.Info("seat_draining", "seat", s.in.Handle, "by", req.By, "reason", req.Reason)
}

// applyMove asks the seat to leave its node voluntarily: the turn in flight
// finishes (bounded by ReleaseWait), then the seat detaches and establishes
// elsewhere. A move for a node the seat is not on is ignored when it runs.
func (s *seat) applyMove(req crewlet.MoveRequest) {
	if s.movesAway() {
		return // a move for this node is already pending; a stale one is replaced
	}
	s.move = &req
	s.logger.Info("seat_move_requested", "seat", s.in.Handle, "exclude_node", req.ExcludeNode, "reason", req.Reason, "by", req.By)
}

// applyStop ends the seat at its next step: it left the org.
func (s *seat) applyStop(req crewlet.StopRequest) {
	if s.stop == nil {
		s.stop = &req
	}
}
