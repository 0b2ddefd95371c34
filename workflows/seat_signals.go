package workflows

import (
	"go.temporal.io/sdk/converter"
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
	handlers []signalHandler
	handover workflow.Channel
	// stopped is set by the receiving coroutine once it has applied every
	// signal delivered so far and will receive no more.
	stopped bool
}

// signalHandler receives one kind of signal and applies it to the seat.
type signalHandler struct {
	ch workflow.ReceiveChannel
	// take receives one signal, waiting for it when wait is set, and applies
	// it; it reports false when none was pending.
	take func(ctx workflow.Context, wait bool) bool
}

// onSignal binds the signal name to apply. Its payload is received raw and
// decoded by decode; one that fails is dropped and logged (the signal name,
// the payload's size and why, never its content), and the seat goes on.
func onSignal[T any](ctx workflow.Context, s *seat, name string, decode func(converter.RawValue) (T, error), apply func(workflow.Context, T)) signalHandler {
	ch := workflow.GetSignalChannel(ctx, name)
	return signalHandler{ch: ch, take: func(ctx workflow.Context, wait bool) bool {
		var raw converter.RawValue
		if wait {
			ch.Receive(ctx, &raw)
		} else if !ch.ReceiveAsync(&raw) {
			return false
		}
		v, err := decode(raw)
		if err != nil {
			s.logger.Warn("signal_rejected", "seat", s.in.Handle, "signal", name, "bytes", payloadBytes(raw), "error", err)
			return true
		}
		apply(ctx, v)
		return true
	}}
}

// checked decodes a payload strictly into a T and validates it with check.
func checked[T any](check func(T) error) func(converter.RawValue) (T, error) {
	return func(raw converter.RawValue) (T, error) { return decodeSignal(raw, check) }
}

// anyPayload accepts every payload: a wake is a hint and carries nothing.
func anyPayload(converter.RawValue) (struct{}, error) { return struct{}{}, nil }

func newSeatSignals(ctx workflow.Context, s *seat) *seatSignals {
	return &seatSignals{
		handlers: []signalHandler{
			onSignal(ctx, s, crewlet.SignalWake, anyPayload, func(workflow.Context, struct{}) { s.wakePending = true; s.wakes++ }),
			onSignal(ctx, s, crewlet.SignalHandOver, anyPayload, func(workflow.Context, struct{}) {
				s.handOverAsked, s.wakePending = true, true
				s.wakes++
			}),
			onSignal(ctx, s, crewlet.SignalPause, checked(crewlet.PauseRequest.Validate), s.applyPause),
			onSignal(ctx, s, crewlet.SignalResume, checked(crewlet.ResumeRequest.Validate), s.applyResume),
			onSignal(ctx, s, crewlet.SignalDrain, checked(crewlet.DrainRequest.Validate), s.applyDrain),
			onSignal(ctx, s, crewlet.SignalMove, checked(crewlet.MoveRequest.Validate), s.applyMove),
			onSignal(ctx, s, crewlet.SignalStop, checked(crewlet.StopRequest.Validate), s.applyStop),
			onSignal(ctx, s, crewlet.SignalHostLost, checked(crewlet.HostLostRequest.Validate), s.applyHostLost),
		},
		handover: workflow.NewBufferedChannel(ctx, 1),
	}
}

// run receives signals until a hand-over is requested.
func (sg *seatSignals) run(ctx workflow.Context) {
	for !sg.stopped {
		sg.receive(ctx)
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
func (sg *seatSignals) receive(ctx workflow.Context) {
	sel := workflow.NewSelector(ctx)
	for _, h := range sg.handlers {
		sel.AddReceive(h.ch, func(workflow.ReceiveChannel, bool) { h.take(ctx, true) })
	}
	sel.AddReceive(sg.handover, func(c workflow.ReceiveChannel, _ bool) {
		c.Receive(ctx, nil)
		sg.drainPending(ctx)
		sg.stopped = true
	})
	sel.Select(ctx)
}

// drainPending applies every signal already delivered but not yet received.
func (sg *seatSignals) drainPending(ctx workflow.Context) {
	for _, h := range sg.handlers {
		for h.take(ctx, false) {
		}
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
func (s *seat) applyMove(_ workflow.Context, req crewlet.MoveRequest) {
	if s.movesAway() {
		return // a move for this node is already pending; a stale one is replaced
	}
	s.move = &req
	s.logger.Info("seat_move_requested", "seat", s.in.Handle, "exclude_node", req.ExcludeNode, "reason", req.Reason, "by", req.By)
}

// applyHostLost ends the tenure on a node that is gone: the seat
// re-establishes elsewhere, as when its host queue stops answering. A
// signal about another node (one the seat already left) is ignored.
func (s *seat) applyHostLost(_ workflow.Context, req crewlet.HostLostRequest) {
	if !s.attached || s.hostLost || req.Node != s.state.Node {
		return
	}
	s.hostLost = true
	s.logger.Warn("seat_host_lost", "seat", s.in.Handle, "epoch", s.state.Epoch, "node", s.state.Node, "by", req.By)
}

// applyStop ends the seat at its next step: it left the org.
func (s *seat) applyStop(_ workflow.Context, req crewlet.StopRequest) {
	if s.stop == nil {
		s.stop = &req
	}
}
