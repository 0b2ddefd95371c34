package store_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
)

// newTicket opens a pending ticket from alice under key, to the given seat.
func newTicket(t *testing.T, st *store.Store, ctx context.Context, key, to string) crewlet.Ticket {
	t.Helper()
	tk, created, err := st.CreateTicket(ctx, key, crewlet.Ticket{
		From: "alice", To: to, Task: "task " + key, Conversation: "conv-" + key,
	})
	if err != nil || !created {
		t.Fatalf("CreateTicket(%s) = created %v, %v; want a new ticket", key, created, err)
	}
	return tk
}

// sqlExec runs one statement on the test's database, for states no store
// method makes (asking) and ages no test can wait for.
func sqlExec(t *testing.T, db *pgx.Conn, ctx context.Context, q string, args ...any) {
	t.Helper()
	tag, err := db.Exec(ctx, q, args...)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	if tag.RowsAffected() == 0 {
		t.Fatalf("%s %v: changed no row", q, args)
	}
}

func ids(ts []crewlet.Ticket) []string {
	out := make([]string, len(ts))
	for i, tk := range ts {
		out[i] = tk.ID
	}
	return out
}

func sortedIDs(ts []crewlet.Ticket) string {
	out := ids(ts)
	sort.Strings(out)
	return strings.Join(out, ",")
}

func mustTicket(t *testing.T, st *store.Store, ctx context.Context, id string) crewlet.Ticket {
	t.Helper()
	tk, err := st.Ticket(ctx, id)
	if err != nil {
		t.Fatalf("Ticket(%s): %v", id, err)
	}
	return tk
}

// A ticket is keyed on what created it: the same key again returns the
// stored ticket, created false, and changes nothing of it.
func TestCreateTicketIsKeyedOnTheCreateKey(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	first, created, err := st.CreateTicket(ctx, "tool:cto:wk:1:0", crewlet.Ticket{
		ID: "ignored", RequestEvent: "ignored", From: "cto", FromSeat: true, To: "eng-1", RoutedFrom: "role:engineer",
		Task: "fix the build", Conversation: "conv-1", Phase: crewlet.TicketDone, Reply: "ignored",
	})
	if err != nil || !created {
		t.Fatalf("first CreateTicket: created %v, %v; want created", created, err)
	}
	wantID := store.TicketID("tool:cto:wk:1:0")
	if first.ID != wantID || !strings.HasPrefix(first.ID, "t-") {
		t.Fatalf("id = %q; want TicketID(key) = %q", first.ID, wantID)
	}
	if first.RequestEvent != crewlet.TicketRequestEventID(wantID) {
		t.Fatalf("request event = %q; want %q", first.RequestEvent, crewlet.TicketRequestEventID(wantID))
	}
	if first.From != "cto" || !first.FromSeat || first.To != "eng-1" || first.RoutedFrom != "role:engineer" ||
		first.Task != "fix the build" || first.Conversation != "conv-1" {
		t.Fatalf("stored ticket = %+v; want the fields it was created with", first)
	}
	if first.Phase != crewlet.TicketPending || first.Reply != "" || first.SettledAt != nil || first.CreatedAt.IsZero() {
		t.Fatalf("new ticket phase %q reply %q settled_at %v created %v; want pending, no reply, not settled, a creation time",
			first.Phase, first.Reply, first.SettledAt, first.CreatedAt)
	}

	again, created, err := st.CreateTicket(ctx, "tool:cto:wk:1:0", crewlet.Ticket{
		From: "alice", To: "eng-2", Task: "something else", Conversation: "conv-2",
	})
	if err != nil || created {
		t.Fatalf("CreateTicket with the same key: created %v, %v; want the stored ticket, created false", created, err)
	}
	if again.ID != first.ID || again.From != "cto" || again.To != "eng-1" || again.Task != "fix the build" ||
		again.Conversation != "conv-1" || !again.CreatedAt.Equal(first.CreatedAt) || !again.UpdatedAt.Equal(first.UpdatedAt) {
		t.Fatalf("CreateTicket with the same key returned %+v; want the first ticket unchanged %+v", again, first)
	}
	if stored := mustTicket(t, st, ctx, first.ID); stored.Task != "fix the build" || stored.To != "eng-1" {
		t.Fatalf("stored after the repeat = %+v; want unchanged", stored)
	}
	all, err := st.Tickets(ctx, store.TicketFilter{})
	if err != nil || len(all) != 1 {
		t.Fatalf("tickets after a repeated create = %v, %v; want one", ids(all), err)
	}

	other := newTicket(t, st, ctx, "another key", "eng-1")
	if other.ID == first.ID || other.ID != store.TicketID("another key") {
		t.Fatalf("another key made id %q; want TicketID(\"another key\") = %q, not %q", other.ID, store.TicketID("another key"), first.ID)
	}
	if _, err := st.Ticket(ctx, "t-000000000000"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("Ticket(unknown) = %v; want ENOTFOUND", err)
	}
}

