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

// beforeQuery is the ?before= cursor of a listing that pages back by
// stream id.
func beforeQuery(desc string) param { return param{"before", "string", desc} }

// beforeParam reads ?before=ID, a stream id; empty when absent.
func beforeParam(r *http.Request) (string, error) {
	v := r.URL.Query().Get("before")
	if v != "" && !mailbox.ValidStreamID(v) {
		return "", crewlet.Errorf(crewlet.EINVALID, "before must be a stream id such as 1700000000000-0 (the first stream_id or id of the page you have), got %q", crewlet.OneLine(v, 64))
	}
	return v, nil
}

// NextBeforeHeader names the cursor of the next (older) page of a listing
// cut short, to pass as ?before=.
const NextBeforeHeader = "X-Next-Before"

func (s *Server) listDeadLetters(w http.ResponseWriter, r *http.Request) {
	limit, err := limitParam(r, 100, maxLimit)
	if err != nil {
		writeError(w, err)
		return
	}
	before, err := beforeParam(r)
	if err != nil {
		writeError(w, err)
		return
	}
	dls, err := s.Delivery.DeadLetters(r.Context(), before, limit)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	// A dead letter holds up to 64 KiB of body: a page is held to
	// readBudget like the other large reads, and the cursor reads on.
	page := dls[:fit(len(dls), readBudget, func(i int) int { return jsonSize(dls[i]) })]
	if len(page) > 0 && (len(page) < len(dls) || len(page) == limit) {
		w.Header().Set(NextBeforeHeader, page[len(page)-1].ID)
	}
	writeJSON(w, http.StatusOK, page)
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
