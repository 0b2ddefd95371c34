package store_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	r := store.Retention{Messages: time.Hour, Events: time.Hour, Diary: time.Hour, Episodes: time.Hour, Counterparties: time.Hour, Nodes: time.Hour}
	got, err := st.TrimRetention(ctx, r)
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
	_, err := st.TrimRetention(ctx, store.Retention{Messages: time.Hour, Events: time.Hour, Episodes: time.Hour, Counterparties: time.Hour, Nodes: time.Hour})
	if err == nil || !strings.Contains(err.Error(), "diary") {
		t.Fatalf("trim with no diary retention: %v; want an error naming the diary", err)
	}
	if m, err := st.Memory(ctx, "cto"); err != nil || m.Diary != 1 {
		t.Fatalf("diary after a refused trim: %+v (%v); want the entry kept", m, err)
	}
}
