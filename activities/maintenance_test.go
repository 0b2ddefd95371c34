package activities

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/control"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/testenv"
)

// The maintenance duty trims each kind of record at the horizon its config
// key gives: a seat event past maintenance.event_retention goes, a diary
// entry as old stays (its retention is a year), and the pass says what it
// trimmed.
func TestMaintenanceTrimsEachKindAtItsConfiguredHorizon(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	url := testenv.Database(t)
	st := testenv.Store(t, url)
	mb, err := mailbox.Open(ctx, testenv.Stack(t).RedisURL, "acttest"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	org, err := config.Parse([]byte(`
company: { name: acme }
maintenance: { event_retention: 2h }
profiles: { local: { provider: scripted } }
roles: { clerk: { profile: local } }
seats: [ { handle: cto, role: clerk } ]
`))
	if err != nil {
		t.Fatal(err)
	}
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

	out, err := (&Maintenance{Store: st, Mailbox: mb, Org: org, Tickets: control.NewTickets(nil, st, discard), Log: discard}).Maintenance(ctx)
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
