package workflows

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// A reply of a seat run at node-liveness 6 takes four local activities: the
// read that prepares the turn, the turn's begin that takes its profile slot,
// its finish that gives the slot back and acks the mail, and the read that
// finds the mailbox empty. A run at version 5 (begun on an older build and
// replayed on this one) keeps its eight. A turn that begins with no profile
// of its pool free waits, then asks for one in a step of its own.
func TestSeatReplyTakesFourLocalActivities(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		version workflow.Version
		// profileHolds is how many turns begin with no profile free.
		profileHolds int
		want         []string
	}{
		{"node-liveness 6", mergedStepsVersion, 0, ids(crewlet.ActivityReadMail, crewlet.ActivityBeginTurn,
			crewlet.ActivityFinishTurn, crewlet.ActivityReadMail)},
		{"node-liveness 6, no profile free as the turn begins", mergedStepsVersion, 1, ids(crewlet.ActivityReadMail, crewlet.ActivityBeginTurn,
			crewlet.ActivityAcquireProfile, crewlet.ActivityFinishTurn, crewlet.ActivityReadMail)},
		{"node-liveness 5", inlineTurnsVersion, 0, ids(crewlet.ActivityReadMail, crewlet.ActivityPrepareTurn,
			crewlet.ActivityBeginTurn, crewlet.ActivityAcquireProfile, crewlet.ActivityFinishTurn,
			crewlet.ActivityReleaseProfile, crewlet.ActivityAckMail, crewlet.ActivityReadMail)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSeatHarness(t)
			h.env.OnGetVersion(changeNodeLiveness, workflow.DefaultVersion, nodeLivenessVersion).Return(tc.version)
			h.world.profileHolds = tc.profileHolds
			var mu sync.Mutex
			var steps []string
			recording := false
			h.env.SetOnLocalActivityStartedListener(func(info *activity.Info, _ context.Context, _ []any) {
				mu.Lock()
				defer mu.Unlock()
				if recording {
					steps = append(steps, info.ActivityType.Name)
				}
			})
			record := func(on bool) func() {
				return func() {
					mu.Lock()
					defer mu.Unlock()
					recording = on
				}
			}
			h.at(time.Minute, record(true))
			h.at(20*time.Minute, record(false))
			h.publish(2*time.Minute, "m1")
			after := h.view(30 * time.Minute)
			h.run(seatIn(), time.Hour)

			eq(t, "turns run", after.turns, ids("m1"))
			eq(t, "acks", after.acks, ids("m1"))
			mu.Lock()
			defer mu.Unlock()
			eq(t, "local activities of the reply", steps, tc.want)
		})
	}
}
