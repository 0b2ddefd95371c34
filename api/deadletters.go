package api

import (
	"net/http"
	"strconv"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
)

// maxLimit is the most entries a mailbox listing returns.
const maxLimit = 1000

// limitParam reads ?limit=N (1..most), defaulting to def.
func limitParam(r *http.Request, def, most int) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		return 0, crewlet.Errorf(crewlet.EINVALID, "limit must be a number from 1 to %d, got %q", most, v)
	}
	return n, nil
}

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, 100, maxLimit)
	if err != nil {
		writeError(w, err)
		return
	}
	dls, err := s.Mailbox.DeadLetters(r.Context(), int64(limit))
	if err != nil {
		s.logError(w, r, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the dead letters cannot be read; see the server log"))
		return
	}
	writeJSON(w, http.StatusOK, dls)
}

func (s *Server) requeueDeadLetter(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	if !mailbox.ValidStreamID(id) {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "%q is not a dead letter's id; ids look like 1700000000000-0 (GET /deadletters lists them)", crewlet.OneLine(id, 64)))
		return
	}
	dl, err := s.Delivery.Requeue(r.Context(), s.Store, id)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, dl)
}

func (s *Server) seatEvents(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	limit, err := limitParam(r, 100, maxLimit)
	if err != nil {
		writeError(w, err)
		return
	}
	events, err := s.Store.SeatEvents(r.Context(), seat.Handle, limit)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, events)
}
