package workflows

import (
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// slowFirst makes the turn over m1 alone run for the world's slowTurnFor
// (or until it is interrupted), and every other turn quick.
func slowFirst(in crewlet.TurnInput) bool { return names(in.Mail) == "m1" }

// onceDuring runs fn the first time a turn over eventID is in flight: a
// later turn over it (after an interrupt) publishes nothing more.
func onceDuring(eventID string, fn func()) func(string) {
	done := false
	return func(id string) {
		if id == eventID && !done {
			done = true
			fn()
		}
	}
}

// With on_busy: enqueue (PrepareTurn reports nothing) a wake during a turn
// reads nothing until the turn ends, as before the busy policy: the mail
// that arrived is the next turn's.
func TestSeatEnqueuesMailThatArrivesMidTurn(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.slowTurn = slowFirst
	h.world.slowTurnFor = time.Second
	h.world.duringTurn = onceDuring("m1", func() {
		h.world.publish("m2")
		h.env.SignalWorkflow(crewlet.SignalWake, nil)
	})
	h.publish(time.Second, "m1")
	v := h.view(10 * time.Minute)
	h.run(seatIn(), time.Hour)

	eq(t, "turns", v.turns, ids("m1", "m2"))
	eq(t, "acked", v.acked, ids("m1", "m2"))
	h.world.mu.Lock()
	defer h.world.mu.Unlock()
	eq(t, "reads of a running turn's mail", h.world.newOnlyReads, 0)
}

// With on_busy: reject, mail that arrives while a turn runs is read at once
// (new entries only), answered busy and ledgered by BusyMail, and acked
// before the running turn ends; the turn goes on and is answered.
func TestSeatRejectsMailThatArrivesMidTurn(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.onBusy = crewlet.OnBusyReject
	h.world.slowTurn = slowFirst
	h.world.slowTurnFor = time.Second
	h.world.duringTurn = onceDuring("m1", func() {
		h.world.publish("m2")
		h.env.SignalWorkflow(crewlet.SignalWake, nil)
	})
	h.publish(time.Second, "m1")
	v := h.view(10 * time.Minute)
	h.run(seatIn(), time.Hour)

	eq(t, "turns", v.turns, ids("m1"))
	eq(t, "acked (the rejected one first)", v.acked, ids("m2", "m1"))
	eq(t, "busy_rejected counter", v.state.Counters.BusyRejected, int64(1))
	h.world.mu.Lock()
	defer h.world.mu.Unlock()
	eq(t, "rejected", h.world.rejected, ids("m2"))
	// One as the turn starts (which lowers the awake flag), one on the wake.
	eq(t, "reads of a running turn's mail", h.world.newOnlyReads, 2)
}

// With on_busy: interrupt, mail that arrives while a turn runs is sent to
// the turn as interrupt_turn; the turn ends interrupted and nothing is
// acked; the next turn runs over the old trigger and the new mail together
// and acks both.
func TestSeatInterruptsTheTurnForMailThatArrivesMidTurn(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.onBusy = crewlet.OnBusyInterrupt
	h.world.slowTurn = slowFirst
	h.world.slowTurnFor = time.Second
	h.world.duringTurn = onceDuring("m1", func() {
		h.world.publish("m2")
		h.env.SignalWorkflow(crewlet.SignalWake, nil)
	})
	h.publish(time.Second, "m1")
	v := h.view(10 * time.Minute)
	h.run(seatIn(), time.Hour)

	eq(t, "turns that answered", v.turns, ids("m1,m2"))
	eq(t, "acks", v.acks, ids("m1,m2"))
	eq(t, "interrupted counter", v.state.Counters.Interrupted, int64(1))
	eq(t, "turns counter", v.state.Counters.Turns, int64(1))
	h.world.mu.Lock()
	defer h.world.mu.Unlock()
	eq(t, "interrupt signals", h.world.interrupts, ids("m2"))
	eq(t, "deliveries of m1 (its turn's mid-turn reads took no delivery)", h.world.deliveries["m1"], 2)
}

// A batch interrupted crewlet.MaxInterrupts times in a row runs its next
// turn to the end: mail that arrives during it is kept for the turn after.
func TestSeatBoundsRepeatedInterrupts(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.onBusy = crewlet.OnBusyInterrupt
	h.world.slowTurnFor = time.Second
	// Every turn is slow, and the first message of each brings one more.
	next := map[string]string{"m1": "m2", "m2": "m3", "m3": "m4", "m4": "m5"}
	h.world.slowTurn = func(in crewlet.TurnInput) bool { return true }
	h.world.duringTurn = func(id string) {
		h.world.mu.Lock()
		more, ok := next[id]
		delete(next, id)
		h.world.mu.Unlock()
		if ok {
			h.world.publish(more)
			h.env.SignalWorkflow(crewlet.SignalWake, nil)
		}
	}
	h.publish(time.Second, "m1")
	v := h.view(30 * time.Minute)
	h.run(seatIn(), time.Hour)

	eq(t, "turns that answered", v.turns, ids("m1,m2,m3,m4", "m5"))
	eq(t, "interrupted counter", v.state.Counters.Interrupted, int64(crewlet.MaxInterrupts))
	h.world.mu.Lock()
	defer h.world.mu.Unlock()
	eq(t, "interrupt signals", h.world.interrupts, ids("m2", "m3", "m4"))
}
