package budget_test

import (
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/budget"
)

func berlin(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Fatalf("load Europe/Berlin: %v", err)
	}
	return loc
}

func TestBounds(t *testing.T) {
	t.Parallel()
	ber := berlin(t)
	at := func(loc *time.Location, y int, m time.Month, d, h, min int) time.Time {
		return time.Date(y, m, d, h, min, 0, 0, loc)
	}
	tests := []struct {
		name         string
		window       string
		now          time.Time
		loc          *time.Location
		start, end   time.Time
		wantDuration time.Duration
	}{
		{"spring-forward day is 23h", crewlet.WindowDay, at(ber, 2026, 3, 29, 12, 0), ber,
			at(ber, 2026, 3, 29, 0, 0), at(ber, 2026, 3, 30, 0, 0), 23 * time.Hour},
		{"fall-back day is 25h", crewlet.WindowDay, at(ber, 2026, 10, 25, 23, 59), ber,
			at(ber, 2026, 10, 25, 0, 0), at(ber, 2026, 10, 26, 0, 0), 25 * time.Hour},
		{"late evening local is still that local day, though UTC is already the next", crewlet.WindowDay,
			at(time.UTC, 2026, 6, 30, 22, 30), ber, at(ber, 2026, 7, 1, 0, 0), at(ber, 2026, 7, 2, 0, 0), 24 * time.Hour},
		{"midnight starts its own day", crewlet.WindowDay, at(ber, 2026, 3, 30, 0, 0), ber,
			at(ber, 2026, 3, 30, 0, 0), at(ber, 2026, 3, 31, 0, 0), 24 * time.Hour},
		{"week with the spring-forward Sunday", crewlet.WindowWeek, at(ber, 2026, 3, 29, 23, 0), ber,
			at(ber, 2026, 3, 23, 0, 0), at(ber, 2026, 3, 30, 0, 0), 7*24*time.Hour - time.Hour},
		{"Monday starts the week", crewlet.WindowWeek, at(ber, 2026, 10, 26, 0, 0), ber,
			at(ber, 2026, 10, 26, 0, 0), at(ber, 2026, 11, 2, 0, 0), 7 * 24 * time.Hour},
		{"week across the year boundary", crewlet.WindowWeek, at(ber, 2027, 1, 2, 10, 0), ber,
			at(ber, 2026, 12, 28, 0, 0), at(ber, 2027, 1, 4, 0, 0), 7 * 24 * time.Hour},
		{"Sunday belongs to the week before", crewlet.WindowWeek, at(time.UTC, 2026, 1, 4, 12, 0), time.UTC,
			at(time.UTC, 2025, 12, 29, 0, 0), at(time.UTC, 2026, 1, 5, 0, 0), 7 * 24 * time.Hour},
		{"month end", crewlet.WindowMonth, at(ber, 2026, 1, 31, 23, 59), ber,
			at(ber, 2026, 1, 1, 0, 0), at(ber, 2026, 2, 1, 0, 0), 31 * 24 * time.Hour},
		{"February of a non-leap year", crewlet.WindowMonth, at(ber, 2026, 2, 28, 12, 0), ber,
			at(ber, 2026, 2, 1, 0, 0), at(ber, 2026, 3, 1, 0, 0), 28 * 24 * time.Hour},
		{"month with the fall-back day", crewlet.WindowMonth, at(ber, 2026, 10, 31, 23, 30), ber,
			at(ber, 2026, 10, 1, 0, 0), at(ber, 2026, 11, 1, 0, 0), 31*24*time.Hour + time.Hour},
		{"December into January", crewlet.WindowMonth, at(ber, 2026, 12, 31, 23, 0), ber,
			at(ber, 2026, 12, 1, 0, 0), at(ber, 2027, 1, 1, 0, 0), 31 * 24 * time.Hour},
		{"nil location is UTC", crewlet.WindowDay, at(ber, 2026, 7, 1, 1, 0), nil,
			at(time.UTC, 2026, 6, 30, 0, 0), at(time.UTC, 2026, 7, 1, 0, 0), 24 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start, end := budget.Bounds(tt.window, tt.now, tt.loc)
			if !start.Equal(tt.start) || !end.Equal(tt.end) {
				t.Fatalf("Bounds(%s, %v) = [%v, %v); want [%v, %v)", tt.window, tt.now, start, end, tt.start, tt.end)
			}
			if got := end.Sub(start); got != tt.wantDuration {
				t.Fatalf("window lasts %v; want %v", got, tt.wantDuration)
			}
			if tt.now.Before(start) || !tt.now.Before(end) {
				t.Fatalf("now %v is outside [%v, %v)", tt.now, start, end)
			}
		})
	}
}

