package health

import (
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
)

var thresholds = config.Health{
	EstablishingAfter: 2 * time.Minute, GoneAfter: time.Minute, TurnOverrun: 10 * time.Minute,
	Backlog: 5, OldestUnread: 15 * time.Minute, FailingTurns: 3, DeadLetters: 3, DeadLetterWindow: time.Hour,
}

func TestClassify(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	turn := func(id string, status crewlet.TurnStatus, started time.Duration) store.TurnFact {
		return store.TurnFact{TurnID: id, Status: status, StartedAt: ago(started), Note: "note of " + id}
	}
	idle := func(f Facts) Facts {
		if f.Status == "" {
			f.Status = crewlet.StatusIdle
		}
		if f.StatusSince.IsZero() {
			f.StatusSince = ago(time.Hour)
		}
		if f.Prev == "" {
			f.Prev = crewlet.HealthOK
		}
		return f
	}
	for _, tc := range []struct {
		name  string
		facts Facts
		want  crewlet.SeatHealth
		cause []string
	}{
		{"idle with nothing wrong", Facts{}, crewlet.HealthOK, nil},
		{"finished turns are no failure", Facts{Turns: []store.TurnFact{turn("t3", crewlet.TurnDone, time.Minute), turn("t2", crewlet.TurnFailed, 2*time.Minute)}},
			crewlet.HealthOK, nil},
		{"missing for less than gone_after keeps its state", Facts{Status: crewlet.StatusAbsent, StatusSince: ago(30 * time.Second), Prev: crewlet.HealthPaused, PrevCause: "paused"},
			crewlet.HealthPaused, []string{"paused"}},
		{"missing and never classified stays unknown", Facts{Status: crewlet.StatusAbsent, StatusSince: now, Prev: crewlet.HealthUnknown},
			crewlet.HealthUnknown, nil},
		{"missing past gone_after is gone", Facts{Status: crewlet.StatusAbsent, StatusSince: ago(2 * time.Minute)},
			crewlet.HealthGone, []string{"no seat workflow runs in Temporal (missing for 2m0s)"}},
		{"unproven teardown", Facts{UnprovenNode: "n2", Unproven: 90 * time.Second},
			crewlet.HealthUnprovenTeardown, []string{"node n2 would not stop for 1m30s"}},
		{"unplaceable while establishing", Facts{Status: crewlet.StatusEstablishing, StatusSince: ago(10 * time.Second), Unplaceable: true},
			crewlet.HealthUnplaceable, []string{"no live node matches its placement labels"}},
		{"unplaceable, matching no node", Facts{Status: crewlet.StatusUnplaceable, StatusSince: ago(10 * time.Second), Unplaceable: true},
			crewlet.HealthUnplaceable, []string{"no live node matches its placement labels (unplaceable for 10s)"}},
		{"unplaceable briefly, with nodes matching, is ok", Facts{Status: crewlet.StatusUnplaceable, StatusSince: ago(time.Minute)}, crewlet.HealthOK, nil},
		{"unplaceable too long, refused by the nodes it matches", Facts{Handle: "eng", Status: crewlet.StatusUnplaceable, StatusSince: ago(3 * time.Minute)},
			crewlet.HealthEstablishing, []string{"no node took it for 3m0s", "last_error says why (crewlet seats show eng)"}},
		{"establishing briefly is ok", Facts{Status: crewlet.StatusEstablishing, StatusSince: ago(time.Minute)}, crewlet.HealthOK, nil},
		{"establishing too long", Facts{Status: crewlet.StatusEstablishing, StatusSince: ago(3 * time.Minute)},
			crewlet.HealthEstablishing, []string{"establishing for 3m0s"}},
		{"failing: the last three turns failed or were left unfinished", Facts{Turns: []store.TurnFact{
			turn("t4", "running", time.Minute), turn("t3", crewlet.TurnFailed, 2*time.Minute), turn("t2", crewlet.TurnFailed, 3*time.Minute), turn("t1", crewlet.TurnDone, 4*time.Minute)}},
			crewlet.HealthFailing, []string{"last 3 turns failed; latest t4: ended before it finished"}},
		{"the turn in flight is not a failure", Facts{Status: crewlet.StatusRunning, Turns: []store.TurnFact{
			turn("t4", "running", time.Minute), turn("t3", crewlet.TurnFailed, 2*time.Minute), turn("t2", crewlet.TurnFailed, 3*time.Minute), turn("t1", crewlet.TurnDone, 4*time.Minute)}},
			crewlet.HealthOK, nil},
		{"dead letters rising", Facts{DeadLetters: 3}, crewlet.HealthDeadLetters, []string{"3 triggers dead-lettered in the last 1h0m0s"}},
		{"turn overrunning", Facts{Status: crewlet.StatusRunning, Turns: []store.TurnFact{turn("t9", "running", 11*time.Minute)}},
			crewlet.HealthOverrunning, []string{"turn t9 has run for 11m0s"}},
		{"a long turn waiting on a ticket is waiting, not overrunning", Facts{Status: crewlet.StatusRunning,
			Turns: []store.TurnFact{turn("t9", "running", 11*time.Minute)},
			Waits: []store.WaitFact{{Ticket: "t-1", On: "alice", Since: ago(10 * time.Minute)}}, OnPerson: map[string]bool{"alice": true}},
			crewlet.HealthWaiting, []string{"waiting on ticket t-1 (person alice) for 10m0s"}},
		{"backlog by count", Facts{Backlog: crewlet.Backlog{Waiting: 6, Oldest: ago(time.Minute)}}, crewlet.HealthBacklog, []string{"6 messages waiting"}},
		{"backlog by age", Facts{Backlog: crewlet.Backlog{Waiting: 1, Oldest: ago(20 * time.Minute)}}, crewlet.HealthBacklog, []string{"waited 20m0s"}},
		{"held by a budget", Facts{Budget: &crewlet.BudgetHold{Scope: "seat", Window: "day", Cap: 10, Used: 12, ResetsAt: now.Add(time.Hour)}},
			crewlet.HealthHeld, []string{"the seat day budget is spent (12 of 10 tokens)"}},
		{"held by a money budget", Facts{Budget: &crewlet.BudgetHold{Scope: "seat", Window: "day", Unit: crewlet.UnitNanoUSD, Cap: 1e9, Used: 12e8,
			ResetsAt: now.Add(time.Hour), Reason: "the seat's day budget of $1.00 is spent ($1.20 used)"}},
			crewlet.HealthHeld, []string{"the seat's day budget of $1.00 is spent ($1.20 used)"}},
		{"held for a profile, its long turn not overrunning", Facts{Status: crewlet.StatusRunning, ProfileHeldSince: ago(20 * time.Minute),
			Turns: []store.TurnFact{turn("t-held", "running", 30*time.Minute)}},
			crewlet.HealthHeld, []string{"a turn has waited 20m0s for a profile"}},
		{"paused", Facts{Status: crewlet.StatusPaused}, crewlet.HealthPaused, []string{"paused"}},
		{"drained counts as paused", Facts{Status: crewlet.StatusDrained}, crewlet.HealthPaused, []string{"drained"}},
		{"waiting on a seat", Facts{Waits: []store.WaitFact{{Ticket: "t-2", On: "eng", Since: ago(time.Minute)}}},
			crewlet.HealthWaiting, []string{"(seat eng) for 1m0s"}},
		{"precedence: backlog over paused, which the cause still names", Facts{Status: crewlet.StatusPaused, Backlog: crewlet.Backlog{Waiting: 9}},
			crewlet.HealthBacklog, []string{"9 messages waiting", "also: paused: paused"}},
		{"precedence: failing over dead letters", Facts{DeadLetters: 5, Turns: []store.TurnFact{
			turn("a", crewlet.TurnFailed, time.Minute), turn("b", crewlet.TurnFailed, 2*time.Minute), turn("c", crewlet.TurnFailed, 3*time.Minute)}},
			crewlet.HealthFailing, []string{"also: dead_letters_rising"}},
		{"precedence: gone over everything", Facts{Status: crewlet.StatusAbsent, StatusSince: ago(time.Hour), Backlog: crewlet.Backlog{Waiting: 9}},
			crewlet.HealthGone, []string{"also: backlog"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, cause := Classify(idle(tc.facts), thresholds, now)
			if got != tc.want {
				t.Fatalf("state %s (%s); want %s", got, cause, tc.want)
			}
			for _, c := range tc.cause {
				if !strings.Contains(cause, c) {
					t.Errorf("cause %q lacks %q", cause, c)
				}
			}
		})
	}
}

// The states are ranked once, and only gone fails tickets.
func TestHealthStatesRankAndTerminal(t *testing.T) {
	t.Parallel()
	seen := map[crewlet.SeatHealth]bool{}
	for _, s := range crewlet.HealthStates {
		if seen[s] {
			t.Errorf("%s listed twice", s)
		}
		seen[s] = true
		if s.Terminal() != (s == crewlet.HealthGone) {
			t.Errorf("%s.Terminal() = %v", s, s.Terminal())
		}
	}
}
