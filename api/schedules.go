package api

import (
	"net/http"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/schedules"
	"github.com/crewlet/crewlet/internal/wire"
)

// schedules is the org's schedules service over this server's clients.
func (s *Server) schedules() *schedules.Service {
	return &schedules.Service{Org: s.Org, Temporal: s.Temporal, Store: s.Store, Log: s.Log}
}

func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, s.schedules().List(r.Context()))
}

func (s *Server) getSchedule(w http.ResponseWriter, r *http.Request) {
	name, ok := pathID(w, r, "name")
	if !ok {
		return
	}
	limit, err := limitParam(r, 20, wire.MaxScheduleFires)
	if err != nil {
		writeError(w, err)
		return
	}
	d, err := s.schedules().Show(r.Context(), name, limit)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) triggerSchedule(w http.ResponseWriter, r *http.Request) {
	name, ok := pathID(w, r, "name")
	if !ok {
		return
	}
	if err := s.schedules().Trigger(r.Context(), name); err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, wire.ScheduleAction{Name: name, Action: "trigger"})
}

func (s *Server) pauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.setSchedulePaused(w, r, true)
}

func (s *Server) unpauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.setSchedulePaused(w, r, false)
}

// setSchedulePaused pauses or unpauses a schedule with a note saying who
// did it and why; the note shows in GET /schedules.
func (s *Server) setSchedulePaused(w http.ResponseWriter, r *http.Request, pause bool) {
	var req wire.ScheduleNote
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	name, ok := pathID(w, r, "name")
	if !ok {
		return
	}
	if err := crewlet.CheckText("reason", req.Reason, crewlet.MaxReasonBytes); err != nil {
		writeError(w, err)
		return
	}
	by, _ := actingAs(r, "", crewlet.ExternalSender)
	verb, call := "unpaused", s.schedules().Unpause
	if pause {
		verb, call = "paused", s.schedules().Pause
	}
	note := verb + " by " + by
	if req.Reason != "" {
		note += ": " + req.Reason
	}
	if err := call(r.Context(), name, note); err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ScheduleAction{Name: name, Action: verb, Paused: pause})
}

func (s *Server) backfillSchedule(w http.ResponseWriter, r *http.Request) {
	var req wire.ScheduleBackfill
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	name, ok := pathID(w, r, "name")
	if !ok {
		return
	}
	if err := s.schedules().Backfill(r.Context(), name, req.From, req.To); err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, wire.ScheduleAction{Name: name, Action: "backfill"})
}
