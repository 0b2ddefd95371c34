package api

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet/internal/store"
)

// Conversation is GET /conversations/{id}.
type Conversation struct {
	ID       string                  `json:"id"`
	Messages []store.TranscriptEntry `json:"messages"`
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request) {
	id := chi.URLParam(r, "id")
	msgs, err := s.Store.Conversation(r.Context(), id)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, Conversation{ID: id, Messages: msgs})
}
