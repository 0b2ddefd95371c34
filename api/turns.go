package api

import (
	"fmt"
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

func (s *Server) companyUsage(w http.ResponseWriter, r *http.Request) {
	usage, err := s.Views.CompanyUsage(r.Context())
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
	for i := range turns {
		for j := range turns[i].Mail {
			turns[i].Mail[j].Body = clip(turns[i].Mail[j].Body, maxListText)
		}
	}
	if n := fit(len(turns), readBudget, func(i int) int { return jsonSize(turns[i]) }); n < len(turns) {
		w.Header().Set(truncatedHeader, fmt.Sprintf("%d of %d turns, at the %d-byte limit of one answer; ask for limit=%d, or read a turn whole with GET /turns/{handle}/{work_key}", n, len(turns), readBudget, n))
		turns = turns[:n]
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
	from, err := intParam(r, "from", "a message's index (the next of a previous answer)", 0)
	if err != nil {
		writeError(w, err)
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
	writeJSON(w, http.StatusOK, fitTurnView(view, int(min(from, int64(len(view.Messages))))))
}

// fitTurnView is the view's messages from index from on, each content
// clipped at maxReadText, as many as fit in readBudget beside the rest of
// the view; Next says where the rest begins.
func fitTurnView(view wire.TurnView, from int) wire.TurnView {
	msgs := view.Messages[from:]
	view.Messages = nil
	for i := range msgs {
		msgs[i].Message.Content = clip(msgs[i].Message.Content, maxReadText)
	}
	n := fit(len(msgs), readBudget-jsonSize(view), func(i int) int { return jsonSize(msgs[i]) })
	view.Messages = msgs[:n]
	if n < len(msgs) {
		view.Next = from + n
	}
	return view
}
