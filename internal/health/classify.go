package health

import (
	"fmt"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
)

// Facts are what the monitor knows of one agent seat in one pass: its
// workflow as Temporal's list shows it, and its records in Postgres and
// Redis.
type Facts struct {
	Handle string
	// Prev and PrevCause are the seat's recorded health (unknown when it
	// has none).
	Prev      crewlet.SeatHealth
	PrevCause string
	// Status is the workflow status the list showed, StatusAbsent when it
	// ran none; StatusSince is since when the monitor has seen it.
	Status      crewlet.SeatStatus
	StatusSince time.Time
	// Unplaceable says no live node matches the seat's placement.
	Unplaceable bool
	// Unproven is the node and how long a teardown of the seat's MCP
	// servers has gone unproven there, if one has.
	UnprovenNode string
	Unproven     time.Duration
	// Turns are its latest turns, newest first.
	Turns []store.TurnFact
	// Waits are its turns' waits on tickets, oldest first; OnPerson says
	// which of them wait on a person rather than a seat.
	Waits    []store.WaitFact
	OnPerson map[string]bool
	// DeadLetters counts its triggers dead-lettered within the window.
	DeadLetters int
	Backlog     crewlet.Backlog
	// Budget is the cap that holds its turns, if one does.
	Budget *crewlet.BudgetHold
	// ProfileHeldSince is since when a turn of the seat waits for a
	// profile of its pool (every one out); zero when none does.
	ProfileHeldSince time.Time
}

// finding is one state that applies, with its cause.
type finding struct {
	state crewlet.SeatHealth
	cause string
}

