// Package budget computes budget windows and decides whether a cap holds a
// seat's turns (docs/architecture.md, "A turn") and when a money budget asks
// (docs/architecture.md, "Cost"). It does no I/O: the store counts tokens
// and money, this package says which window a count belongs to and what it
// means.
package budget

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/prices"
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
// usage, caps, ask and ResetsAt (as the store's Usage returns them).
//
// A window holds when its token cap or its money cap is reached, when its
// money question was answered no, or when it has a money cap and usage no
// price was found for: the seat cannot prove it is under that cap.
//
// When several caps are reached the turn may run only once all of them have
// reset, so the hold is the reached cap whose window resets last; among caps
// resetting at the same instant the first in the given order wins (the store
// orders seat before company, day before week before month; tokens before
// money in one window).
func Check(windows []crewlet.UsageWindow) *crewlet.BudgetHold {
	var hold *crewlet.BudgetHold
	for _, w := range windows {
		h := windowHold(w)
		if h == nil || (hold != nil && !w.ResetsAt.After(hold.ResetsAt)) {
			continue
		}
		hold = h
	}
	return hold
}

// windowHold is what holds one window's seats, or nil.
func windowHold(w crewlet.UsageWindow) *crewlet.BudgetHold {
	whose := "the seat's"
	if w.Scope == crewlet.ScopeCompany {
		whose = "the company's"
	}
	until := "turns wait until the window turns at " + w.ResetsAt.Format("2006-01-02 15:04 MST")
	money := &crewlet.BudgetHold{Scope: w.Scope, Window: w.Window, Unit: crewlet.UnitNanoUSD, Cap: w.CapNanoUSD, Used: w.UsedNanoUSD, ResetsAt: w.ResetsAt}
	switch {
	case w.Over():
		return &crewlet.BudgetHold{Scope: w.Scope, Window: w.Window, Unit: crewlet.UnitTokens, Cap: w.Cap, Used: w.Used, ResetsAt: w.ResetsAt,
			Reason: fmt.Sprintf("%s %s budget of %d tokens is spent (%d used); %s", whose, w.Window, w.Cap, w.Used, until)}
	case w.OverMoney():
		money.Reason = fmt.Sprintf("%s %s budget of %s is spent (%s used); %s", whose, w.Window, USD(w.CapNanoUSD), USD(w.UsedNanoUSD), until)
		return money
	case w.CapNanoUSD > 0 && w.Ask != nil && w.Ask.Decision == crewlet.AskNo:
		money.Reason = fmt.Sprintf("%s answered no to going on past %s of %s %s budget of %s (ticket %s); %s",
			w.Ask.AnsweredBy, USD(w.Ask.UsedNanoUSD), whose, w.Window, USD(w.CapNanoUSD), w.Ask.Ticket, until)
		return money
	case w.CapNanoUSD > 0 && w.UnpricedTokens > 0:
		them := "it"
		if len(w.UnpricedModels) > 1 {
			them = "them"
		}
		money.Reason = fmt.Sprintf("%s; add %s to prices: in the org file. %s %s budget of %s cannot be proven kept while the window holds usage without a price: %s",
			unpricedText(w), them, capitalize(whose), w.Window, USD(w.CapNanoUSD), until)
		return money
	}
	return nil
}

// unpricedText names the window's unpriced tokens and their models.
func unpricedText(w crewlet.UsageWindow) string {
	if len(w.UnpricedModels) == 0 {
		return fmt.Sprintf("%d tokens have no price", w.UnpricedTokens)
	}
	parts := make([]string, len(w.UnpricedModels))
	for i, m := range w.UnpricedModels {
		parts[i] = fmt.Sprintf("%d tokens of model %s", m.Tokens, m.Model)
	}
	return strings.Join(parts, ", ") + " have no price"
}

func capitalize(s string) string { return strings.ToUpper(s[:1]) + s[1:] }

// USD formats nano-dollars as dollars: cents, or more digits below a cent.
func USD(nano int64) string {
	usd := prices.USD(nano)
	if nano != 0 && nano < 10_000_000 && nano > -10_000_000 {
		return "$" + strconv.FormatFloat(usd, 'f', -1, 64)
	}
	return fmt.Sprintf("$%.2f", usd)
}

// AskDue reports whether a window with an ask policy has reached the share
// of its money cap at which it asks, and has not asked yet.
func AskDue(w crewlet.UsageWindow, policy *crewlet.BudgetAskPolicy) bool {
	if policy == nil || w.CapNanoUSD <= 0 || w.Ask != nil {
		return false
	}
	return float64(w.UsedNanoUSD) >= policy.At*float64(w.CapNanoUSD)
}

// AskQuestion is the question a window's ticket puts to the asked seat;
// seat is the seat whose turn found the window at its share.
func AskQuestion(seat string, w crewlet.UsageWindow) string {
	who, goOn := seat, "May it go on to the cap?"
	if w.Scope == crewlet.ScopeCompany {
		who, goOn = "The company", fmt.Sprintf("May its seats go on to the cap? (%s's turn found it there.)", seat)
	}
	return fmt.Sprintf("%s has spent %s of its %s budget of %s (the window turns at %s). %s "+
		"Answer yes to let it run on to %s; an answer that does not begin with yes holds its turns until the window turns.",
		who, USD(w.UsedNanoUSD), w.Window, USD(w.CapNanoUSD), w.ResetsAt.Format("2006-01-02 15:04 MST"), goOn, USD(w.CapNanoUSD))
}

// ReadAnswer reads an answer to a budget question: yes when its first word
// is yes, y, ok, okay, approve(d), allow(ed) or go; anything else is no,
// since an answer that is not clearly yes must not spend money.
func ReadAnswer(answer string) string {
	first := strings.FieldsFunc(strings.ToLower(answer), func(r rune) bool { return !unicode.IsLetter(r) })
	if len(first) > 0 {
		switch first[0] {
		case "yes", "y", "ok", "okay", "approve", "approved", "allow", "allowed", "go":
			return crewlet.AskYes
		}
	}
	return crewlet.AskNo
}

// UsageWindows returns the six windows a seat's turns are checked against,
// seat day, week, month then company day, week, month, with their caps and
// bounds and their usage left at 0 for the caller to fill.
func UsageWindows(seatCaps, companyCaps crewlet.BudgetCaps, now time.Time, loc *time.Location) []crewlet.UsageWindow {
	out := make([]crewlet.UsageWindow, 0, 2*len(Names))
	for _, scope := range []struct {
		name string
		caps crewlet.BudgetCaps
	}{{crewlet.ScopeSeat, seatCaps}, {crewlet.ScopeCompany, companyCaps}} {
		for _, w := range Windows(now, loc) {
			out = append(out, crewlet.UsageWindow{
				Scope: scope.name, Window: w.Name, Start: w.Start, ResetsAt: w.End,
				Cap: scope.caps.Cap(w.Name), CapNanoUSD: scope.caps.MoneyCap(w.Name),
			})
		}
	}
	return out
}
