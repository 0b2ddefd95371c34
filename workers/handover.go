package workers

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/workflows"
)

// buildHandover moves the seats still pinned to other builds of the
// deployment onto this node's build while it is the current one
// (docs/versioning.md, "Which build each seat runs"). A seat run is Pinned
// and hands itself over at the top of its loop, between turns, once
// Temporal tells it the current build changed, at its next workflow task;
// an idle seat has none until something wakes it. So each run on a build
// whose nodes still run is asked once (crewlet.SignalHandOver), and so is
// each run of the child-turn shape, which moves to the current build at
// its next task and runs the old shape there until it hands over. A seat
// in a turn, a durable wait included, hands over when the turn ends. A run
// on a build no node runs any more gets no task there at all, so it is
// sent to this build for its next task (seatclient.MoveToBuild).
type buildHandover struct {
	tc         client.Client
	seats      *seatclient.Client
	promotion  *promotion
	namespace  string
	log        *slog.Logger
	asked      map[string]bool // run ids sent hand_over
	moved      map[string]bool // run ids sent to this build
	settled    bool            // the last check found every seat on this build
	lastBuild  string          // the current build at the last check
	pollPeriod time.Duration
}

func newBuildHandover(tc client.Client, seats *seatclient.Client, p *promotion, namespace string, period time.Duration, log *slog.Logger) *buildHandover {
	return &buildHandover{
		tc: tc, seats: seats, promotion: p, namespace: namespace, log: log, pollPeriod: period,
		asked: map[string]bool{}, moved: map[string]bool{},
	}
}

// run checks every period until stop closes.
func (h *buildHandover) run(stop <-chan struct{}) {
	every(stop, h.pollPeriod, func(ctx context.Context) bool {
		// A check on a loaded server may outlast the period; the next
		// one waits for it.
		call, done := context.WithTimeout(ctx, recheckEvery)
		defer done()
		h.once(call)
		return false
	})
}

// once asks or moves the seat runs off this build and those of the
// child-turn shape, if this build is current. Once a check finds none it
// does nothing more until the current build changes: a seat run starts on
// the current build, with the inline shape.
func (h *buildHandover) once(ctx context.Context) {
	p := h.promotion
	desc, err := p.deploy.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return
	}
	if err != nil {
		h.log.Warn("build_handover_failed", "deployment", p.name, "build_id", p.buildID, "error", err)
		return
	}
	current := ""
	if cur := desc.Info.RoutingConfig.CurrentVersion; cur != nil {
		current = cur.BuildID
	}
	if current != h.lastBuild {
		h.lastBuild, h.settled = current, false
	}
	if current != p.buildID || h.settled {
		return
	}
	runs, err := seatclient.SeatRunsOffBuild(ctx, h.tc, h.namespace, p.queue, p.name, p.buildID)
	if err == nil {
		var childShape []seatclient.BuildRun
		childShape, err = seatclient.SeatRunsAtVersions(ctx, h.tc, h.namespace, p.queue, workflows.ChildTurnShapeVersions())
		runs = append(runs, childShape...)
	}
	if err != nil {
		h.log.Warn("build_handover_failed", "deployment", p.name, "build_id", p.buildID, "error", err)
		return
	}
	live := map[string]bool{}
	seen := map[string]bool{}
	for _, r := range runs {
		if seen[r.RunID] || h.asked[r.RunID] || h.moved[r.RunID] {
			seen[r.RunID] = true
			continue
		}
		seen[r.RunID] = true
		running, known := live[r.Build]
		if !known {
			if running, err = p.running(ctx, r.Build); err != nil {
				h.log.Warn("build_handover_failed", "deployment", p.name, "build_id", p.buildID, "from", r.Build, "error", err)
				return
			}
			live[r.Build] = running
		}
		if running || r.Build == p.buildID {
			if err := h.seats.HandOver(ctx, r.Handle); err != nil && !seatclient.Gone(err) {
				h.log.Warn("build_handover_failed", "seat", r.Handle, "from", r.Build, "build_id", p.buildID, "error", err)
				continue
			}
			h.asked[r.RunID] = true
			h.log.Info("build_handover_asked", "seat", r.Handle, "run_id", r.RunID, "from", r.Build, "build_id", p.buildID, "turn", r.Turn)
			continue
		}
		if err := h.seats.MoveToBuild(ctx, r.Handle, r.RunID, p.name, p.buildID); err != nil && !seatclient.Gone(err) {
			h.log.Warn("build_handover_failed", "seat", r.Handle, "from", r.Build, "build_id", p.buildID, "error", err)
			continue
		}
		h.moved[r.RunID] = true
		h.log.Info("build_handover_moved", "seat", r.Handle, "run_id", r.RunID, "from", r.Build, "build_id", p.buildID,
			"reason", "no node runs build "+r.Build)
	}
	// Forget the runs that ended, so the maps stay as small as the runs
	// still off this build.
	for id := range h.asked {
		if !seen[id] {
			delete(h.asked, id)
		}
	}
	for id := range h.moved {
		if !seen[id] {
			delete(h.moved, id)
		}
	}
	if len(runs) == 0 {
		h.settled = true
		h.log.Info("build_handover_done", "deployment", p.name, "build_id", p.buildID)
	}
}
