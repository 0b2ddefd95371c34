package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// TestSeatReplaysRecordedHistories replays histories recorded from the dev
// server. A change to the Seat workflow that would break running seats fails
// here; guard it with workflow.GetVersion and record a new history beside
// these (`temporal workflow show --workflow-id seat/cto --output json`).
//
//   - seat_history.json: `crewlet serve` on the example org: place, attach and
//     hold, send, reply to a seat, pause, two held messages answered in one
//     batch after resume, drain (detach), resume (a new tenure), send.
//   - seat_failover_history.json: two workers; the seat's node is killed
//     (its Hold times out, the seat re-establishes on the other node with
//     epoch + 1), mail, then that node is drained and the seat moves to a
//     third (epoch 3), mail.
func TestSeatReplaysRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/seat_*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded histories in testdata (%v)", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(Seat, workflow.RegisterOptions{Name: crewlet.SeatWorkflowType})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, file); err != nil {
				t.Fatalf("replay of %s: %v", file, err)
			}
		})
	}
}
