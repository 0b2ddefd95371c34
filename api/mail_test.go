package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tickets"
)

// A sender over mailbox.sender_per_minute gets 429 with Retry-After, a
// mailbox at mailbox.max_unread 507, each saying which key; what was
// accepted before is all in the inbox, which pages back by ?before= and
// refuses a cursor that is not a stream id.
func TestMailQuotasAndInboxPaging(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mb, err := mailbox.Open(b.ctx, testenv.Stack(t).RedisURL, "apitest"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	if err := mb.Ensure(b.ctx, "alice"); err != nil {
		t.Fatal(err)
	}
	org := testOrg(config.Budget{}, config.Budget{})
	org.Mailbox = config.Mailbox{MaxUnread: 10000, SenderPerMinute: 3, MaxMemoryPercent: 100}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := withServices(&api.Server{Org: org, Store: b.st, Log: log, Mailbox: mb})
	s.Delivery = delivery.New(org, mb, seatclient.New(nil, org), b.st, nil, log)
	s.Tickets = tickets.New(org, b.st, s.Delivery, s.Seats, nil, nil, log)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	send := func(text string) *http.Response {
		t.Helper()
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/seats/alice/messages", strings.NewReader(`{"text":"`+text+`"}`))
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	refusal := func(resp *http.Response) errorBody {
		t.Helper()
		var eb errorBody
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
			t.Fatal(err)
		}
		return eb
	}
	for _, text := range []string{"one", "two", "three"} {
		if resp := send(text); resp.StatusCode != http.StatusAccepted {
			t.Fatalf("send %s: %d %+v; want 202", text, resp.StatusCode, refusal(resp))
		}
	}
	resp := send("four")
	if eb := refusal(resp); resp.StatusCode != http.StatusTooManyRequests || eb.Error != crewlet.ERATELIMITED ||
		!strings.Contains(eb.Detail, "mailbox.sender_per_minute") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("fourth send in a minute: %d %+v Retry-After %q; want 429 naming mailbox.sender_per_minute, with Retry-After",
			resp.StatusCode, eb, resp.Header.Get("Retry-After"))
	}
	org.Mailbox = config.Mailbox{MaxUnread: 3, SenderPerMinute: 100, MaxMemoryPercent: 100}
	resp = send("five")
	if eb := refusal(resp); resp.StatusCode != http.StatusInsufficientStorage || eb.Error != crewlet.EFULL || !strings.Contains(eb.Detail, "mailbox.max_unread") {
		t.Fatalf("send to a full mailbox: %d %+v; want 507 naming mailbox.max_unread", resp.StatusCode, eb)
	}
	// A ticket whose request a quota refuses is failed at once, saying
	// why, rather than left open until it expires.
	if err := mb.Ensure(b.ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := mb.Publish(b.ctx, crewlet.Message{EventID: "unread", Type: crewlet.MessageChat, From: "alice", To: "cto", Body: "x"}, mailbox.Quotas{}); err != nil {
		t.Fatal(err)
	}
	org.Mailbox = config.Mailbox{MaxUnread: 1, SenderPerMinute: 0, MaxMemoryPercent: 100}
	if code, body := call(t, http.MethodPost, srv.URL+"/tickets", "", `{"to":"cto","task":"refused"}`); code != http.StatusInsufficientStorage {
		t.Fatalf("open a ticket to a full mailbox: %d %s; want 507", code, body)
	}
	var opened []crewlet.Ticket
	getJSON(t, srv.URL+"/tickets?to=cto", "", &opened)
	if len(opened) != 1 || opened[0].Phase != crewlet.TicketFailed || !strings.Contains(opened[0].Reason, "mailbox.max_unread") {
		t.Fatalf("tickets to cto = %+v; want the refused one, failed, naming mailbox.max_unread", opened)
	}

	page := func(query string) ([]crewlet.Message, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + "/seats/alice/inbox" + query)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var msgs []crewlet.Message
		if resp.StatusCode != http.StatusOK || json.NewDecoder(resp.Body).Decode(&msgs) != nil {
			t.Fatalf("GET inbox%s: %d", query, resp.StatusCode)
		}
		return msgs, resp.Header.Get(api.NextBeforeHeader)
	}
	newest, next := page("?limit=2")
	if len(newest) != 2 || newest[0].Body != "two" || newest[1].Body != "three" || next != newest[0].StreamID {
		t.Fatalf("first page = %v, next %q; want two, three and the cursor of two", msgBodies(newest), next)
	}
	if older, _ := page("?limit=2&before=" + next); len(older) != 1 || older[0].Body != "one" {
		t.Fatalf("page before = %v; want one: every accepted message, the refused ones not", msgBodies(older))
	}
	if code, eb := get(t, srv.URL, "/seats/alice/inbox?before=yesterday", nil); code != http.StatusBadRequest || !strings.Contains(eb.Detail, "stream id") {
		t.Errorf("a cursor that is not a stream id: %d %+v; want 400", code, eb)
	}
}

