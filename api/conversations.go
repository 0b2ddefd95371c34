package api

import (
	"net/http"

	"github.com/crewlet/crewlet/internal/store"
)

// Conversation is GET /conversations/{id}: the transcript, and the
// compaction summaries seats made of it (each stands, in that seat's model
// context, for its exchanges up to and including message through_id).
type Conversation struct {
	ID        string                  `json:"id"`
	Messages  []store.TranscriptEntry `json:"messages"`
	Summaries []store.Summary         `json:"summaries"`
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	msgs, err := s.Store.Conversation(r.Context(), id)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	summaries, err := s.Store.ConversationSummaries(r.Context(), id)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if summaries == nil {
		summaries = []store.Summary{}
	}
	writeJSON(w, http.StatusOK, Conversation{ID: id, Messages: msgs, Summaries: summaries})
}
