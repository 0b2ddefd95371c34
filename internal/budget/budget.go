// Package budget computes token budget windows and decides whether a cap holds
// a seat's turns (docs/architecture.md, "A turn"). It does no I/O: the store
// counts tokens, this package says which window a count belongs to and what it
// means.
package budget

import (
	"time"

	"github.com/crewlet/crewlet"
)

// Names lists the budget windows, shortest first.
var Names = []string{crewlet.WindowDay, crewlet.WindowWeek, crewlet.WindowMonth}

// Window is one budget window: [Start, End) on the company's clock.
type Window struct {
	Name  string
	Start time.Time
	End   time.Time
}

// Windows returns the day, week and month windows that contain now on loc.
func Windows(now time.Time, loc *time.Location) []Window {
	out := make([]Window, 0, len(Names))
	for _, name := range Names {
		start, end := Bounds(name, now, loc)
		out = append(out, Window{Name: name, Start: start, End: end})
	}
	return out
}

// Bounds returns the start and end of the window that contains now on loc: a
// day runs from local midnight to the next, a week from Monday 00:00 (ISO), a
// month from the 1st 00:00. Bounds are built with time.Date in loc rather
// than by adding hours, so a 23- or 25-hour DST day ends at midnight. A nil
// loc is UTC; an unknown window returns zero times.
func Bounds(window string, now time.Time, loc *time.Location) (start, end time.Time) {
	if loc == nil {
		loc = time.UTC
	}
	t := now.In(loc)
	y, m, d := t.Date()
	switch window {
	case crewlet.WindowDay:
		return time.Date(y, m, d, 0, 0, 0, 0, loc), time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	case crewlet.WindowWeek:
		back := (int(t.Weekday()) + 6) % 7 // days since Monday
		return time.Date(y, m, d-back, 0, 0, 0, 0, loc), time.Date(y, m, d-back+7, 0, 0, 0, 0, loc)
	case crewlet.WindowMonth:
		return time.Date(y, m, 1, 0, 0, 0, 0, loc), time.Date(y, m+1, 1, 0, 0, 0, 0, loc)
	}
	return time.Time{}, time.Time{}
}

// Check returns the hold on a seat's turns, or nil when no cap is reached.
// windows are the seat's and the company's current windows, each with its
// Used, Cap and ResetsAt (as the store's Usage returns them).
//
// When several caps are reached the turn may run only once all of them have
// reset, so the hold is the reached cap whose window resets last; among caps
// resetting at the same instant the first in the given order wins (the store
// orders seat before company, day before week before month).
func Check(windows []crewlet.UsageWindow) *crewlet.BudgetHold {
	var hold *crewlet.BudgetHold
	for _, w := range windows {
		if !w.Over() {
			continue
		}
		if hold != nil && !w.ResetsAt.After(hold.ResetsAt) {
			continue
		}
		hold = &crewlet.BudgetHold{Scope: w.Scope, Window: w.Window, Cap: w.Cap, Used: w.Used, ResetsAt: w.ResetsAt}
	}
	return hold
}

// UsageWindows returns the six windows a seat's turns are checked against,
// seat day, week, month then company day, week, month, with their caps and
// bounds and Used left at 0 for the caller to fill.
func UsageWindows(seatCaps, companyCaps crewlet.BudgetCaps, now time.Time, loc *time.Location) []crewlet.UsageWindow {
	out := make([]crewlet.UsageWindow, 0, 2*len(Names))
	for _, scope := range []struct {
		name string
		caps crewlet.BudgetCaps
	}{{crewlet.ScopeSeat, seatCaps}, {crewlet.ScopeCompany, companyCaps}} {
		for _, w := range Windows(now, loc) {
			out = append(out, crewlet.UsageWindow{
				Scope: scope.name, Window: w.Name, Start: w.Start, ResetsAt: w.End, Cap: scope.caps.Cap(w.Name),
			})
		}
	}
	return out
}