func TestBoundsUnknownWindow(t *testing.T) {
	t.Parallel()
	start, end := budget.Bounds("year", time.Now(), time.UTC)
	if !start.IsZero() || !end.IsZero() {
		t.Fatalf("Bounds(year) = %v, %v; want zero times", start, end)
	}
}

func TestUsageWindows(t *testing.T) {
	t.Parallel()
	ber := berlin(t)
	now := time.Date(2026, 3, 29, 12, 0, 0, 0, ber)
	ws := budget.UsageWindows(crewlet.BudgetCaps{TokensPerDay: 10}, crewlet.BudgetCaps{TokensPerMonth: 1000}, now, ber)
	want := []struct {
		scope, window string
		cap           int64
		start         time.Time
	}{
		{crewlet.ScopeSeat, crewlet.WindowDay, 10, time.Date(2026, 3, 29, 0, 0, 0, 0, ber)},
		{crewlet.ScopeSeat, crewlet.WindowWeek, 0, time.Date(2026, 3, 23, 0, 0, 0, 0, ber)},
		{crewlet.ScopeSeat, crewlet.WindowMonth, 0, time.Date(2026, 3, 1, 0, 0, 0, 0, ber)},
		{crewlet.ScopeCompany, crewlet.WindowDay, 0, time.Date(2026, 3, 29, 0, 0, 0, 0, ber)},
		{crewlet.ScopeCompany, crewlet.WindowWeek, 0, time.Date(2026, 3, 23, 0, 0, 0, 0, ber)},
		{crewlet.ScopeCompany, crewlet.WindowMonth, 1000, time.Date(2026, 3, 1, 0, 0, 0, 0, ber)},
	}
	if len(ws) != len(want) {
		t.Fatalf("got %d windows; want %d", len(ws), len(want))
	}
	for i, w := range want {
		got := ws[i]
		if got.Scope != w.scope || got.Window != w.window || got.Cap != w.cap || !got.Start.Equal(w.start) || got.Used != 0 {
			t.Errorf("window %d = %+v; want %s %s cap %d from %v, used 0", i, got, w.scope, w.window, w.cap, w.start)
		}
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC)
	week := time.Date(2026, 4, 6, 0, 0, 0, 0, time.UTC)
	month := time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC)
	w := func(scope, window string, used, cap int64, resets time.Time) crewlet.UsageWindow {
		return crewlet.UsageWindow{Scope: scope, Window: window, Used: used, Cap: cap, ResetsAt: resets}
	}
	under := []crewlet.UsageWindow{
		w(crewlet.ScopeSeat, crewlet.WindowDay, 99, 100, day),
		w(crewlet.ScopeSeat, crewlet.WindowWeek, 500, 0, week),
		w(crewlet.ScopeSeat, crewlet.WindowMonth, 0, 0, month),
		w(crewlet.ScopeCompany, crewlet.WindowDay, 1e6, 0, day),
		w(crewlet.ScopeCompany, crewlet.WindowWeek, 10, 20, week),
		w(crewlet.ScopeCompany, crewlet.WindowMonth, 10, 20, month),
	}
	with := func(i int, used int64) []crewlet.UsageWindow {
		out := append([]crewlet.UsageWindow(nil), under...)
		out[i].Used = used
		return out
	}
	tests := []struct {
		name    string
		windows []crewlet.UsageWindow
		want    *crewlet.BudgetHold
	}{
		{"nothing reached, uncapped usage ignored", under, nil},
		{"no windows", nil, nil},
		{"seat day reached exactly", with(0, 100),
			&crewlet.BudgetHold{Unit: crewlet.UnitTokens, Scope: crewlet.ScopeSeat, Window: crewlet.WindowDay, Cap: 100, Used: 100, ResetsAt: day}},
		{"company week outlasts seat day", func() []crewlet.UsageWindow {
			ws := with(0, 150)
			ws[4].Used = 20
			return ws
		}(), &crewlet.BudgetHold{Unit: crewlet.UnitTokens, Scope: crewlet.ScopeCompany, Window: crewlet.WindowWeek, Cap: 20, Used: 20, ResetsAt: week}},
		{"month resetting before the week is not chosen", func() []crewlet.UsageWindow {
			ws := with(4, 25)
			ws[5].Used = 30
			return ws
		}(), &crewlet.BudgetHold{Unit: crewlet.UnitTokens, Scope: crewlet.ScopeCompany, Window: crewlet.WindowWeek, Cap: 20, Used: 25, ResetsAt: week}},
		{"same reset: seat before company", []crewlet.UsageWindow{
			w(crewlet.ScopeSeat, crewlet.WindowDay, 5, 5, day),
			w(crewlet.ScopeCompany, crewlet.WindowDay, 9, 5, day),
		}, &crewlet.BudgetHold{Unit: crewlet.UnitTokens, Scope: crewlet.ScopeSeat, Window: crewlet.WindowDay, Cap: 5, Used: 5, ResetsAt: day}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := budget.Check(tt.windows)
			if got != nil && got.Reason == "" {
				t.Errorf("hold %+v gives no reason", got)
			}
			if got != nil {
				c := *got
				c.Reason = ""
				got = &c
			}
			switch {
			case got == nil && tt.want == nil:
			case got == nil || tt.want == nil || *got != *tt.want:
				t.Fatalf("Check = %+v; want %+v", got, tt.want)
			}
		})
	}
}

