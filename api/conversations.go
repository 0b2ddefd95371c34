package api

import (
	"net/http"
	"strconv"

	"github.com/crewlet/crewlet"

	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// A conversation is read a page at a time: conversationPage messages
// unless ?limit says otherwise, at most maxConversationPage.
const (
	conversationPage    = 200
	maxConversationPage = 1000
)

// Conversation is GET /conversations/{id}: the transcript, and the
// compaction summaries seats made of it (each stands, in that seat's model
// context, for its exchanges up to and including message through_id).
type Conversation struct {
	ID       string                  `json:"id"`
	Messages []store.TranscriptEntry `json:"messages"`
	// Next, when set, is the after= of the next page of messages.
	Next      string         `json:"next,omitempty"`
	Summaries []wire.Summary `json:"summaries"`
}

func (s *Server) getConversation(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	if err := s.conversationRefusal(r.Context(), principalOf(r), id); err != nil {
		s.logError(w, r, err)
		return
	}
	limit, err := limitParam(r, conversationPage, maxConversationPage)
	if err != nil {
		writeError(w, err)
		return
	}
	var after int64
	if v := r.URL.Query().Get("after"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 0 {
			writeError(w, crewlet.Errorf(crewlet.EINVALID, "after must be a message's seq (the next of a previous page), got %q", v))
			return
		}
	}
	msgs, err := s.Store.Conversation(r.Context(), id, after, limit+1)
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
		summaries = []wire.Summary{}
	}
	for i := range msgs {
		msgs[i].Body = crewlet.Clip(msgs[i].Body, maxReadText)
	}
	// A page ends at limit messages or at the byte budget, whichever
	// comes first; next reads on either way.
	n := min(limit, fit(len(msgs), readBudget-jsonSize(Conversation{ID: id, Summaries: summaries}), func(i int) int { return jsonSize(msgs[i]) }))
	next := ""
	if n < len(msgs) {
		msgs = msgs[:n]
		next = strconv.FormatInt(msgs[n-1].Seq, 10)
	}
	writeJSON(w, http.StatusOK, Conversation{ID: id, Messages: msgs, Next: next, Summaries: summaries})
}