// Classify returns the seat's health and its cause at now. Every state
// that applies is found; the one first in crewlet.HealthStates is the
// seat's, and the cause names the others after "also:". A seat whose
// workflow has been missing for less than health.gone_after keeps its
// recorded state (unknown, for a seat not yet classified): one missing run
// in a list is not yet a gone seat.
func Classify(f Facts, th config.Health, now time.Time) (crewlet.SeatHealth, string) {
	if f.Status == crewlet.StatusAbsent && now.Sub(f.StatusSince) < th.GoneAfter {
		return f.Prev, f.PrevCause
	}
	var found []finding
	add := func(state crewlet.SeatHealth, format string, args ...any) {
		found = append(found, finding{state, fmt.Sprintf(format, args...)})
	}
	since := func(t time.Time) string { return now.Sub(t).Round(time.Second).String() }

	if f.Status == crewlet.StatusAbsent {
		add(crewlet.HealthGone, "no seat workflow runs in Temporal (missing for %s)", since(f.StatusSince))
	}
	if f.Unproven > 0 {
		add(crewlet.HealthUnprovenTeardown, "its MCP servers on node %s would not stop for %s", f.UnprovenNode, f.Unproven.Round(time.Second))
	}
	// A seat in status unplaceable waits for a node like one establishing:
	// with none matching its labels it is unplaceable at once; with some
	// that refuse it or are full, it is establishing too long once past
	// the bound, and its own last_error says which (asking the seat here
	// would be a call per seat).
	placing := f.Status == crewlet.StatusEstablishing || f.Status == crewlet.StatusUnplaceable
	switch {
	case placing && f.Unplaceable:
		add(crewlet.HealthUnplaceable, "no live node matches its placement labels (%s for %s)", f.Status, since(f.StatusSince))
	case placing && now.Sub(f.StatusSince) > th.EstablishingAfter && f.Status == crewlet.StatusUnplaceable:
		add(crewlet.HealthEstablishing, "no node took it for %s (health.establishing_after %s): the nodes that match it refused it or are full; its state's last_error says why (crewlet seats show %s)",
			since(f.StatusSince), th.EstablishingAfter, f.Handle)
	case placing && now.Sub(f.StatusSince) > th.EstablishingAfter:
		add(crewlet.HealthEstablishing, "establishing for %s (health.establishing_after %s)", since(f.StatusSince), th.EstablishingAfter)
	}
	current, failed := turnsOf(f)
	if len(failed) >= th.FailingTurns {
		add(crewlet.HealthFailing, "its last %d turns failed; latest %s", th.FailingTurns, failed[0])
	}
	if f.DeadLetters >= th.DeadLetters {
		add(crewlet.HealthDeadLetters, "%d triggers dead-lettered in the last %s (health.dead_letters %d)", f.DeadLetters, th.DeadLetterWindow, th.DeadLetters)
	}
	if current != nil && len(f.Waits) == 0 && f.ProfileHeldSince.IsZero() && now.Sub(current.StartedAt) > th.TurnOverrun {
		add(crewlet.HealthOverrunning, "turn %s has run for %s (health.turn_overrun %s)", current.TurnID, since(current.StartedAt), th.TurnOverrun)
	}
	if b := f.Backlog; b.Waiting > int64(th.Backlog) {
		add(crewlet.HealthBacklog, "%d messages waiting (health.backlog %d)", b.Waiting, th.Backlog)
	} else if !b.Oldest.IsZero() && now.Sub(b.Oldest) > th.OldestUnread {
		add(crewlet.HealthBacklog, "the oldest unanswered message has waited %s (health.oldest_unread %s)", since(b.Oldest), th.OldestUnread)
	}
	if h := f.Budget; h != nil && h.Unit == crewlet.UnitNanoUSD {
		// A money hold's cap and used are nano-dollars: its reason says them.
		add(crewlet.HealthHeld, "%s", h.Reason)
	} else if h != nil {
		add(crewlet.HealthHeld, "the %s %s budget is spent (%d of %d tokens) until %s", h.Scope, h.Window, h.Used, h.Cap, h.ResetsAt.UTC().Format(time.RFC3339))
	}
	if !f.ProfileHeldSince.IsZero() {
		add(crewlet.HealthHeld, "a turn has waited %s for a profile: none of its pool can take it (quarantined, cooling off, full or switched off; crewlet profiles)", since(f.ProfileHeldSince))
	}
	switch f.Status {
	case crewlet.StatusPaused:
		add(crewlet.HealthPaused, "paused")
	case crewlet.StatusDrained:
		add(crewlet.HealthPaused, "drained")
	}
	for _, w := range f.Waits {
		kind := "seat"
		if f.OnPerson[w.On] {
			kind = "person"
		}
		add(crewlet.HealthWaiting, "waiting on ticket %s (%s %s) for %s", w.Ticket, kind, w.On, since(w.Since))
		break // the longest wait speaks for the others
	}
	if len(found) == 0 {
		return crewlet.HealthOK, ""
	}
	best := 0
	for i, x := range found {
		if rank(x.state) < rank(found[best].state) {
			best = i
		}
	}
	cause := found[best].cause
	var also []string
	for i, x := range found {
		if i != best {
			also = append(also, string(x.state)+": "+x.cause)
		}
	}
	if len(also) > 0 {
		cause += "; also: " + strings.Join(also, "; ")
	}
	return found[best].state, cause
}

// turnsOf returns the seat's turn in flight, if any, and the notes of its
// latest turns that failed, newest first, up to the first that did not.
// A turn still "running" that is not the one in flight was left by a turn
// that failed before it could finish: its triggers were redelivered or
// dead-lettered.
func turnsOf(f Facts) (current *store.TurnFact, failed []string) {
	turns := f.Turns
	if len(turns) > 0 && turns[0].Status == turnRunning && f.Status == crewlet.StatusRunning {
		current, turns = &turns[0], turns[1:]
	}
	for _, t := range turns {
		switch t.Status {
		case crewlet.TurnFailed:
			failed = append(failed, fmt.Sprintf("%s: %s", t.TurnID, clip(t.Note)))
		case turnRunning:
			failed = append(failed, t.TurnID+": ended before it finished")
		default:
			return current, failed
		}
	}
	return current, failed
}

func clip(s string) string {
	const most = 200
	if len(s) <= most {
		return s
	}
	return s[:most] + "…"
}

// rank is a state's place in crewlet.HealthStates.
func rank(s crewlet.SeatHealth) int {
	for i, x := range crewlet.HealthStates {
		if x == s {
			return i
		}
	}
	return len(crewlet.HealthStates)
}

// turnRunning is a turn row not yet finished (store.OpenTurn's status).
const turnRunning crewlet.TurnStatus = "running"
