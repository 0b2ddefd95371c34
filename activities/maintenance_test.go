package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/wire"
)

// The maintenance duty trims each kind of record at the horizon its config
// key gives: a seat event past maintenance.event_retention goes, a diary
// entry as old stays (its retention is a year), and the pass says what it
// trimmed.
func TestMaintenanceTrimsEachKindAtItsConfiguredHorizon(t *testing.T) {
	t.Parallel()
	ctx, url, st, mb, org := setupMaintenance(t, `
company: { name: acme }
maintenance: { event_retention: 2h }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk } ]
`)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"old", "new"} {
		if err := st.RecordSeatEvent(ctx, "cto", kind, "", nil); err != nil {
			t.Fatal(err)
		}
		if err := st.WriteDiary(ctx, "cto", kind); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		`UPDATE seat_events SET recorded_at = now() - interval '3 hours' WHERE kind = 'old'`,
		`UPDATE agent_diary SET recorded_at = now() - interval '3 hours' WHERE content = 'old'`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}

	out, err := newMaintenance(t, st, mb, org).Maintenance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.EventsTrimmed != 1 || out.DiaryTrimmed != 0 {
		t.Fatalf("trimmed %d events and %d diary entries; want 1 event (past 2h) and no diary entry (kept a year)", out.EventsTrimmed, out.DiaryTrimmed)
	}
	events, err := st.SeatEvents(ctx, "cto", 10)
	if err != nil || len(events) != 1 || events[0].Kind != "new" {
		t.Fatalf("events left = %+v, %v; want only the new one", events, err)
	}
	if mem, err := st.Memory(ctx, "cto"); err != nil || mem.Diary != 2 {
		t.Fatalf("diary = %+v, %v; want both entries", mem, err)
	}
}

// The maintenance duty deletes an eval run that finished longer ago than
// evals.retention, with its results; a run finished since, a run still
// running however old, and the dataset stay.
func TestMaintenanceTrimsEvalRunsPastEvalsRetention(t *testing.T) {
	t.Parallel()
	ctx, url, st, mb, org := setupMaintenance(t, `
company: { name: acme }
evals: { retention: 2h }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk } ]
`)
	if err := mb.Ensure(ctx, "cto"); err != nil {
		t.Fatal(err)
	}
	if _, err := st.CreateDataset(ctx, wire.Dataset{Name: "d", CreatedBy: "opal", Turns: []string{"turn/cto/k1", "turn/cto/k2"}}); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"old", "new", "stuck"} {
		if _, err := st.CreateEvalRun(ctx, wire.EvalRun{ID: id, Dataset: "d", Change: json.RawMessage(`{}`), Checks: json.RawMessage(`[]`), Concurrency: 1, Principal: "opal"}); err != nil {
			t.Fatal(err)
		}
		if id != "stuck" {
			if err := st.FinishEvalRun(ctx, id, wire.EvalDone); err != nil {
				t.Fatal(err)
			}
		}
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `UPDATE eval_runs SET created_at = now() - interval '5 hours',
		finished_at = CASE WHEN id = 'old' THEN now() - interval '3 hours' END WHERE id IN ('old', 'stuck')`); err != nil {
		t.Fatal(err)
	}

	out, err := newMaintenance(t, st, mb, org).Maintenance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.EvalRunsTrimmed != 1 {
		t.Errorf("trimmed %d eval runs; want 1, the one finished 3h ago", out.EvalRunsTrimmed)
	}
	left := map[string]int64{}
	rows, err := conn.Query(ctx, `SELECT r.id, count(e.turn_id) FROM eval_runs r LEFT JOIN eval_results e ON e.run = r.id GROUP BY r.id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var n int64
		if err := rows.Scan(&id, &n); err != nil {
			t.Fatal(err)
		}
		left[id] = n
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	var orphans int64
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM eval_results WHERE run = 'old'`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	if len(left) != 2 || left["new"] != 2 || left["stuck"] != 2 || orphans != 0 {
		t.Errorf("runs left with their results %v, %d results of the old run; want new and stuck with 2 each, none of old", left, orphans)
	}
	if _, err := st.Dataset(ctx, "d"); err != nil {
		t.Errorf("dataset d after the pass: %v; want it kept", err)
	}
}