// One reply settles one ticket: the second is refused and the ticket comes
// back as it stands; a ticket that ended otherwise cannot be settled.
func TestSettleTicketOnce(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	tk := newTicket(t, st, ctx, "k1", "eng-1")
	before := time.Now().Add(-time.Minute)

	done, settled, err := st.SettleTicket(ctx, tk.ID, "the build is green")
	if err != nil || !settled {
		t.Fatalf("SettleTicket of a pending ticket: settled %v, %v; want settled", settled, err)
	}
	if done.Phase != crewlet.TicketDone || done.Reply != "the build is green" || done.SettledAt == nil || done.SettledAt.Before(before) {
		t.Fatalf("settled ticket phase %q reply %q settled_at %v; want done with the reply and a settle time", done.Phase, done.Reply, done.SettledAt)
	}
	if stored := mustTicket(t, st, ctx, tk.ID); stored.Phase != crewlet.TicketDone || stored.Reply != "the build is green" {
		t.Fatalf("stored = %q %q; want done with the reply", stored.Phase, stored.Reply)
	}

	again, settled, err := st.SettleTicket(ctx, tk.ID, "a second opinion")
	if err != nil || settled {
		t.Fatalf("second SettleTicket: settled %v, %v; want refused without error", settled, err)
	}
	if again.ID != tk.ID || again.Phase != crewlet.TicketDone || again.Reply != "the build is green" ||
		again.SettledAt == nil || !again.SettledAt.Equal(*done.SettledAt) {
		t.Fatalf("second SettleTicket returned phase %q reply %q settled_at %v; want the ticket as it stands (done, first reply, %v)",
			again.Phase, again.Reply, again.SettledAt, done.SettledAt)
	}

	for _, phase := range []crewlet.TicketPhase{crewlet.TicketFailed, crewlet.TicketCancelled, crewlet.TicketExpired} {
		t.Run(string(phase), func(t *testing.T) {
			tk := newTicket(t, st, ctx, "ended-"+string(phase), "eng-1")
			if _, ended, err := st.EndTicket(ctx, tk.ID, phase, "because"); err != nil || !ended {
				t.Fatalf("EndTicket %s: ended %v, %v", phase, ended, err)
			}
			got, settled, err := st.SettleTicket(ctx, tk.ID, "too late")
			if err != nil || settled {
				t.Fatalf("SettleTicket of a %s ticket: settled %v, %v; want refused", phase, settled, err)
			}
			if got.Phase != phase || got.Reply != "" || got.Reason != "because" {
				t.Fatalf("SettleTicket of a %s ticket returned phase %q reply %q reason %q; want it as it stands", phase, got.Phase, got.Reply, got.Reason)
			}
			if stored := mustTicket(t, st, ctx, tk.ID); stored.Phase != phase || stored.Reply != "" {
				t.Fatalf("stored = %q reply %q; want still %s with no reply", stored.Phase, stored.Reply, phase)
			}
		})
	}

	if _, _, err := st.SettleTicket(ctx, "t-000000000000", "x"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("SettleTicket(unknown) = %v; want ENOTFOUND", err)
	}
}

