package api_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// readBudget is the byte limit of one large read's answer (api/reads.go).
const readBudget = 4 << 20

// getBig is GET base+path decoded into out, with the answer's size and its
// truncation header.
func getBig(t *testing.T, base, path string, out any) (size int, truncated string) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %.300s %v", path, resp.StatusCode, body, err)
	}
	if err := json.Unmarshal(body, out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return len(body), resp.Header.Get("X-Crewlet-Truncated")
}

// A turn whose tool results run to megabytes answers under the budget: a
// huge result clipped with a marker, the messages cut short with next, and
// every message read by paging on.
func TestLargeTurnViewIsClippedAndPaged(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.serve(t, testOrg(config.Budget{}, config.Budget{}))
	testenv.SeatAtEpoch(t, b.ctx, b.st, "cto", 1)
	_, err := b.st.OpenTurn(b.ctx, wire.TurnRow{
		Seat: "cto", WorkKey: "big", TurnID: crewlet.TurnWorkflowID("cto", "big"), Epoch: 1, MaxRounds: 64,
		Mail:      []crewlet.Message{{EventID: "ebig", Type: crewlet.MessageChat, From: "alice", To: "cto", Body: "read it all"}},
		Threads:   []int{0},
		StartedAt: now.Add(-time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	huge := strings.Repeat("x", 5<<20)
	const results = 24
	for i := range results {
		content := strings.Repeat(fmt.Sprintf("%02d", i), 100<<10) // 200 KiB
		if i == 0 {
			content = huge
		}
		m := wire.TurnMessage{Thread: 0, Key: fmt.Sprintf("r%dc1", i+1), Round: i + 1, Message: crewlet.ChatMessage{Role: "tool", ToolCallID: "c", Content: content}}
		if _, err := b.st.AppendTurnMessage(b.ctx, "cto", crewlet.ThreadKey("ebig"), m); err != nil {
			t.Fatal(err)
		}
	}
	var keys []string
	path, pages := "/turns/cto/big", 0
	for path != "" {
		var view wire.TurnView
		size, _ := getBig(t, base, path, &view)
		if size > readBudget {
			t.Fatalf("GET %s answered %d bytes; want at most %d", path, size, readBudget)
		}
		for _, m := range view.Messages {
			keys = append(keys, m.Key)
			if m.Key == "r1c1" && (len(m.Message.Content) > 300<<10 || !strings.Contains(m.Message.Content, "[clipped by crewlet: ")) {
				t.Fatalf("the 5 MiB result came back as %d bytes; want it clipped with a marker", len(m.Message.Content))
			}
		}
		path = ""
		if view.Next != 0 {
			path = fmt.Sprintf("/turns/cto/big?from=%d", view.Next)
		}
		pages++
	}
	if len(keys) != results || keys[0] != "r1c1" || keys[results-1] != fmt.Sprintf("r%dc1", results) || pages < 2 {
		t.Fatalf("read %d messages in %d pages: %v; want all %d in order, over more than one page", len(keys), pages, keys, results)
	}
	if status, _ := get(t, base, "/turns/cto/big?from=x", nil); status != http.StatusBadRequest {
		t.Fatalf("from=x: %d; want 400", status)
	}
}

func TestLargeConversationPageIsCutShort(t *testing.T) {
	t.Parallel()
	b := setup(t)
	org, err := config.Parse([]byte("company: { name: pageco }\nauth: { anonymous: true }\nseats: [ { handle: alice, kind: human } ]\n"))
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	var msgs []crewlet.Message
	for i := range n {
		msgs = append(msgs, crewlet.Message{EventID: fmt.Sprintf("m%d", i), Type: crewlet.MessageChat, From: "operator", To: "alice",
			Conversation: "wide", Body: strings.Repeat("y", crewlet.MaxMessageBytes), SentAt: time.Now()})
	}
	if err := b.st.AppendMessages(b.ctx, "", msgs...); err != nil {
		t.Fatal(err)
	}
	base := b.serve(t, org)
	read, pages := 0, 0
	path := "/conversations/wide"
	for path != "" {
		var conv api.Conversation
		size, _ := getBig(t, base, path, &conv)
		if size > readBudget {
			t.Fatalf("GET %s answered %d bytes; want at most %d", path, size, readBudget)
		}
		read += len(conv.Messages)
		path = ""
		if conv.Next != "" {
			path = "/conversations/wide?after=" + conv.Next
		}
		pages++
	}
	if read != n || pages < 2 {
		t.Fatalf("read %d messages in %d pages; want all %d over more than one", read, pages, n)
	}
}

func TestSeatTurnsClipTriggerBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.serve(t, testOrg(config.Budget{}, config.Budget{}))
	testenv.SeatAtEpoch(t, b.ctx, b.st, "cto", 1)
	_, err := b.st.OpenTurn(b.ctx, wire.TurnRow{
		Seat: "cto", WorkKey: "long", TurnID: crewlet.TurnWorkflowID("cto", "long"), Epoch: 1, MaxRounds: 8,
		Mail:      []crewlet.Message{{EventID: "elong", Type: crewlet.MessageChat, From: "alice", To: "cto", Body: strings.Repeat("z", crewlet.MaxMessageBytes)}},
		Threads:   []int{0},
		StartedAt: now.Add(-time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
	var turns []wire.TurnRow
	if _, truncated := getBig(t, base, "/seats/cto/turns", &turns); truncated != "" {
		t.Errorf("one turn said truncated: %q", truncated)
	}
	if len(turns) != 1 || len(turns[0].Mail) != 1 {
		t.Fatalf("turns %+v; want the one turn with its trigger", turns)
	}
	if body := turns[0].Mail[0].Body; len(body) > 5<<10 || !strings.Contains(body, "[clipped by crewlet: ") {
		t.Fatalf("a 64 KiB trigger listed as %d bytes; want it clipped at 4 KiB with a marker", len(body))
	}
	var view wire.TurnView
	getBig(t, base, "/turns/cto/long", &view)
	if len(view.Turn.Mail[0].Body) != crewlet.MaxMessageBytes {
		t.Fatalf("the turn view holds the trigger as %d bytes; want it whole", len(view.Turn.Mail[0].Body))
	}
}
