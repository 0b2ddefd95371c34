package workflows

import (
	"errors"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/crewlet/crewlet"
)

// A turn run inline waits on its ticket in the seat's own workflow: the
// seat's state shows the wait, its CrewletTurn and CrewletWaiting attributes
// say so, a nudge for another turn is refused (its sender learns that turn
// is gone), and the nudge for this turn ends the wait at once, not at its
// hour's timeout.
func TestSeatInlineTurnWaitsOnATicketUntilItsNudge(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	h.world.waitOn = "tk-1"
	h.publish(time.Second, "m1")
	waiting := h.view(10 * time.Minute)
	var refused, accepted error
	nudge := func(n crewlet.TurnNudge, into *error) func() {
		return func() {
			h.env.UpdateWorkflow(crewlet.UpdateNudgeTurn, "", &testsuite.TestUpdateCallback{
				OnAccept: func() {},
				OnReject: func(err error) { *into = err },
				OnComplete: func(_ interface{}, err error) {
					if err != nil {
						*into = err
					}
				},
			}, n)
		}
	}
	turnID := crewlet.TurnWorkflowID(testHandle, crewlet.WorkKey([]string{"m1"}))
	h.at(11*time.Minute, nudge(crewlet.TurnNudge{Turn: crewlet.TurnWorkflowID(testHandle, "other"), Ticket: "tk-1"}, &refused))
	h.at(20*time.Minute, nudge(crewlet.TurnNudge{Turn: turnID, Ticket: "tk-1"}, &accepted))
	done := h.view(30 * time.Minute)
	h.run(seatIn(), time.Hour)

	if waiting.state.Turn == nil || waiting.state.Turn.Progress == nil || waiting.state.Turn.Progress.Waiting == nil {
		t.Fatalf("state while waiting: turn %+v; want its progress with the ticket wait", waiting.state.Turn)
	}
	eq(t, "waiting on", waiting.state.Turn.Progress.Waiting.Ticket, "tk-1")
	eq(t, "turn", waiting.state.Turn.ID, turnID)
	var appErr *temporal.ApplicationError
	if !errors.As(refused, &appErr) || appErr.Type() != crewlet.ErrorTypeTurnGone {
		t.Errorf("nudge for another turn: got %v; want refused as %s", refused, crewlet.ErrorTypeTurnGone)
	}
	eq(t, "nudge for the turn", accepted, error(nil))
	h.world.mu.Lock()
	eq(t, "waits ended", h.world.waitsEnded, ids("tk-1 timed_out=false at 20m0s"))
	h.world.mu.Unlock()
	eq(t, "turns", done.turns, ids("m1"))
	eq(t, "turn in flight after", done.state.Turn, (*crewlet.CurrentTurn)(nil))
	h.saMu.Lock()
	defer h.saMu.Unlock()
	eq(t, "turn attribute writes", h.saTurnWrites, ids("CrewletTurn="+turnID, "CrewletWaiting=ticket tk-1", "(unset)", "(unset)"))
}