// EndTicket ends an open ticket failed, cancelled or expired, once; the
// phases a ticket is not ended into are refused.
func TestEndTicket(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	for _, phase := range []crewlet.TicketPhase{crewlet.TicketFailed, crewlet.TicketCancelled, crewlet.TicketExpired} {
		t.Run(string(phase), func(t *testing.T) {
			tk := newTicket(t, st, ctx, "end-"+string(phase), "eng-1")
			got, ended, err := st.EndTicket(ctx, tk.ID, phase, "reason "+string(phase))
			if err != nil || !ended {
				t.Fatalf("EndTicket: ended %v, %v; want ended", ended, err)
			}
			if got.Phase != phase || got.Reason != "reason "+string(phase) || got.SettledAt == nil || got.Reply != "" {
				t.Fatalf("ended ticket phase %q reason %q settled_at %v; want %s with its reason and an end time", got.Phase, got.Reason, got.SettledAt, phase)
			}
			// Ending an ended ticket, the same way or another, changes nothing.
			for _, next := range []crewlet.TicketPhase{crewlet.TicketFailed, crewlet.TicketCancelled, crewlet.TicketExpired} {
				again, ended, err := st.EndTicket(ctx, tk.ID, next, "later")
				if err != nil || ended {
					t.Fatalf("EndTicket %s of a %s ticket: ended %v, %v; want refused", next, phase, ended, err)
				}
				if again.Phase != phase || again.Reason != "reason "+string(phase) || !again.SettledAt.Equal(*got.SettledAt) {
					t.Fatalf("EndTicket %s of a %s ticket returned phase %q reason %q; want it as it stands", next, phase, again.Phase, again.Reason)
				}
			}
		})
	}

	t.Run("asking", func(t *testing.T) {
		tk := newTicket(t, st, ctx, "end-asking", "eng-1")
		sqlExec(t, db, ctx, `UPDATE tickets SET phase = 'asking', question = 'which branch?' WHERE id = $1`, tk.ID)
		got, ended, err := st.EndTicket(ctx, tk.ID, crewlet.TicketCancelled, "not needed")
		if err != nil || !ended || got.Phase != crewlet.TicketCancelled {
			t.Fatalf("EndTicket of an asking ticket: %q ended %v, %v; want cancelled", got.Phase, ended, err)
		}
	})

	t.Run("done", func(t *testing.T) {
		tk := newTicket(t, st, ctx, "end-done", "eng-1")
		if _, settled, err := st.SettleTicket(ctx, tk.ID, "done it"); err != nil || !settled {
			t.Fatal(settled, err)
		}
		got, ended, err := st.EndTicket(ctx, tk.ID, crewlet.TicketFailed, "late failure")
		if err != nil || ended || got.Phase != crewlet.TicketDone || got.Reply != "done it" || got.Reason != "" {
			t.Fatalf("EndTicket of a done ticket: phase %q reply %q reason %q ended %v, %v; want refused, still done", got.Phase, got.Reply, got.Reason, ended, err)
		}
	})

	for _, phase := range []crewlet.TicketPhase{crewlet.TicketPending, crewlet.TicketAsking, crewlet.TicketDone, "bogus", ""} {
		t.Run("target "+string(phase), func(t *testing.T) {
			tk := newTicket(t, st, ctx, "target-"+string(phase), "eng-1")
			_, ended, err := st.EndTicket(ctx, tk.ID, phase, "no")
			if crewlet.ErrorCode(err) != crewlet.EINVALID || ended {
				t.Fatalf("EndTicket into %q: ended %v, %v; want EINVALID", phase, ended, err)
			}
			if stored := mustTicket(t, st, ctx, tk.ID); stored.Phase != crewlet.TicketPending || stored.Reason != "" || stored.SettledAt != nil {
				t.Fatalf("after a refused EndTicket into %q: phase %q reason %q; want pending, untouched", phase, stored.Phase, stored.Reason)
			}
		})
	}

	if _, _, err := st.EndTicket(ctx, "t-000000000000", crewlet.TicketFailed, "x"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("EndTicket(unknown) = %v; want ENOTFOUND", err)
	}
}

