package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// A poison corpus at the door: each input is refused with a 4xx JSON error
// before it reaches a mailbox or the store, and a normal message sent right
// after it is answered within seconds (no seat is stalled behind it).
func TestBadInputIsRefusedAtTheDoor(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", `company: { name: doorco }
profiles: { local: { provider: scripted } }
roles: { lead: { charter: answers, profile: local } }
seats:
  - { handle: cto, role: lead }
  - { handle: alice, kind: human }
`))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)

	huge := `{"text":"` + strings.Repeat("x", 10<<20) + `"}`
	for _, p := range []struct {
		name, method, path, body string
		want                     int
	}{
		{"NUL in text", http.MethodPost, "/seats/cto/messages", `{"text":"a\u0000b"}`, 400},
		{"NUL in conversation", http.MethodPost, "/seats/cto/messages", `{"text":"hi","conversation":"c\u0000"}`, 400},
		{"NUL in chat_id", http.MethodPost, "/seats/cto/messages", `{"text":"hi","chat_id":"x\u0000"}`, 400},
		{"NUL in from", http.MethodPost, "/seats/cto/messages", `{"text":"hi","from":"al\u0000ice"}`, 400},
		{"invalid UTF-8", http.MethodPost, "/seats/cto/messages", "{\"text\":\"bad \xff\xfe\"}", 400},
		{"4 KB conversation id", http.MethodPost, "/seats/cto/messages", `{"text":"hi","conversation":"` + strings.Repeat("c", 4096) + `"}`, 400},
		{"conversation id with a slash", http.MethodPost, "/seats/cto/messages", `{"text":"hi","conversation":"a/b"}`, 400},
		{"text over 64 KiB", http.MethodPost, "/seats/cto/messages", `{"text":"` + strings.Repeat("y", 65<<10) + `"}`, 400},
		{"10 MB body", http.MethodPost, "/seats/cto/messages", huge, 413},
		{"duplicate key", http.MethodPost, "/seats/cto/messages", `{"text":"hi","text":"again"}`, 400},
		{"trailing data", http.MethodPost, "/seats/cto/messages", `{"text":"hi"} {"text":"again"}`, 400},
		{"unknown field", http.MethodPost, "/seats/cto/messages", `{"text":"hi","urgent":true}`, 400},
		{"NUL in pause reason", http.MethodPost, "/seats/cto/pause", `{"reason":"x\u0000"}`, 400},
		{"200 KB pause reason", http.MethodPost, "/seats/cto/pause", `{"reason":"` + strings.Repeat("r", 200<<10) + `"}`, 400},
		{"NUL in by", http.MethodPost, "/seats/cto/drain", `{"by":"x\u0000"}`, 400},
		{"NUL in ticket task", http.MethodPost, "/tickets", `{"to":"cto","task":"do\u0000it"}`, 400},
		{"path id with NUL", http.MethodGet, "/seats/%00", "", 400},
		{"path id with %FF", http.MethodPost, "/seats/%FF/messages", `{"text":"hi"}`, 400},
		{"path id with an encoded slash", http.MethodGet, "/conversations/a%2Fb", "", 400},
		{"turn path with NUL", http.MethodGet, "/turns/cto/%00", "", 400},
		{"ticket id with %FF", http.MethodGet, "/tickets/%FF", "", 400},
		{"malformed dead-letter id", http.MethodPost, "/deadletters/%00%01/requeue", "", 400},
		{"dead-letter id that is not a stream id", http.MethodPost, "/deadletters/not-a-stream-id/requeue", "", 400},
		{"dead-letter id past 64 bits", http.MethodPost, "/deadletters/99999999999999999999-0/requeue", "", 400},
		{"node id with NUL", http.MethodPost, "/nodes/%00/drain", "", 400},
	} {
		status, body, err := c.raw(p.method, p.path, p.body)
		if err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		var e struct{ Error, Detail string }
		if status != p.want || json.Unmarshal(body, &e) != nil || e.Error == "" || e.Detail == "" {
			t.Errorf("%s: %d %.200s; want %d with a JSON error", p.name, status, body, p.want)
			continue
		}
		t.Logf("%-32s → %d %s: %.100s", p.name, status, e.Error, e.Detail)
		start := time.Now()
		if reply := c.waitReply(c.send("cto", "still there after "+p.name+"?"), 10*time.Second); !strings.Contains(reply, "still there") {
			t.Fatalf("after %s: reply %q", p.name, reply)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("after %s a normal message took %s to be answered", p.name, d)
		}
	}
}

// Signals with bad payloads sent straight to a seat's workflow with the
// Temporal client (the second door) are ignored: the seat is not paused,
// drained or stopped by them, and keeps answering.
func TestBadSignalsStraightToASeatAreIgnored(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", `company: { name: signalco }
profiles: { local: { provider: scripted } }
roles: { lead: { charter: answers, profile: local } }
seats: [ { handle: cto, role: lead } ]
`))
	c.apiServer()
	c.worker("n1")
	c.waitAttached(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range []struct {
		name    string
		payload any
	}{
		{crewlet.SignalPause, map[string]any{"reason": strings.Repeat("r", 200<<10)}},
		{crewlet.SignalPause, map[string]any{"reason": "x", "sudo": true}},
		{crewlet.SignalPause, "not an object"},
		{crewlet.SignalDrain, map[string]any{"by": "a\u0000b"}},
		{crewlet.SignalStop, map[string]any{"reason": 42}},
		{crewlet.SignalMove, map[string]any{"exclude_node": strings.Repeat("n", 10000)}},
	} {
		if err := c.temporal.SignalWorkflow(ctx, "seat/cto", "", s.name, s.payload); err != nil {
			t.Fatalf("signal %s: %v", s.name, err)
		}
	}
	if reply := c.waitReply(c.send("cto", "still serving?"), 20*time.Second); !strings.Contains(reply, "still serving") {
		t.Fatalf("reply %q", reply)
	}
	st := c.state("cto")
	if st.Pause != nil || st.Drain != nil || st.Status == "stopped" || st.Epoch != 1 {
		t.Fatalf("state after bad signals: %+v; want idle on its first tenure, unpaused", st)
	}
}