// A money window holds at its cap, when its question was answered no, and
// when it has usage without a price; each hold says why in words.
func TestCheckMoney(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 3, 30, 0, 0, 0, 0, time.UTC)
	week := time.Date(2026, 4, 6, 0, 0, 0, 0, time.UTC)
	w := func(scope, window string, used, cap int64, resets time.Time) crewlet.UsageWindow {
		return crewlet.UsageWindow{Scope: scope, Window: window, UsedNanoUSD: used, CapNanoUSD: cap, ResetsAt: resets}
	}
	answered := func(ws crewlet.UsageWindow, decision string) crewlet.UsageWindow {
		ws.Ask = &crewlet.BudgetAsk{Ticket: "t-1", To: "olga", UsedNanoUSD: 4e9, Decision: decision, AnsweredBy: "olga"}
		return ws
	}
	unpriced := func(ws crewlet.UsageWindow) crewlet.UsageWindow {
		ws.UnpricedTokens = 1234
		ws.UnpricedModels = []crewlet.UnpricedModel{{Model: "homebrew-7b", Tokens: 1234}}
		return ws
	}
	money := func(scope, window string, used, cap int64, resets time.Time) *crewlet.BudgetHold {
		return &crewlet.BudgetHold{Scope: scope, Window: window, Unit: crewlet.UnitNanoUSD, Cap: cap, Used: used, ResetsAt: resets}
	}
	tests := []struct {
		name    string
		windows []crewlet.UsageWindow
		want    *crewlet.BudgetHold
		reason  string
	}{
		{"under the cap", []crewlet.UsageWindow{w(crewlet.ScopeSeat, crewlet.WindowDay, 4e9, 5e9, day)}, nil, ""},
		{"uncapped money never holds", []crewlet.UsageWindow{unpriced(w(crewlet.ScopeSeat, crewlet.WindowDay, 9e9, 0, day))}, nil, ""},
		{"at the cap", []crewlet.UsageWindow{w(crewlet.ScopeSeat, crewlet.WindowDay, 5e9, 5e9, day)},
			money(crewlet.ScopeSeat, crewlet.WindowDay, 5e9, 5e9, day), "the seat's day budget of $5.00 is spent ($5.00 used)"},
		{"answered yes goes on", []crewlet.UsageWindow{answered(w(crewlet.ScopeSeat, crewlet.WindowDay, 4.5e9, 5e9, day), crewlet.AskYes)}, nil, ""},
		{"waiting goes on", []crewlet.UsageWindow{answered(w(crewlet.ScopeSeat, crewlet.WindowDay, 4.5e9, 5e9, day), crewlet.AskWaiting)}, nil, ""},
		{"answered no holds", []crewlet.UsageWindow{answered(w(crewlet.ScopeCompany, crewlet.WindowWeek, 4.5e9, 5e9, week), crewlet.AskNo)},
			money(crewlet.ScopeCompany, crewlet.WindowWeek, 4.5e9, 5e9, week), "olga answered no to going on past $4.00 of the company's week budget of $5.00 (ticket t-1)"},
		{"unpriced usage under a money cap", []crewlet.UsageWindow{unpriced(w(crewlet.ScopeSeat, crewlet.WindowDay, 1e9, 5e9, day))},
			money(crewlet.ScopeSeat, crewlet.WindowDay, 1e9, 5e9, day), "1234 tokens of model homebrew-7b have no price; add it to prices: in the org file"},
		{"the longer window wins", []crewlet.UsageWindow{
			w(crewlet.ScopeSeat, crewlet.WindowDay, 5e9, 5e9, day),
			w(crewlet.ScopeSeat, crewlet.WindowWeek, 7e9, 7e9, week),
		}, money(crewlet.ScopeSeat, crewlet.WindowWeek, 7e9, 7e9, week), "week budget of $7.00 is spent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := budget.Check(tt.windows)
			if got == nil || tt.want == nil {
				if got != tt.want {
					t.Fatalf("Check = %+v; want %+v", got, tt.want)
				}
				return
			}
			if !strings.Contains(got.Reason, tt.reason) {
				t.Errorf("reason %q; want it to say %q", got.Reason, tt.reason)
			}
			c := *got
			c.Reason = ""
			if c != *tt.want {
				t.Fatalf("Check = %+v; want %+v", c, *tt.want)
			}
		})
	}
}

