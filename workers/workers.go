// Package workers is the one list of crewlet's workflows and activities and
// the worker node that runs them.
package workers

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/activities"
	"github.com/crewlet/crewlet/workflows"
)

// Deps are the activity groups a worker registers.
type Deps struct {
	Seats *activities.Seats
	Mail  *activities.Mail
	Turns *activities.Turns
}

// Register registers every workflow and activity under its crewlet name.
func Register(r worker.Registry, d Deps) {
	r.RegisterWorkflowWithOptions(workflows.Seat, workflow.RegisterOptions{Name: crewlet.SeatWorkflowType})
	for name, fn := range map[string]any{
		crewlet.ActivityAttach:        d.Seats.Attach,
		crewlet.ActivitySetSeatStatus: d.Seats.SetSeatStatus,
		crewlet.ActivityReadMail:      d.Mail.ReadMail,
		crewlet.ActivityAckMail:       d.Mail.AckMail,
		crewlet.ActivityRunTurn:       d.Turns.RunTurn,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// Incarnation mints this process's node identity, {node_id}:{random}. The
// node id defaults to the host name; two processes with one node id are still
// two incarnations.
func Incarnation(nodeID string) string {
	if nodeID == "" {
		nodeID, _ = os.Hostname()
		if nodeID == "" {
			nodeID = "node"
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s:%s", nodeID, hex.EncodeToString(b[:]))
}
