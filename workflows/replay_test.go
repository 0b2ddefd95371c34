package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// TestReplaysRecordedHistories replays histories recorded from the dev
// server. A change to a workflow that would break running executions fails
// here; guard it with workflow.GetVersion and record a new history beside
// these (`temporal workflow show --workflow-id seat/cto --output json`).
//
//   - seat_history.json: `crewlet serve` on the example org: place, attach and
//     hold, four turns (one with diary_write, one with recall), a reply to a
//     human seat, pause, two held messages answered in one batch after resume,
//     drain (detach), resume (a new tenure), send.
//   - seat_failover_history.json: two workers; the seat's node is killed
//     (its Hold times out, the seat re-establishes on the other node with
//     epoch + 1), a turn, then that node is drained and the seat moves to a
//     third (epoch 3), a turn.
//   - turn_history.json: one Turn child of the first: a model round asking
//     for recall, the tool call on the host queue, the final round.
//   - turn_reflect_history.json: a Turn of a role with reflect: true (the
//     example org's executive with it turned on): a round asking for
//     diary_write, the tool call, the final round, then the Reflect activity
//     before the finish.
//   - person_notes_history.json: alice's notes (`crewlet serve` on the example
//     org): two tickets she opened end together and make one note.
//   - turn_pool_history.json: a Turn since profile pools (its profile-pools
//     version marker): AcquireProfile before the first round, a round asking
//     for diary_write on the profile it got, the tool call, the final round,
//     FinishTurn, then ReleaseProfile. The turn histories above predate the
//     marker and replay down the old path.
//   - seat_node_liveness_history.json: seat/cto since node-level liveness
//     (its node-liveness version marker; `crewlet serve` on the example
//     org): place, attach, no Hold, a turn with diary_write, pause, resume.
//     The seat histories above predate the marker and hold their tenure
//     with a Hold.
//   - seat_attach_in_place_history.json: seat/cto at version 2 of that
//     marker (`crewlet serve` on the example org): one workflow task
//     establishes it, the placement attaching in place (no Attach
//     activity) and the start's search attributes not written again; a
//     turn with diary_write, pause, resume, a second turn.
func TestReplaysRecordedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*_history.json")
	if err != nil || len(files) < 8 {
		t.Fatalf("want the recorded histories in testdata, found %v (%v)", files, err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			r.RegisterWorkflowWithOptions(Seat, workflow.RegisterOptions{Name: crewlet.WorkflowSeat})
			r.RegisterWorkflowWithOptions(Turn, workflow.RegisterOptions{Name: crewlet.WorkflowTurn})
			r.RegisterWorkflowWithOptions(PersonNotes, workflow.RegisterOptions{Name: crewlet.WorkflowPersonNotes})
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, file); err != nil {
				t.Fatalf("replay of %s: %v", file, err)
			}
		})
	}
}