// A human seat's mailbox, which nothing acks, keeps mailbox.human_keep
// entries in Redis and the dead-letter stream mailbox.dead_letter_keep; the
// rest moves to Postgres, where the inbox and the dead-letter listing still
// read them; an agent seat's unread mail is not touched.
func TestMaintenanceArchivesHumanMailboxesAndDeadLetters(t *testing.T) {
	t.Parallel()
	ctx, _, st, mb, org := setupMaintenance(t, `
company: { name: acme }
mailbox: { human_keep: 2, dead_letter_keep: 1 }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk }, { handle: eng, role: clerk }, { handle: alice, kind: human } ]
`)
	for _, seat := range org.Handles() {
		if err := mb.Ensure(ctx, seat); err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureMailbox(ctx, seat, mb.Stream(seat), mb.Group(seat)); err != nil {
			t.Fatal(err)
		}
	}
	publish := func(to string, n int) {
		t.Helper()
		for i := range n {
			m := crewlet.Message{EventID: fmt.Sprintf("%s-%d", to, i), Type: crewlet.MessageChat, From: "operator", To: to,
				Conversation: "c", Body: fmt.Sprint(i), SentAt: time.Now()}
			if _, _, err := mb.Publish(ctx, m, mailbox.Quotas{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	publish("alice", 7)
	publish("cto", 7)
	// Three dead letters from eng: read until each is past its budget.
	publish("eng", 3)
	for range mailbox.DeliveryBudget + 1 {
		if _, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "eng", Consumer: "n1:e1", Max: 10}); err != nil {
			t.Fatal(err)
		}
	}

	out, err := newMaintenance(t, st, mb, org).Maintenance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.HumanEntriesArchived != 5 || out.DeadLettersArchived != 2 || out.EntriesTrimmed != 0 {
		t.Errorf("archived %d human entries, %d dead letters, trimmed %d agent entries; want 5, 2 and 0",
			out.HumanEntriesArchived, out.DeadLettersArchived, out.EntriesTrimmed)
	}
	if left, err := mb.Recent(ctx, "alice", 100); err != nil || len(left) != 2 || left[0].Body != "5" || left[1].Body != "6" {
		t.Errorf("alice's Redis mailbox = %d entries (%v); want the newest two, 5 and 6", len(left), err)
	}
	if left, err := mb.Recent(ctx, "cto", 100); err != nil || len(left) != 7 {
		t.Errorf("cto's unread mailbox = %d entries (%v); want all 7", len(left), err)
	}
	if dls, err := mb.DeadLetters(ctx, 100); err != nil || len(dls) != 1 || dls[0].Message.Body != "2" {
		t.Errorf("dead letters in Redis = %+v (%v); want only the newest, body 2", dls, err)
	}
	dl := archiveDelivery(t, st, mb, org)
	inbox, err := dl.Inbox(ctx, "alice", "", 100)
	if err != nil || strings.Join(msgBodies(inbox), ",") != "0,1,2,3,4,5,6" {
		t.Errorf("alice's inbox = %v (%v); want all seven, oldest first", msgBodies(inbox), err)
	}
	dls, err := dl.DeadLetters(ctx, "", 100)
	var got []string
	for _, d := range dls {
		got = append(got, d.Message.Body+map[bool]string{true: "(archived)"}[d.Archived])
	}
	if err != nil || strings.Join(got, ",") != "2,1(archived),0(archived)" {
		t.Errorf("dead letters = %v (%v); want 2,1(archived),0(archived), newest first", got, err)
	}
	// An archived dead letter is requeued as one in Redis is: back in its
	// seat's mailbox, gone from the listing.
	requeued, err := dl.Requeue(ctx, st, dls[2].ID)
	if err != nil || requeued.Message.Body != "0" || requeued.Message.StreamID == "" {
		t.Fatalf("requeue archived = %+v, %v", requeued, err)
	}
	if again, _ := dl.DeadLetters(ctx, "", 100); len(again) != 2 {
		t.Errorf("dead letters after the requeue = %d; want 2", len(again))
	}
	if _, err := dl.Requeue(ctx, st, dls[2].ID); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Errorf("second requeue of the archived dead letter: %v; want not found", err)
	}
	if got, _ := mb.Get(ctx, "eng", []string{requeued.Message.StreamID}); len(got) != 1 || got[0].EventID != "eng-0" {
		t.Errorf("eng's mailbox after the requeue = %+v; want eng-0 back", got)
	}
}

// 2,000 replies to a person who reads none: after maintenance passes
// (one cut short after its insert, as a crash would) every one is still
// readable through the inbox, page by page, in order, none lost, none
// twice. The person's mailbox being over mailbox.max_unread refuses new
// chat to them, never a reply: accepted work is not refused.
func TestTwoThousandRepliesToAPersonAreAllReadable(t *testing.T) {
	t.Parallel()
	ctx, _, st, mb, org := setupMaintenance(t, `
company: { name: acme }
mailbox: { human_keep: 1000, max_unread: 500 }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk }, { handle: alice, kind: human } ]
`)
	for _, seat := range org.Handles() {
		if err := mb.Ensure(ctx, seat); err != nil {
			t.Fatal(err)
		}
	}
	dl := archiveDelivery(t, st, mb, org)
	const n = 2000
	for i := range n {
		if _, err := dl.Deliver(ctx, crewlet.Message{EventID: fmt.Sprintf("reply-%04d", i), Type: crewlet.MessageReply, From: "cto", To: "alice",
			Conversation: "c", Body: fmt.Sprintf("%04d", i), SentAt: time.Now()}); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	_, err := dl.Deliver(ctx, crewlet.Message{EventID: "chat-new", Type: crewlet.MessageChat, From: "cto", To: "alice", Conversation: "c", Body: "new", SentAt: time.Now()})
	if crewlet.ErrorCode(err) != crewlet.EFULL {
		t.Errorf("new chat to a person holding %d unread: %v; want EFULL", n, err)
	}
	// A move cut short: the oldest batch is in Postgres and still in Redis.
	cut, err := mb.Overflow(ctx, "alice", 1000, 300)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.ArchivePersonMail(ctx, "alice", cut); err != nil {
		t.Fatal(err)
	}
	m := newMaintenance(t, st, mb, org)
	out, err := m.Maintenance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if out.HumanEntriesArchived != n-1000 {
		t.Errorf("archived %d; want %d", out.HumanEntriesArchived, n-1000)
	}
	if again, err := m.Maintenance(ctx); err != nil || again.HumanEntriesArchived != 0 {
		t.Errorf("second pass archived %d (%v); want 0", again.HumanEntriesArchived, err)
	}
	if left, _ := mb.Recent(ctx, "alice", n); len(left) != 1000 {
		t.Errorf("alice's Redis mailbox holds %d; want mailbox.human_keep, 1000", len(left))
	}
	var all []string
	pages := 0
	for before := ""; ; pages++ {
		page, err := dl.Inbox(ctx, "alice", before, 300)
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		all = append(msgBodies(page), all...)
		before = page[0].StreamID
	}
	if len(all) != n {
		t.Fatalf("read %d replies in %d pages; want all %d", len(all), pages, n)
	}
	for i, b := range all {
		if b != fmt.Sprintf("%04d", i) {
			t.Fatalf("reply %d reads %q; want %04d: every reply once, in order", i, b, i)
		}
	}
}

// Retirement dead-letters what the removed seat never handled (never read,
// or read and not acked) with a reason naming the removal, then deletes
// the mailbox; what it handled goes with the mailbox.
func TestRetirementDeadLettersUnreadMail(t *testing.T) {
	t.Parallel()
	ctx, url, st, mb, org := setupMaintenance(t, `
company: { name: acme }
mailbox: { retire_after: 1s }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk } ]
`)
	for _, h := range []string{"cto", "gone"} {
		if err := mb.Ensure(ctx, h); err != nil {
			t.Fatal(err)
		}
		if err := st.EnsureMailbox(ctx, h, mb.Stream(h), mb.Group(h)); err != nil {
			t.Fatal(err)
		}
	}
	for _, id := range []string{"handled", "pending", "unread"} {
		if _, _, err := mb.Publish(ctx, crewlet.Message{EventID: id, Type: crewlet.MessageChat, From: "operator", To: "gone",
			Conversation: "c", Body: id, SentAt: time.Now()}, mailbox.Quotas{}); err != nil {
			t.Fatal(err)
		}
	}
	read, err := mb.Read(ctx, mailbox.ReadRequest{Handle: "gone", Consumer: "n1:e1", Max: 2})
	if err != nil || len(read.Messages) != 2 {
		t.Fatalf("read = %+v, %v", read, err)
	}
	if err := mb.Ack(ctx, "gone", []string{read.Messages[0].StreamID}); err != nil {
		t.Fatal(err)
	}
	m := newMaintenance(t, st, mb, org)
	if out, err := m.Maintenance(ctx); err != nil || len(out.MailboxesAbsent) != 1 {
		t.Fatalf("first pass = %+v, %v; want gone stamped absent", out, err)
	}
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close(context.Background()) })
	if _, err := db.Exec(ctx, `UPDATE mailboxes SET missing_since = missing_since - interval '1 hour' WHERE seat = 'gone'`); err != nil {
		t.Fatal(err)
	}
	out, err := m.Maintenance(ctx)
	if err != nil || len(out.MailboxesRetired) != 1 || out.RetiredUnread != 2 {
		t.Fatalf("second pass = retired %v, %d unread dead-lettered (%v); want gone retired with 2", out.MailboxesRetired, out.RetiredUnread, err)
	}
	dls, err := mb.DeadLetters(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, d := range dls {
		if d.Seat != "gone" || !strings.Contains(d.Reason, "removed from the org") {
			t.Errorf("dead letter %+v; want seat gone and a reason naming the removal", d)
		}
		got = append(got, d.Message.Body)
	}
	if strings.Join(got, ",") != "unread,pending" {
		t.Errorf("dead letters = %v; want unread,pending (the handled one not)", got)
	}
	if n, err := mb.Redis().Exists(ctx, mb.Stream("gone")).Result(); err != nil || n != 0 {
		t.Errorf("gone's stream exists = %d (%v); want deleted", n, err)
	}
}

// archiveDelivery is a delivery service that keeps what Redis does not
// hold in st, as the server's does.
func archiveDelivery(t *testing.T, st *store.Store, mb *mailbox.Mailbox, org *config.Config) *delivery.Service {
	t.Helper()
	d := delivery.New(org, mb, seatclient.New(dialTemporal(t), org), st, nil, discard)
	return d
}

func msgBodies(msgs []crewlet.Message) []string {
	out := make([]string, len(msgs))
	for i, m := range msgs {
		out[i] = m.Body
	}
	return out
}

// setupMaintenance gives a maintenance test its own database (and its URL,
// to backdate rows), a mailbox key prefix and the org.
func setupMaintenance(t *testing.T, orgYAML string) (context.Context, string, *store.Store, *mailbox.Mailbox, *config.Config) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	url := testenv.MigratedDatabase(t)
	st := testenv.Store(t, url)
	mb, err := mailbox.Open(ctx, testenv.Stack(t).RedisURL, "acttest"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	org, err := config.Parse([]byte(orgYAML))
	if err != nil {
		t.Fatal(err)
	}
	// The sweep lists the seat workflows on the org's queue; this test's
	// own is empty, whatever other tests left running on the server.
	org.Temporal.TaskQueue = "crewlet-maintenance-test-" + testenv.Suffix()
	return ctx, url, st, mb, org
}

// newMaintenance is the maintenance activity over the dev Temporal server.
func newMaintenance(t *testing.T, st *store.Store, mb *mailbox.Mailbox, org *config.Config) *Maintenance {
	t.Helper()
	seats := seatclient.New(dialTemporal(t), org)
	tk := tickets.New(org, st, delivery.New(org, mb, seats, nil, nil, discard), seats, nil, nil, discard)
	return &Maintenance{Store: st, Mailbox: mb, Org: org, Tickets: tk, Log: discard}
}

// While a live node runs an org file naming other seats, maintenance stamps
// no seat absent and fails none of its tickets: one of the files is stale.
// Once that node stops, the sweep goes on.
func TestMaintenanceSweepWaitsForNodesToAgreeOnTheOrg(t *testing.T) {
	t.Parallel()
	ctx, _, st, mb, org := setupMaintenance(t, `
company: { name: acme }
nodes: { heartbeat_timeout: 60s }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk }, { handle: alice, kind: human } ]
`)
	m := newMaintenance(t, st, mb, org)
	m.NodeID = "here"
	for _, h := range []string{"cto", "alice", "eng-9"} {
		if err := st.EnsureMailbox(ctx, h, mb.Stream(h), mb.Group(h)); err != nil {
			t.Fatal(err)
		}
		if err := mb.Ensure(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	// eng-9 left the org, but a ticket to it is open.
	ticket, _, err := st.CreateTicket(ctx, "to eng-9", crewlet.Ticket{From: "alice", To: "eng-9", Task: "a job", Conversation: "c-9"})
	if err != nil {
		t.Fatal(err)
	}
	phase := func() crewlet.TicketPhase {
		t.Helper()
		tk, err := st.Ticket(ctx, ticket.ID)
		if err != nil {
			t.Fatal(err)
		}
		return tk.Phase
	}
	for _, n := range []store.NodeRow{
		{Incarnation: "here:a", NodeID: "here", HostQueue: "q-here", SeatsDigest: org.SeatsDigest()},
		{Incarnation: "there:a", NodeID: "there", HostQueue: "q-there", SeatsDigest: "an org with eng-9"},
	} {
		if err := st.RegisterNode(ctx, n); err != nil {
			t.Fatal(err)
		}
	}

	out, err := m.Maintenance(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(out.SweepWaitsFor) != "[there:a]" || len(out.MailboxesAbsent) != 0 {
		t.Fatalf("sweep waits for %v, stamped %v; want it to wait for [there:a], stamping nothing",
			out.SweepWaitsFor, out.MailboxesAbsent)
	}
	if _, missing, err := st.MailboxRegistry(ctx, "eng-9"); err != nil || missing != nil {
		t.Fatalf("eng-9 stamped absent at %v (%v) while a live node's org may have it", missing, err)
	}
	if got := phase(); got != crewlet.TicketPending {
		t.Fatalf("eng-9's ticket while nodes disagree: %q; want pending", got)
	}

	if err := st.StopNode(ctx, "there:a"); err != nil {
		t.Fatal(err)
	}
	out, err = m.Maintenance(ctx)
	if err != nil || len(out.SweepWaitsFor) != 0 || fmt.Sprint(out.MailboxesAbsent) != "[eng-9]" {
		t.Fatalf("after the other node stopped: waits for %v, stamped %v (%v); want eng-9 stamped",
			out.SweepWaitsFor, out.MailboxesAbsent, err)
	}
	if got := phase(); got != crewlet.TicketFailed {
		t.Fatalf("eng-9's ticket once nodes agree: %q; want failed", got)
	}
}

// A reply to a person that Redis will not take (here: unreachable) is kept
// in Postgres, where the inbox reads it, once however often it is
// delivered; new chat to the person fails instead, for its sender to retry.
func TestReplyToAPersonRedisRefusesIsKeptInPostgres(t *testing.T) {
	t.Parallel()
	ctx, _, st, mb, org := setupMaintenance(t, `
company: { name: acme }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: cto, role: clerk }, { handle: alice, kind: human } ]
`)
	dl := archiveDelivery(t, st, mb, org)
	if err := mb.Close(); err != nil {
		t.Fatal(err)
	}
	reply := crewlet.Message{EventID: "reply-1", Type: crewlet.MessageReply, From: "cto", To: "alice", Conversation: "c", Body: "done", SentAt: time.Now()}
	first, err := dl.Deliver(ctx, reply)
	if err != nil {
		t.Fatalf("reply with Redis down: %v; want it kept in Postgres", err)
	}
	again, err := dl.Deliver(ctx, reply)
	if err != nil || again.StreamID != first.StreamID {
		t.Fatalf("the same reply again = %q, %v; want the first's %q", again.StreamID, err, first.StreamID)
	}
	kept, err := st.PersonMail(ctx, "alice", "", 10)
	if err != nil || len(kept) != 1 || kept[0].Body != "done" || kept[0].StreamID != first.StreamID {
		t.Fatalf("alice's archived mail = %+v (%v); want the one reply", kept, err)
	}
	chat := crewlet.Message{EventID: "chat-1", Type: crewlet.MessageChat, From: "cto", To: "alice", Conversation: "c", Body: "hi", SentAt: time.Now()}
	if _, err := dl.Deliver(ctx, chat); crewlet.ErrorCode(err) != crewlet.EUNAVAILABLE {
		t.Fatalf("chat with Redis down: %v; want EUNAVAILABLE", err)
	}
}