// Tickets filters by delegator, target, phase and openness, newest first,
// at most Limit.
func TestTicketsFilter(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	type spec struct {
		key, from, to string
		phase         crewlet.TicketPhase
	}
	specs := []spec{ // oldest first
		{"a", "alice", "eng-1", crewlet.TicketPending},
		{"b", "alice", "eng-2", crewlet.TicketDone},
		{"c", "cto", "eng-1", crewlet.TicketAsking},
		{"d", "cto", "eng-2", crewlet.TicketFailed},
		{"e", "alice", "eng-1", crewlet.TicketCancelled},
		{"f", "cto", "eng-1", crewlet.TicketPending},
	}
	byKey := map[string]string{}
	base := time.Now().Add(-time.Hour).UTC()
	for i, s := range specs {
		tk, _, err := st.CreateTicket(ctx, s.key, crewlet.Ticket{From: s.from, To: s.to, Task: "task " + s.key, Conversation: "c"})
		if err != nil {
			t.Fatal(err)
		}
		byKey[s.key] = tk.ID
		switch s.phase {
		case crewlet.TicketDone:
			_, _, err = st.SettleTicket(ctx, tk.ID, "ok")
		case crewlet.TicketFailed, crewlet.TicketCancelled:
			_, _, err = st.EndTicket(ctx, tk.ID, s.phase, "r")
		case crewlet.TicketAsking:
			sqlExec(t, db, ctx, `UPDATE tickets SET phase = 'asking' WHERE id = $1`, tk.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
		// Creation times a minute apart, in the order of specs: ids are
		// hashes, so newest first can only come from the times.
		sqlExec(t, db, ctx, `UPDATE tickets SET created_at = $2 WHERE id = $1`, tk.ID, base.Add(time.Duration(i)*time.Minute))
	}
	want := func(keys ...string) string {
		var out []string
		for _, k := range keys {
			out = append(out, byKey[k])
		}
		return strings.Join(out, " ")
	}

	cases := []struct {
		name   string
		filter store.TicketFilter
		want   string
	}{
		{"all", store.TicketFilter{}, want("f", "e", "d", "c", "b", "a")},
		{"from alice", store.TicketFilter{From: "alice"}, want("e", "b", "a")},
		{"to eng-1", store.TicketFilter{To: "eng-1"}, want("f", "e", "c", "a")},
		{"from cto to eng-1", store.TicketFilter{From: "cto", To: "eng-1"}, want("f", "c")},
		{"phase pending", store.TicketFilter{Phase: crewlet.TicketPending}, want("f", "a")},
		{"phase done", store.TicketFilter{Phase: crewlet.TicketDone}, want("b")},
		{"open", store.TicketFilter{Open: true}, want("f", "c", "a")},
		{"open to eng-2", store.TicketFilter{To: "eng-2", Open: true}, ""},
		{"open from cto", store.TicketFilter{From: "cto", Open: true}, want("f", "c")},
		{"limit 2", store.TicketFilter{Limit: 2}, want("f", "e")},
		{"to eng-1 limit 3", store.TicketFilter{To: "eng-1", Limit: 3}, want("f", "e", "c")},
		{"nobody", store.TicketFilter{From: "bob"}, ""},
		{"after e limit 2", store.TicketFilter{Before: byKey["e"], Limit: 2}, want("d", "c")},
		{"open after f", store.TicketFilter{Open: true, Before: byKey["f"]}, want("c", "a")},
		{"after the oldest", store.TicketFilter{Before: byKey["a"]}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := st.Tickets(ctx, c.filter)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(ids(got), " ") != c.want {
				t.Fatalf("Tickets(%+v) = %v; want %s", c.filter, ids(got), c.want)
			}
		})
	}

	// Two tickets created in the same instant: a page at a time, each
	// after the last of the one before, reads every ticket once, in the
	// order of the whole list.
	for _, key := range []string{"g", "h"} {
		tk, _, err := st.CreateTicket(ctx, key, crewlet.Ticket{From: "cto", To: "eng-2", Task: "task " + key, Conversation: "c"})
		if err != nil {
			t.Fatal(err)
		}
		sqlExec(t, db, ctx, `UPDATE tickets SET created_at = $2 WHERE id = $1`, tk.ID, base.Add(time.Hour))
	}
	all, err := st.Tickets(ctx, store.TicketFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var paged []crewlet.Ticket
	for before := ""; ; {
		page, err := st.Tickets(ctx, store.TicketFilter{Before: before, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(page) == 0 {
			break
		}
		paged = append(paged, page...)
		before = page[0].ID
	}
	if got, want := strings.Join(ids(paged), " "), strings.Join(ids(all), " "); got != want || len(all) != 8 {
		t.Fatalf("read a ticket at a time: %s; want the whole list of 8 once: %s", got, want)
	}
}

// OpenTicketCounts counts pending and asking tickets only, per handle asked
// about.
func TestOpenTicketCounts(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	newTicket(t, st, ctx, "p1", "eng-1")
	asking := newTicket(t, st, ctx, "a1", "eng-1")
	sqlExec(t, db, ctx, `UPDATE tickets SET phase = 'asking' WHERE id = $1`, asking.ID)
	done := newTicket(t, st, ctx, "d1", "eng-1")
	if _, _, err := st.SettleTicket(ctx, done.ID, "ok"); err != nil {
		t.Fatal(err)
	}
	failed := newTicket(t, st, ctx, "f1", "eng-1")
	if _, _, err := st.EndTicket(ctx, failed.ID, crewlet.TicketFailed, "x"); err != nil {
		t.Fatal(err)
	}
	newTicket(t, st, ctx, "p2", "eng-2")
	expired := newTicket(t, st, ctx, "e2", "eng-2")
	if _, _, err := st.EndTicket(ctx, expired.ID, crewlet.TicketExpired, "x"); err != nil {
		t.Fatal(err)
	}
	newTicket(t, st, ctx, "p4", "eng-4") // not asked about

	got, err := st.OpenTicketCounts(ctx, []string{"eng-1", "eng-2", "eng-3"})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != "map[eng-1:2 eng-2:1]" {
		t.Fatalf("OpenTicketCounts = %v; want map[eng-1:2 eng-2:1] (pending + asking; eng-3 none, eng-4 not asked)", got)
	}
	if got, err := st.OpenTicketCounts(ctx, nil); err != nil || len(got) != 0 {
		t.Fatalf("OpenTicketCounts(no handles) = %v, %v; want empty", got, err)
	}
}

// FailTicketsTo fails the open tickets of one target, asking included, and
// returns them; other targets and ended tickets stay as they are.
func TestFailTicketsTo(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	pending := newTicket(t, st, ctx, "p1", "eng-1")
	asking := newTicket(t, st, ctx, "a1", "eng-1")
	sqlExec(t, db, ctx, `UPDATE tickets SET phase = 'asking', question = 'which one?' WHERE id = $1`, asking.ID)
	done := newTicket(t, st, ctx, "d1", "eng-1")
	if _, _, err := st.SettleTicket(ctx, done.ID, "shipped"); err != nil {
		t.Fatal(err)
	}
	cancelled := newTicket(t, st, ctx, "c1", "eng-1")
	if _, _, err := st.EndTicket(ctx, cancelled.ID, crewlet.TicketCancelled, "not needed"); err != nil {
		t.Fatal(err)
	}
	other := newTicket(t, st, ctx, "p2", "eng-2")

	failed, err := st.FailTicketsTo(ctx, "eng-1", "seat eng-1 was removed from the org and stopped")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sortedIDs(failed), sortedIDs([]crewlet.Ticket{pending, asking}); got != want {
		t.Fatalf("FailTicketsTo(eng-1) failed %s; want the pending and the asking one %s", got, want)
	}
	for _, tk := range failed {
		if tk.Phase != crewlet.TicketFailed || tk.Reason != "seat eng-1 was removed from the org and stopped" || tk.SettledAt == nil {
			t.Fatalf("returned ticket %s phase %q reason %q; want failed with the reason", tk.ID, tk.Phase, tk.Reason)
		}
	}
	for _, c := range []struct {
		id            string
		phase         crewlet.TicketPhase
		reason, reply string
	}{
		{pending.ID, crewlet.TicketFailed, "seat eng-1 was removed from the org and stopped", ""},
		{asking.ID, crewlet.TicketFailed, "seat eng-1 was removed from the org and stopped", ""},
		{done.ID, crewlet.TicketDone, "", "shipped"},
		{cancelled.ID, crewlet.TicketCancelled, "not needed", ""},
		{other.ID, crewlet.TicketPending, "", ""},
	} {
		got := mustTicket(t, st, ctx, c.id)
		if got.Phase != c.phase || got.Reason != c.reason || got.Reply != c.reply {
			t.Errorf("ticket %s after FailTicketsTo(eng-1): phase %q reason %q reply %q; want %q %q %q", c.id, got.Phase, got.Reason, got.Reply, c.phase, c.reason, c.reply)
		}
	}
	again, err := st.FailTicketsTo(ctx, "eng-1", "again")
	if err != nil || len(again) != 0 {
		t.Fatalf("FailTicketsTo(eng-1) again = %v, %v; want nothing more", ids(again), err)
	}
	if got := mustTicket(t, st, ctx, pending.ID); got.Reason != "seat eng-1 was removed from the org and stopped" {
		t.Fatalf("reason after a second FailTicketsTo = %q; want the first kept", got.Reason)
	}
}

// ExpireTickets ends the open tickets older than the age, expired, with a
// reason that names the age; younger and ended ones stay.
func TestExpireTickets(t *testing.T) {
	t.Parallel()
	st, db, ctx := setupWithConn(t)
	old := newTicket(t, st, ctx, "old", "eng-1")
	oldAsking := newTicket(t, st, ctx, "old-asking", "eng-2")
	young := newTicket(t, st, ctx, "young", "eng-1")
	oldDone := newTicket(t, st, ctx, "old-done", "eng-1")
	if _, _, err := st.SettleTicket(ctx, oldDone.ID, "done"); err != nil {
		t.Fatal(err)
	}
	oldFailed := newTicket(t, st, ctx, "old-failed", "eng-1")
	if _, _, err := st.EndTicket(ctx, oldFailed.ID, crewlet.TicketFailed, "broke"); err != nil {
		t.Fatal(err)
	}
	sqlExec(t, db, ctx, `UPDATE tickets SET phase = 'asking' WHERE id = $1`, oldAsking.ID)
	for _, id := range []string{old.ID, oldAsking.ID, oldDone.ID, oldFailed.ID} {
		sqlExec(t, db, ctx, `UPDATE tickets SET created_at = now() - interval '2 hours' WHERE id = $1`, id)
	}
	// An hour and a half leaves young (just made) and expires what is two
	// hours old; a fractional age must not be rounded to whole hours.
	sqlExec(t, db, ctx, `UPDATE tickets SET created_at = now() - interval '80 minutes' WHERE id = $1`, young.ID)

	expired, err := st.ExpireTickets(ctx, 90*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sortedIDs(expired), sortedIDs([]crewlet.Ticket{old, oldAsking}); got != want {
		t.Fatalf("ExpireTickets(90m) expired %s; want the two open ones older than 90m %s", got, want)
	}
	for _, tk := range expired {
		if tk.Phase != crewlet.TicketExpired || !strings.Contains(tk.Reason, "1h30m0s") || !strings.Contains(tk.Reason, "tickets.expire_after") {
			t.Fatalf("expired ticket %s phase %q reason %q; want expired with a reason naming 1h30m0s and tickets.expire_after", tk.ID, tk.Phase, tk.Reason)
		}
	}
	for _, c := range []struct {
		id    string
		phase crewlet.TicketPhase
	}{{young.ID, crewlet.TicketPending}, {oldDone.ID, crewlet.TicketDone}, {oldFailed.ID, crewlet.TicketFailed}} {
		if got := mustTicket(t, st, ctx, c.id); got.Phase != c.phase {
			t.Errorf("ticket %s after ExpireTickets: %q; want %q", c.id, got.Phase, c.phase)
		}
	}
	if again, err := st.ExpireTickets(ctx, 90*time.Minute); err != nil || len(again) != 0 {
		t.Fatalf("ExpireTickets again = %v, %v; want nothing more", ids(again), err)
	}
}

// A question takes a pending ticket to asking and its answer back to
// pending, the one move back; the same ask call again changes nothing; a
// second question from another call keeps the ticket, with the earlier
// answer cleared; a question that lapses returns the ticket to pending.
func TestAskAnswerAndChainedQuestions(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	tk := newTicket(t, st, ctx, "k-ask", "eng-1")

	asked, ok, err := st.AskTicket(ctx, tk.ID, "which config?", "w:1:0", "turn/eng-1/w")
	if err != nil || !ok || asked.Phase != crewlet.TicketAsking || asked.Question != "which config?" || asked.AskWaiter != "turn/eng-1/w" || asked.AskedAt == nil {
		t.Fatalf("AskTicket = %+v, %v, %v; want asking with the question and its waiter", asked, ok, err)
	}
	if again, ok, err := st.AskTicket(ctx, tk.ID, "which config?", "w:1:0", "turn/eng-1/w"); err != nil || ok || again.Phase != crewlet.TicketAsking || again.AskKey != "w:1:0" {
		t.Fatalf("the same ask again = %+v, %v, %v; want nothing changed", again, ok, err)
	}
	if _, settled, err := st.SettleTicket(ctx, tk.ID, "done anyway"); err != nil || !settled {
		// An asking ticket can still be settled: the serving turn answered.
		t.Fatalf("SettleTicket of an asking ticket: %v, %v; want settled", settled, err)
	}

	tk = newTicket(t, st, ctx, "k-chain", "eng-1")
	if _, ok, err := st.AskTicket(ctx, tk.ID, "first?", "w:1:0", "turn/eng-1/w"); err != nil || !ok {
		t.Fatalf("first ask: %v, %v", ok, err)
	}
	answered, ok, err := st.AnswerTicket(ctx, tk.ID, "yes", "ann", crewlet.AskNo)
	if err != nil || !ok || answered.Phase != crewlet.TicketPending || answered.Answer != "yes" || answered.AnsweredBy != "ann" {
		t.Fatalf("AnswerTicket = %+v, %v, %v; want pending with the answer and its answerer", answered, ok, err)
	}
	if _, ok, err := st.AnswerTicket(ctx, tk.ID, "again", "ann", crewlet.AskNo); err != nil || ok {
		t.Fatalf("answering with no question waiting: %v, %v; want refused", ok, err)
	}
	second, ok, err := st.AskTicket(ctx, tk.ID, "second?", "w:2:0", "turn/eng-1/w")
	if err != nil || !ok || second.Phase != crewlet.TicketAsking || second.Question != "second?" || second.Answer != "" || second.AnsweredBy != "" {
		t.Fatalf("chained ask = %+v, %v, %v; want asking the second question, the first answer and answerer cleared", second, ok, err)
	}
	lapsed, err := st.StopAsking(ctx, tk.ID, "w:2:0")
	if err != nil || lapsed.Phase != crewlet.TicketPending || lapsed.AskWaiter != "" || lapsed.Answer != "" {
		t.Fatalf("StopAsking unanswered = %+v, %v; want pending, no waiter, no answer", lapsed, err)
	}

	// A waiter is cleared by StopWaiting only if it is the one waiting,
	// and by ForgetWaiter when its turn ends.
	if w, waiting, err := st.WaitTicket(ctx, tk.ID, "turn/cto/x"); err != nil || !waiting || w.Waiter != "turn/cto/x" {
		t.Fatalf("WaitTicket = %+v, %v, %v", w, waiting, err)
	}
	if w, err := st.StopWaiting(ctx, tk.ID, "turn/cto/other"); err != nil || w.Waiter != "turn/cto/x" {
		t.Fatalf("StopWaiting by another turn = %+v, %v; want the waiter kept", w, err)
	}
	if err := st.ForgetWaiter(ctx, "turn/cto/x"); err != nil {
		t.Fatal(err)
	}
	if w := mustTicket(t, st, ctx, tk.ID); w.Waiter != "" {
		t.Fatalf("after ForgetWaiter: waiter %q; want none", w.Waiter)
	}
}
