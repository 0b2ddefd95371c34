package activities

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
)

// A wait on a remote task reads the agent's card once, not once a poll;
// a call that fails drops the card, and the next call reads it anew.
func TestRemoteCardIsReadOncePerAgentUntilACallFails(t *testing.T) {
	t.Parallel()
	e := setupZombie(t)
	var cards, calls atomic.Int64
	var failing atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			cards.Add(1)
			fmt.Fprintf(w, `{"name":"review","supportedInterfaces":[{"url":"http://%s/rpc","protocolBinding":"JSONRPC","protocolVersion":"1.0"}],"capabilities":{}}`, r.Host)
			return
		}
		calls.Add(1)
		if failing.Load() {
			http.Error(w, "down for a moment", http.StatusBadGateway)
			return
		}
		var req struct {
			ID json.RawMessage `json:"id"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"id":"task-1","contextId":"ctx-1","status":{"state":"TASK_STATE_WORKING"}}}`, req.ID)
	}))
	t.Cleanup(srv.Close)
	org := &config.Config{Agents: []config.Agent{{Name: "review", CardURL: srv.URL + "/card"}}}
	ticket, _, err := e.store.CreateTicket(e.ctx, "to review", crewlet.Ticket{From: "cto", To: "a2a:review", Task: "review it", Conversation: "c-r"})
	if err != nil {
		t.Fatal(err)
	}
	a := &Remote{Org: org, Store: e.store, HTTP: srv.Client(), Log: discard}
	await := func() error {
		_, err := a.RemoteAwait(e.ctx, crewlet.RemoteAwaitInput{Ticket: ticket.ID, Task: "task-1"})
		return err
	}
	for range 3 {
		if err := await(); err != nil {
			t.Fatal(err)
		}
	}
	if cards.Load() != 1 || calls.Load() != 3 {
		t.Fatalf("three polls read the card %d times and called %d times; want 1 and 3", cards.Load(), calls.Load())
	}
	failing.Store(true)
	if err := await(); err == nil {
		t.Fatal("a poll the remote failed succeeded")
	}
	failing.Store(false)
	if err := await(); err != nil {
		t.Fatal(err)
	}
	if cards.Load() != 2 {
		t.Errorf("the card was read %d times; want it read again after the failed call (2)", cards.Load())
	}
}
