package api

import (
	"net/http"
	"strconv"

	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/control"
)

func (s *Server) seatUsage(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	usage, err := s.Control.Usage(r.Context(), s.Store, seat.Handle)
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
	limit := 20
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > control.MaxTurns {
			writeError(w, crewlet.Errorf(crewlet.EINVALID, "limit must be a number from 1 to %d, got %q", control.MaxTurns, v))
			return
		}
		limit = n
	}
	turns, err := s.Control.Turns(r.Context(), s.Store, seat.Handle, limit)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, turns)
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request) {
	id := crewlet.TurnWorkflowID(chi.URLParam(r, "handle"), chi.URLParam(r, "work_key"))
	view, err := s.Control.Turn(r.Context(), s.Store, id)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, view)
}
