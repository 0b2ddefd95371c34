package activities

import (
	"context"
	"fmt"
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
roles: { clerk: { profile: local } }
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

// A human seat's mailbox, which nothing acks, is trimmed to
// mailbox.human_keep and the dead-letter stream to mailbox.dead_letter_keep;
// an agent seat's unread mail is not touched.
func TestMaintenanceTrimsHumanMailboxesAndDeadLetters(t *testing.T) {
	t.Parallel()
	ctx, _, st, mb, org := setupMaintenance(t, `
company: { name: acme }
mailbox: { human_keep: 2, dead_letter_keep: 1 }
profiles: { local: { provider: scripted } }
roles: { clerk: { profile: local } }
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
	if out.HumanEntriesTrimmed != 5 || out.DeadLettersTrimmed != 2 || out.EntriesTrimmed != 0 {
		t.Errorf("trimmed %d human entries, %d dead letters, %d agent entries; want 5, 2 and 0",
			out.HumanEntriesTrimmed, out.DeadLettersTrimmed, out.EntriesTrimmed)
	}
	if left, err := mb.Recent(ctx, "alice", 100); err != nil || len(left) != 2 || left[0].Body != "5" || left[1].Body != "6" {
		t.Errorf("alice's mailbox = %d entries (%v); want the newest two, 5 and 6", len(left), err)
	}
	if left, err := mb.Recent(ctx, "cto", 100); err != nil || len(left) != 7 {
		t.Errorf("cto's unread mailbox = %d entries (%v); want all 7", len(left), err)
	}
	if dls, err := mb.DeadLetters(ctx, 100); err != nil || len(dls) != 1 || dls[0].Message.Body != "2" {
		t.Errorf("dead letters = %+v (%v); want only the newest, body 2", dls, err)
	}
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
	tk := tickets.New(org, st, delivery.New(org, mb, seats, discard), seats, discard)
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
roles: { clerk: { profile: local } }
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
