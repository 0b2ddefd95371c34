package store_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

// setupWithConn is setup plus a connection of its own to the test's
// database, to write rows as old as a test needs.
func setupWithConn(t *testing.T) (*store.Store, *pgx.Conn, context.Context) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	url := testenv.MigratedDatabase(t)
	st := testenv.Store(t, url)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return st, db, ctx
}

// everyHour keeps each kind of record an hour, the shortest retention the
// config allows, and a seat's diary to its newest million.
var everyHour = store.Retention{
	Messages: time.Hour, Events: time.Hour, Diary: time.Hour, Episodes: time.Hour, Counterparties: time.Hour, Nodes: time.Hour,
	Tickets: time.Hour, Approvals: time.Hour, PersonMail: time.Hour, DiaryPerSeat: 1_000_000,
}

// TrimRetention trims each table at its own horizon and touches nothing
// younger. Every horizon differs, and each table's young rows are an hour
// short of theirs, so a table trimmed at another's horizon loses a young row
// or keeps an old one.
func TestTrimRetentionEachTableAtItsHorizon(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)

	r := store.Retention{
		Messages: 100 * time.Hour, Events: 200 * time.Hour, Diary: 300 * time.Hour,
		Episodes: 400 * time.Hour, Counterparties: 500 * time.Hour, Nodes: 600 * time.Hour,
		Tickets: 700 * time.Hour, Approvals: 800 * time.Hour, PersonMail: 900 * time.Hour, DiaryPerSeat: 100,
	}
	// ago returns an interval literal h hours before now's.
	ago := func(h time.Duration) string { return fmt.Sprintf("now() - interval '%d hours'", int(h.Hours())) }
	old := func(horizon time.Duration) string { return ago(horizon + time.Hour) }
	young := func(horizon time.Duration) string { return ago(horizon - time.Hour) }
	exec := func(sql string) {
		t.Helper()
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	// Conversations: one whose every message is old goes with them; one
	// as old with a young message keeps it; one created within the horizon
	// stays though it has no message (yet).
	exec(`INSERT INTO conversations (id, created_at) VALUES
		('c-old', ` + old(r.Messages) + `), ('c-mixed', ` + old(r.Messages) + `), ('c-new', ` + young(r.Messages) + `)`)
	exec(`INSERT INTO messages (id, conversation_id, type, sender, recipient, body, sent_at, recorded_at) VALUES
		('m-old', 'c-old', 'message', 'alice', 'cto', 'hi', now(), ` + old(r.Messages) + `),
		('m-mixed-old', 'c-mixed', 'message', 'alice', 'cto', 'hi', now(), ` + old(r.Messages) + `),
		('m-mixed-new', 'c-mixed', 'reply', 'cto', 'alice', 'hello', now(), ` + young(r.Messages) + `)`)
	exec(`INSERT INTO conversation_summaries (seat, conversation, through_id, through_seq, covered, summary, profile, created_at) VALUES
		('cto', 'c-mixed', 'm-mixed-old', 1, 1, 'old', 'local', ` + old(r.Messages) + `),
		('cto', 'c-mixed', 'm-mixed-new', 2, 2, 'new', 'local', ` + young(r.Messages) + `)`)
	exec(`INSERT INTO seat_events (seat, kind, event_id, recorded_at) VALUES
		('cto', 'dead_letter', 'ev-old', ` + old(r.Events) + `), ('cto', 'dead_letter', 'ev-new', ` + young(r.Events) + `)`)
	exec(`INSERT INTO seat_health_transitions (seat, from_state, to_state, cause, at) VALUES
		('cto', 'ok', 'paused', 'h-old', ` + old(r.Events) + `), ('cto', 'paused', 'ok', 'h-new', ` + young(r.Events) + `)`)
	exec(`INSERT INTO agent_diary (seat, content, content_hash, recorded_at) VALUES
		('cto', 'd-old', 'h1', ` + old(r.Diary) + `), ('cto', 'd-new', 'h2', ` + young(r.Diary) + `)`)
	exec(`INSERT INTO episodes (seat, work_key, turn_id, summary, recorded_at) VALUES
		('cto', 'w1', 'turn/cto/w1', 'ep-old', ` + old(r.Episodes) + `), ('cto', 'w2', 'turn/cto/w2', 'ep-new', ` + young(r.Episodes) + `)`)
	// By last_seen: a counterparty first met long ago but seen lately stays.
	exec(`INSERT INTO counterparty_profiles (seat, counterparty, first_seen, last_seen) VALUES
		('cto', 'gone', ` + old(r.Counterparties) + `, ` + old(r.Counterparties) + `),
		('cto', 'regular', ` + old(r.Counterparties) + `, ` + young(r.Counterparties) + `)`)
	// Nodes: a stop counts from the stop, a silent node from its last beat;
	// a live node stays however long ago it started.
	exec(`INSERT INTO nodes (incarnation, node_id, host_queue, started_at, heartbeat_at, stopped_at) VALUES
		('stopped-old', 'n1', 'q1', ` + old(r.Nodes) + `, ` + old(r.Nodes) + `, ` + old(r.Nodes) + `),
		('stopped-new', 'n1', 'q2', ` + old(r.Nodes) + `, ` + old(r.Nodes) + `, ` + young(r.Nodes) + `),
		('silent-old', 'n2', 'q3', ` + old(r.Nodes) + `, ` + old(r.Nodes) + `, NULL),
		('silent-new', 'n2', 'q4', ` + old(r.Nodes) + `, ` + young(r.Nodes) + `, NULL),
		('live', 'n3', 'q5', ` + ago(10*r.Nodes) + `, now(), NULL)`)

	got, err := st.TrimRetention(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	want := store.RetentionTrimmed{Messages: 2, Conversations: 1, Summaries: 1, Events: 1, Diary: 1, Episodes: 1, Counterparties: 1, Nodes: 2, HealthTransitions: 1}
	if got != want {
		t.Errorf("trimmed %+v; want %+v", got, want)
	}
	for _, tt := range []struct {
		table, query string
		want         []string
	}{
		{"messages", `SELECT id FROM messages ORDER BY id`, []string{"m-mixed-new"}},
		{"conversations", `SELECT id FROM conversations ORDER BY id`, []string{"c-mixed", "c-new"}},
		{"conversation_summaries", `SELECT summary FROM conversation_summaries ORDER BY summary`, []string{"new"}},
		{"seat_events", `SELECT event_id FROM seat_events ORDER BY event_id`, []string{"ev-new"}},
		{"seat_health_transitions", `SELECT cause FROM seat_health_transitions ORDER BY cause`, []string{"h-new"}},
		{"agent_diary", `SELECT content FROM agent_diary ORDER BY content`, []string{"d-new"}},
		{"episodes", `SELECT summary FROM episodes ORDER BY summary`, []string{"ep-new"}},
		{"counterparty_profiles", `SELECT counterparty FROM counterparty_profiles ORDER BY counterparty`, []string{"regular"}},
		{"nodes", `SELECT incarnation FROM nodes ORDER BY incarnation`, []string{"live", "silent-new", "stopped-new"}},
	} {
		rows, err := db.Query(ctx, tt.query)
		if err != nil {
			t.Fatal(err)
		}
		left, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(left, tt.want) {
			t.Errorf("%s left after trim: %v; want %v", tt.table, left, tt.want)
		}
	}
	if live, err := st.Nodes(ctx, 3*time.Second, false); err != nil || len(live) != 1 || live[0].Incarnation != "live" {
		t.Errorf("live nodes after trim: %+v (%v); want the live incarnation", live, err)
	}

	if again, err := st.TrimRetention(ctx, r); err != nil || again != (store.RetentionTrimmed{}) {
		t.Errorf("second trim removed %+v (%v); want nothing", again, err)
	}
}

// A live node's row is never trimmed, even at the shortest retention and
// long after the node started.
func TestTrimRetentionKeepsLiveNode(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	if err := st.RegisterNode(ctx, store.NodeRow{Incarnation: "n1:a", NodeID: "n1", HostQueue: "q"}); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE nodes SET started_at = now() - interval '10 years' WHERE incarnation = 'n1:a'`); err != nil {
		t.Fatal(err)
	}
	if _, err := st.NodeHeartbeat(ctx, "n1:a", 0, nil); err != nil {
		t.Fatal(err)
	}
	if err := st.RegisterNode(ctx, store.NodeRow{Incarnation: "n1:b", NodeID: "n1", HostQueue: "q2"}); err != nil {
		t.Fatal(err)
	}
	if err := st.StopNode(ctx, "n1:b"); err != nil {
		t.Fatal(err)
	}
	got, err := st.TrimRetention(ctx, everyHour)
	if err != nil {
		t.Fatal(err)
	}
	if got.Nodes != 0 {
		t.Fatalf("trimmed %d node rows of a live and a just-stopped node; want none", got.Nodes)
	}
	all, err := st.Nodes(ctx, 3*time.Second, true)
	if err != nil || len(all) != 2 {
		t.Fatalf("node rows after trim: %+v (%v); want both", all, err)
	}
}

// A retention left at zero would delete every row: it is refused, and the
// tables whose retention is set are still trimmed.
func TestTrimRetentionRefusesZero(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	if err := st.WriteDiary(ctx, "cto", "keep me"); err != nil {
		t.Fatal(err)
	}
	noDiary := everyHour
	noDiary.Diary = 0
	_, err := st.TrimRetention(ctx, noDiary)
	if err == nil || !strings.Contains(err.Error(), "diary") {
		t.Fatalf("trim with no diary retention: %v; want an error naming the diary", err)
	}
	if m, err := st.Memory(ctx, "cto"); err != nil || m.Diary != 1 {
		t.Fatalf("diary after a refused trim: %+v (%v); want the entry kept", m, err)
	}
}

// execAll runs each statement on db, failing the test on the first error.
func execAll(t *testing.T, ctx context.Context, db *pgx.Conn, stmts ...string) {
	t.Helper()
	for _, sql := range stmts {
		if _, err := db.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// left is the first column of every row query returns, in its order.
func left(t *testing.T, ctx context.Context, db *pgx.Conn, query string) []string {
	t.Helper()
	rows, err := db.Query(ctx, query)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// A ticket settled before maintenance.ticket_retention is deleted; one still
// open (pending or asking) stays however old, and so does a settled one
// within the horizon. An open sub-ticket of a deleted parent stays too (it
// copied its chain when opened, nothing refers to the parent's row).
func TestTrimRetentionDeletesSettledTicketsNeverOpenOnes(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	execAll(t, ctx, db, `
		INSERT INTO tickets (id, create_key, from_handle, from_seat, to_handle, task, conversation, phase, request_event, created_at, settled_at, hops, chain) VALUES
		('t-done-old',      'k1', 'alice', false, 'cto', 'x', 'c1', 'done',      'e1', now() - interval '30 days', now() - interval '2 hours', 1, '{alice}'),
		('t-failed-old',    'k2', 'alice', false, 'cto', 'x', 'c2', 'failed',    'e2', now() - interval '30 days', now() - interval '2 hours', 1, '{alice}'),
		('t-cancelled-old', 'k3', 'alice', false, 'cto', 'x', 'c3', 'cancelled', 'e3', now() - interval '30 days', now() - interval '2 hours', 1, '{alice}'),
		('t-expired-old',   'k4', 'alice', false, 'cto', 'x', 'c4', 'expired',   'e4', now() - interval '30 days', now() - interval '2 hours', 1, '{alice}'),
		('t-done-new',      'k5', 'alice', false, 'cto', 'x', 'c5', 'done',      'e5', now() - interval '30 days', now() - interval '30 minutes', 1, '{alice}'),
		('t-pending-old',   'k6', 'cto',   true,  'dev', 'x', 'c1', 'pending',   'e6', now() - interval '30 days', NULL, 2, '{alice,cto}'),
		('t-asking-old',    'k7', 'alice', false, 'cto', 'x', 'c7', 'asking',    'e7', now() - interval '30 days', NULL, 1, '{alice}')`)

	got, err := st.TrimRetention(ctx, everyHour)
	if err != nil {
		t.Fatal(err)
	}
	if got.Tickets != 4 {
		t.Errorf("trimmed %d tickets; want the 4 settled over an hour ago", got.Tickets)
	}
	want := []string{"t-asking-old", "t-done-new", "t-pending-old"}
	if ids := left(t, ctx, db, `SELECT id FROM tickets ORDER BY id`); !reflect.DeepEqual(ids, want) {
		t.Errorf("tickets left: %v; want %v", ids, want)
	}
	if tk, err := st.Ticket(ctx, "t-pending-old"); err != nil || tk.Hops != 2 || !reflect.DeepEqual(tk.Chain, []string{"alice", "cto"}) {
		t.Errorf("open sub-ticket of a deleted parent: %+v (%v); want it whole, chain alice, cto", tk, err)
	}
}

// A decided approval (with its call's arguments) is deleted once older than
// maintenance.approval_retention, and a lapsed grant it left goes with it;
// a pending approval stays however old, and so does a decided one whose
// approve-and-remember grant still holds, or a grant would vanish early.
func TestTrimRetentionDeletesDecidedApprovalsNeverPendingOrStillGranting(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	execAll(t, ctx, db, `
		INSERT INTO approvals (id, handle, turn_id, call_key, tool, args, args_hash, role, policy, approvers, on_timeout, epoch, status, created_at, until, decided_at) VALUES
		('a-approved-old', 'cto', 'turn/1', 'k1', 'deploy', '{"env":"prod"}', 'h', 'clerk', 'p', '{alice}', 'deny', 1, 'approved',   now() - interval '3 hours', now(), now() - interval '2 hours'),
		('a-denied-old',   'cto', 'turn/2', 'k2', 'deploy', '{"env":"prod"}', 'h', 'clerk', 'p', '{alice}', 'deny', 1, 'denied',     now() - interval '3 hours', now(), now() - interval '2 hours'),
		('a-super-old',    'cto', 'turn/3', 'k3', 'deploy', '{"env":"prod"}', 'h', 'clerk', 'p', '{alice}', 'deny', 1, 'superseded', now() - interval '3 hours', now(), now() - interval '2 hours'),
		('a-lapsed-old',   'cto', 'turn/4', 'k4', 'deploy', '{"env":"prod"}', 'h', 'clerk', 'p', '{alice}', 'deny', 1, 'approved',   now() - interval '3 hours', now(), now() - interval '2 hours'),
		('a-granting-old', 'cto', 'turn/5', 'k5', 'deploy', '{"env":"prod"}', 'h', 'clerk', 'p', '{alice}', 'deny', 1, 'approved',   now() - interval '3 hours', now(), now() - interval '2 hours'),
		('a-approved-new', 'cto', 'turn/6', 'k6', 'deploy', '{"env":"prod"}', 'h', 'clerk', 'p', '{alice}', 'deny', 1, 'approved',   now() - interval '3 hours', now(), now() - interval '30 minutes'),
		('a-pending-old',  'cto', 'turn/7', 'k7', 'deploy', '{"env":"prod"}', 'h', 'clerk', 'p', '{alice}', 'deny', 1, 'pending',    now() - interval '30 days', now() + interval '1 hour', NULL)`,
		`INSERT INTO approval_grants (handle, tool, args_hash, policy, until, granted_by, approval) VALUES
		('cto', 'deploy', '', 'p', now() - interval '1 minute', 'alice', 'a-lapsed-old'),
		('cto', 'deploy', '', 'p', now() + interval '1 day', 'alice', 'a-granting-old')`)

	got, err := st.TrimRetention(ctx, everyHour)
	if err != nil {
		t.Fatal(err)
	}
	if got.Approvals != 4 {
		t.Errorf("trimmed %d approvals; want the 4 decided over an hour ago with no grant still holding", got.Approvals)
	}
	want := []string{"a-approved-new", "a-granting-old", "a-pending-old"}
	if ids := left(t, ctx, db, `SELECT id FROM approvals ORDER BY id`); !reflect.DeepEqual(ids, want) {
		t.Errorf("approvals left: %v; want %v", ids, want)
	}
	if grants := left(t, ctx, db, `SELECT approval FROM approval_grants ORDER BY approval`); !reflect.DeepEqual(grants, []string{"a-granting-old"}) {
		t.Errorf("grants left: %v; want only the one still holding", grants)
	}
	if by, err := st.Granted(ctx, "cto", "deploy", "h", "p", time.Now()); err != nil || by != "alice" {
		t.Errorf("grant after trim: %q (%v); want alice's, still in force", by, err)
	}
}

// A person's archived mail sent before its retention is deleted once they
// have read it (at or before their read mark); mail after the mark, and all
// of a person who never read, stays however old. A page of older mail read
// later does not lower the mark.
func TestTrimRetentionDeletesPersonMailOnlyOnceRead(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	mail := func(seat, id string, sentHoursAgo int) crewlet.Message {
		ms := time.Now().Add(-time.Duration(sentHoursAgo) * time.Hour).UnixMilli()
		return crewlet.Message{StreamID: fmt.Sprintf("%d-0", ms), EventID: seat + "-" + id, To: seat, Body: id}
	}
	alice := []crewlet.Message{mail("alice", "read-1", 5), mail("alice", "read-2", 4), mail("alice", "unread", 3)}
	bob := []crewlet.Message{mail("bob", "never-read", 5)}
	for seat, msgs := range map[string][]crewlet.Message{"alice": alice, "bob": bob} {
		if err := st.ArchivePersonMail(ctx, seat, msgs); err != nil {
			t.Fatal(err)
		}
	}
	if err := st.MarkPersonMailRead(ctx, "alice", alice[1].StreamID); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkPersonMailRead(ctx, "alice", alice[0].StreamID); err != nil {
		t.Fatal(err)
	}

	got, err := st.TrimRetention(ctx, everyHour)
	if err != nil {
		t.Fatal(err)
	}
	if got.PersonMail != 2 {
		t.Errorf("trimmed %d of a person's mail; want alice's 2 read", got.PersonMail)
	}
	want := []string{"alice-unread", "bob-never-read"}
	if ids := left(t, ctx, db, `SELECT event_id FROM person_mail ORDER BY event_id`); !reflect.DeepEqual(ids, want) {
		t.Errorf("person mail left: %v; want %v", ids, want)
	}

	// Read mail within the horizon stays until it ages past it.
	recent := mail("alice", "recent", 0)
	if err := st.ArchivePersonMail(ctx, "alice", []crewlet.Message{recent}); err != nil {
		t.Fatal(err)
	}
	if err := st.MarkPersonMailRead(ctx, "alice", recent.StreamID); err != nil {
		t.Fatal(err)
	}
	if got, err := st.TrimRetention(ctx, everyHour); err != nil || got.PersonMail != 1 {
		t.Errorf("second trim removed %d of a person's mail (%v); want 1, the old mail now read", got.PersonMail, err)
	}
	want = []string{"alice-recent", "bob-never-read"}
	if ids := left(t, ctx, db, `SELECT event_id FROM person_mail ORDER BY event_id`); !reflect.DeepEqual(ids, want) {
		t.Errorf("person mail left: %v; want %v", ids, want)
	}
}

// maintenance.diary_max_per_seat keeps each seat's newest entries and
// deletes the rest; a seat under the cap loses nothing.
func TestDiaryCapKeepsEachSeatsNewestEntries(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	for i := range 5 {
		if err := st.WriteDiary(ctx, "cto", fmt.Sprintf("cto-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		if err := st.WriteDiary(ctx, "dev", fmt.Sprintf("dev-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	r := everyHour
	r.DiaryPerSeat = 3
	got, err := st.TrimRetention(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if got.DiaryOverCap != 2 || got.Diary != 0 {
		t.Errorf("trimmed %d diary entries over the cap and %d by age; want 2 and 0", got.DiaryOverCap, got.Diary)
	}
	want := []string{"cto-2", "cto-3", "cto-4", "dev-0", "dev-1"}
	if entries := left(t, ctx, db, `SELECT content FROM agent_diary ORDER BY content`); !reflect.DeepEqual(entries, want) {
		t.Errorf("diary left: %v; want %v", entries, want)
	}
}
