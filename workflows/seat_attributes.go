// The seat's search attributes: what it starts with and what it upserts
// when its state changes, so Temporal visibility can filter seats.

package workflows

import (
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

var (
	saHandle = temporal.NewSearchAttributeKeyKeyword(crewlet.SAHandle)
	saRole   = temporal.NewSearchAttributeKeyKeyword(crewlet.SARole)
	saStatus = temporal.NewSearchAttributeKeyKeyword(crewlet.SAStatus)
	saNode   = temporal.NewSearchAttributeKeyKeyword(crewlet.SANode)
	saEpoch  = temporal.NewSearchAttributeKeyInt64(crewlet.SAEpoch)
	saPaused = temporal.NewSearchAttributeKeyBool(crewlet.SAPaused)
)

// SeatSearchAttributes are the attributes a seat starts with, before its
// workflow first upserts them.
func SeatSearchAttributes(handle, role string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		saHandle.ValueSet(handle),
		saRole.ValueSet(role),
		saStatus.ValueSet(string(crewlet.StatusEstablishing)),
		saPaused.ValueSet(false),
	)
}

func (s *seat) setStatus(ctx workflow.Context, status crewlet.SeatStatus) {
	s.state.Status = status
	s.upsert(ctx)
}

// indexedStatus is the status the seat's search attributes carry for
// status. Since node-liveness 4 a running seat's attribute stays idle:
// its open Turn workflow is what says it runs, so a turn costs no
// visibility write of the seat's on either side.
func (s *seat) indexedStatus(status crewlet.SeatStatus) crewlet.SeatStatus {
	if s.turnShowsRunning && status == crewlet.StatusRunning {
		return crewlet.StatusIdle
	}
	return status
}

// upsert writes the search attributes when they changed since the last write.
func (s *seat) upsert(ctx workflow.Context) {
	cur := s.state
	prev := s.upserted
	var updates []temporal.SearchAttributeUpdate
	if cur.Handle != prev.Handle {
		updates = append(updates, saHandle.ValueSet(cur.Handle))
	}
	if cur.Role != prev.Role {
		updates = append(updates, saRole.ValueSet(cur.Role))
	}
	if s.indexedStatus(cur.Status) != s.indexedStatus(prev.Status) {
		updates = append(updates, saStatus.ValueSet(string(s.indexedStatus(cur.Status))))
	}
	if cur.Node != prev.Node {
		updates = append(updates, saNode.ValueSet(cur.Node))
	}
	if cur.Epoch != prev.Epoch {
		updates = append(updates, saEpoch.ValueSet(cur.Epoch))
	}
	if (cur.Pause != nil) != (prev.Pause != nil) || prev.Handle == "" {
		updates = append(updates, saPaused.ValueSet(cur.Pause != nil))
	}
	if len(updates) == 0 {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		s.logger.Warn("upsert search attributes failed", "seat", s.in.Handle, "error", err)
		return
	}
	s.upserted = cur
}
