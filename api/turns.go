package api

import (
	"net/http"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

func (s *Server) seatUsage(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	usage, err := s.Views.Usage(r.Context(), seat.Handle)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, usage)
}

func (s *Server) seatTurns(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	limit, err := limitParam(r, 20, wire.MaxTurns)
	if err != nil {
		writeError(w, err)
		return
	}
	turns, err := s.Views.Turns(r.Context(), seat.Handle, limit)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, turns)
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request) {
	handle, ok := pathID(w, r, "handle")
	if !ok {
		return
	}
	workKey, ok := pathID(w, r, "work_key")
	if !ok {
		return
	}
	id := crewlet.TurnWorkflowID(handle, workKey)
	view, err := s.Views.Turn(r.Context(), id)
	if err == nil {
		view.Approvals, err = s.Store.Approvals(r.Context(), store.ApprovalFilter{Handle: handle, TurnID: id, Limit: wire.MaxApprovals})
	}
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}
