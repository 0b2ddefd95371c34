package workflows

import (
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// TestSeatReplaysRecordedHistory replays a history recorded from the dev
// server with `crewlet serve` on the example org: place, attach and hold,
// send, reply to a seat, pause, two held messages answered in one batch after
// resume, drain (detach), resume (a new tenure), send. A change to the Seat workflow that would break running seats fails
// here; guard it with workflow.GetVersion and record a new history beside this
// one (`temporal workflow show --workflow-id seat/cto --output json`).
func TestSeatReplaysRecordedHistory(t *testing.T) {
	r := worker.NewWorkflowReplayer()
	r.RegisterWorkflowWithOptions(Seat, workflow.RegisterOptions{Name: crewlet.SeatWorkflowType})
	if err := r.ReplayWorkflowHistoryFromJSONFile(nil, "testdata/seat_history.json"); err != nil {
		t.Fatalf("replay of testdata/seat_history.json: %v", err)
	}
}