// GET /deadletters answers at most 4 MiB: 80 dead letters of 60 KiB (in
// Redis and archived, as one list) come in pages cut by size, each with
// the cursor of the next, and together hold each dead letter once.
func TestDeadLettersAreCappedBySize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mb, err := mailbox.Open(b.ctx, testenv.Stack(t).RedisURL, "apitest"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	const n = 80
	var dls []mailbox.DeadLetter
	for i := range n {
		dls = append(dls, mailbox.DeadLetter{ID: fmt.Sprintf("1700000000000-%d", i), Seat: "cto", Reason: "test", StreamID: "1-1", At: time.Now(),
			Message: crewlet.Message{EventID: fmt.Sprint("e", i), Type: crewlet.MessageChat, To: "cto", Body: strings.Repeat("x", 60<<10)}})
	}
	if err := b.st.ArchiveDeadLetters(b.ctx, dls); err != nil {
		t.Fatal(err)
	}
	org := testOrg(config.Budget{}, config.Budget{})
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := withServices(&api.Server{Org: org, Store: b.st, Log: log, Mailbox: mb})
	s.Delivery = delivery.New(org, mb, seatclient.New(nil, org), b.st, nil, log)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	seen := map[string]bool{}
	pages := 0
	for before := ""; ; pages++ {
		resp, err := http.Get(srv.URL + "/deadletters?limit=1000&before=" + before)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var page []mailbox.DeadLetter
		if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &page) != nil {
			t.Fatalf("GET /deadletters: %d", resp.StatusCode)
		}
		if len(body) > 4<<20 {
			t.Fatalf("page %d is %d bytes; want at most 4 MiB", pages, len(body))
		}
		for _, d := range page {
			if seen[d.ID] || !d.Archived {
				t.Fatalf("dead letter %s twice, or not marked archived", d.ID)
			}
			seen[d.ID] = true
		}
		before = resp.Header.Get(api.NextBeforeHeader)
		if before == "" {
			break
		}
		if pages > n {
			t.Fatal("the pages do not end")
		}
	}
	if len(seen) != n || pages < 1 {
		t.Fatalf("read %d dead letters in %d pages; want all %d in more than one page", len(seen), pages+1, n)
	}
}

func msgBodies(msgs []crewlet.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Body
	}
	return out
}

// A person reading their own inbox marks their mail read up to the newest
// entry shown, so retention may delete their archived mail; an admin
// reading another person's inbox marks nothing, and that person's mail of
// the same age stays.
func TestOnlyThePersonsOwnInboxReadLetsRetentionDeleteTheirMail(t *testing.T) {
	s, b := authMailServer(t)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	sent := time.Now().Add(-48 * time.Hour)
	for _, seat := range []string{"alice", "bob"} {
		for i := range 2 {
			m := crewlet.Message{StreamID: fmt.Sprintf("%d-%d", sent.UnixMilli(), i), EventID: seat + fmt.Sprint(i), Type: crewlet.MessageReply,
				From: "cto", To: seat, Body: "old news", SentAt: sent}
			if err := b.st.ArchivePersonMail(b.ctx, seat, []crewlet.Message{m}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, read := range []struct{ token, seat string }{{tokens["member"], "bob"}, {tokens["admin"], "alice"}} {
		if code, body := call(t, http.MethodGet, srv.URL+"/seats/"+read.seat+"/inbox", read.token, ""); code != http.StatusOK || !strings.Contains(body, "old news") {
			t.Fatalf("GET /seats/%s/inbox: %d %s; want 200 with the archived mail", read.seat, code, body)
		}
	}

	hour := time.Hour
	trimmed, err := b.st.TrimRetention(b.ctx, store.Retention{
		Messages: hour, Events: hour, Diary: hour, Episodes: hour, Counterparties: hour, Nodes: hour,
		Tickets: hour, Approvals: hour, PersonMail: hour, DiaryPerSeat: 1000,
	})
	if err != nil {
		t.Fatal(err)
	}
	if trimmed.PersonMail != 2 {
		t.Errorf("trimmed %d of the people's mail; want bob's 2, which bob read", trimmed.PersonMail)
	}
	for seat, want := range map[string]int{"alice": 2, "bob": 0} {
		if kept, err := b.st.PersonMail(b.ctx, seat, "", 10); err != nil || len(kept) != want {
			t.Errorf("%s's archived mail after trim: %d (%v); want %d", seat, len(kept), err, want)
		}
	}
}

// authMailServer is authOrg's API with a mailbox of its own, and delivery
// and tickets over it: what a test of mail or tickets needs. Nothing
// serves it yet.
func authMailServer(t *testing.T) (*api.Server, bundle) {
	t.Helper()
	for role, tok := range tokens {
		t.Setenv("CREWLET_TEST_TOKEN_"+strings.ToUpper(role), tok)
	}
	org, err := config.Parse([]byte(authOrg))
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t)
	mb, err := mailbox.Open(b.ctx, testenv.Stack(t).RedisURL, "apitest"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := withServices(&api.Server{Org: org, Store: b.st, Log: log, Mailbox: mb})
	s.Delivery = delivery.New(org, mb, s.Seats, b.st, nil, log)
	s.Tickets = tickets.New(org, b.st, s.Delivery, s.Seats, nil, nil, log)
	return s, b
}
