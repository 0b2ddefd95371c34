package api

import (
	"net/http"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// MemoryView is GET /seats/{handle}/memory: the first page of each list, or
// with ?kind= the one page asked for and no other list.
type MemoryView struct {
	Seat           string                              `json:"seat"`
	Diary          *store.Page[store.DiaryItem]        `json:"diary,omitempty"`
	Episodes       *store.Page[store.EpisodeItem]      `json:"episodes,omitempty"`
	Counterparties *store.Page[store.CounterpartyItem] `json:"counterparties,omitempty"`
}

// Memory kinds, as ?kind= names them.
const (
	MemoryDiary          = "diary"
	MemoryEpisodes       = "episodes"
	MemoryCounterparties = "counterparties"
)

func (s *Server) seatMemory(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	kind, before := q.Get("kind"), q.Get("before")
	switch kind {
	case "", MemoryDiary, MemoryEpisodes, MemoryCounterparties:
	default:
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "kind must be diary, episodes or counterparties, got %q", kind))
		return
	}
	if before != "" && kind == "" {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "before pages one list: name it with kind=diary, episodes or counterparties"))
		return
	}
	limit, err := limitParam(r, 20, wire.MaxMemoryPage)
	if err != nil {
		writeError(w, err)
		return
	}
	view := MemoryView{Seat: seat.Handle}
	if kind == "" || kind == MemoryDiary {
		p, err := s.Store.Diary(r.Context(), seat.Handle, before, limit)
		if err != nil {
			s.logError(w, r, err)
			return
		}
		view.Diary = &p
	}
	if kind == "" || kind == MemoryEpisodes {
		p, err := s.Store.Episodes(r.Context(), seat.Handle, before, limit)
		if err != nil {
			s.logError(w, r, err)
			return
		}
		view.Episodes = &p
	}
	if kind == "" || kind == MemoryCounterparties {
		p, err := s.Store.Counterparties(r.Context(), seat.Handle, before, limit)
		if err != nil {
			s.logError(w, r, err)
			return
		}
		view.Counterparties = &p
	}
	writeJSON(w, http.StatusOK, view)
}