func TestAskDue(t *testing.T) {
	t.Parallel()
	policy := &crewlet.BudgetAskPolicy{To: "olga", At: 0.8}
	tests := []struct {
		name   string
		w      crewlet.UsageWindow
		policy *crewlet.BudgetAskPolicy
		want   bool
	}{
		{"below the share", crewlet.UsageWindow{UsedNanoUSD: 79, CapNanoUSD: 100}, policy, false},
		{"at the share", crewlet.UsageWindow{UsedNanoUSD: 80, CapNanoUSD: 100}, policy, true},
		{"asked already", crewlet.UsageWindow{UsedNanoUSD: 90, CapNanoUSD: 100, Ask: &crewlet.BudgetAsk{}}, policy, false},
		{"no money cap", crewlet.UsageWindow{UsedNanoUSD: 90}, policy, false},
		{"on_limit hold", crewlet.UsageWindow{UsedNanoUSD: 90, CapNanoUSD: 100}, nil, false},
	}
	for _, tt := range tests {
		if got := budget.AskDue(tt.w, tt.policy); got != tt.want {
			t.Errorf("%s: AskDue = %t; want %t", tt.name, got, tt.want)
		}
	}
}

func TestReadAnswer(t *testing.T) {
	t.Parallel()
	for answer, want := range map[string]string{
		"yes":                      crewlet.AskYes,
		"Yes, go on.":              crewlet.AskYes,
		"OK":                       crewlet.AskYes,
		"approved — ship it":       crewlet.AskYes,
		"no":                       crewlet.AskNo,
		"No.":                      crewlet.AskNo,
		"deny":                     crewlet.AskNo,
		"not yet":                  crewlet.AskNo,
		"yesterday was expensive":  crewlet.AskNo,
		"":                         crewlet.AskNo,
		"let me think about it...": crewlet.AskNo,
	} {
		if got := budget.ReadAnswer(answer); got != want {
			t.Errorf("ReadAnswer(%q) = %s; want %s", answer, got, want)
		}
	}
}
