package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
)

// A conversation is read a page at a time: limit messages after a seq, and
// next says where the following page starts; a bad after is a 400.
func TestConversationPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org, err := config.Parse([]byte("company: { name: pageco }\nauth: { anonymous: true }\nseats: [ { handle: alice, kind: human } ]\n"))
	if err != nil {
		t.Fatal(err)
	}
	var msgs []crewlet.Message
	for i := range 5 {
		msgs = append(msgs, crewlet.Message{EventID: fmt.Sprintf("m%d", i), Type: crewlet.MessageChat, From: "operator", To: "alice",
			Conversation: "long", Body: fmt.Sprintf("message %d", i), SentAt: time.Now()})
	}
	if err := b.st.AppendMessages(b.ctx, "", msgs...); err != nil {
		t.Fatal(err)
	}
	base := b.serve(t, org)
	var got []string
	path := "/conversations/long?limit=2"
	for pages := 0; path != ""; pages++ {
		var conv api.Conversation
		if status, e := get(t, base, path, &conv); status != http.StatusOK {
			t.Fatalf("GET %s: %d %+v", path, status, e)
		}
		if len(conv.Messages) > 2 || pages > 3 {
			t.Fatalf("page %d holds %d messages; want at most 2, in at most 3 pages", pages, len(conv.Messages))
		}
		for _, m := range conv.Messages {
			got = append(got, m.Body)
		}
		path = ""
		if conv.Next != "" {
			path = "/conversations/long?limit=2&after=" + conv.Next
		}
	}
	if fmt.Sprint(got) != "[message 0 message 1 message 2 message 3 message 4]" {
		t.Fatalf("pages read %v; want the five messages in order", got)
	}
	if status, _ := get(t, base, "/conversations/long?after=x", nil); status != http.StatusBadRequest {
		t.Fatalf("after=x: %d; want 400", status)
	}
	if status, _ := get(t, base, "/conversations/long?limit=5000", nil); status != http.StatusBadRequest {
		t.Fatalf("limit=5000: %d; want 400", status)
	}
}
