package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// now is the injected clock: noon on the Sunday Berlin springs forward, so
// the day window is 23 hours long and the week began on Monday 23 March.
var now = time.Date(2026, 3, 29, 12, 0, 0, 0, berlin)

var berlin = func() *time.Location {
	loc, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		panic(err)
	}
	return loc
}()

// testOrg is an org that opted out of tokens (auth.anonymous), so the tests
// of what the API reads call it without one.
func testOrg(seatCaps, companyCaps config.Budget) *config.Config {
	return &config.Config{
		Auth:    config.Auth{Anonymous: true},
		Company: config.Company{Name: "acme", Timezone: "Europe/Berlin", Budget: companyCaps},
		Roles:   map[string]config.Role{"engineer": {Charter: "builds", Profile: "local", Budget: seatCaps}},
		Seats: []config.Seat{
			{Handle: "cto", Role: "engineer", Kind: string(crewlet.SeatAgent)},
			{Handle: "cfo", Role: "engineer", Kind: string(crewlet.SeatAgent)},
			{Handle: "alice", Kind: string(crewlet.SeatHuman)},
		},
	}
}

type bundle struct {
	st  *store.Store
	ctx context.Context
}

func setup(t *testing.T) bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return bundle{st: testenv.Store(t, testenv.MigratedDatabase(t)), ctx: ctx}
}

// serve runs the API over org and the bundle's store, with the clock at now.
func (b bundle) serve(t *testing.T, org *config.Config) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	s := withServices(&api.Server{Org: org, Store: b.st, Log: log})
	s.Views.Now = func() time.Time { return now }
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

type errorBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail"`
}

// get calls GET base+path and decodes a 200 answer into out; it returns the
// status and, for any other, the error body.
func get(t *testing.T, base, path string, out any) (int, errorBody) {
	t.Helper()
	resp, err := http.Get(base + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb errorBody
	if resp.StatusCode != http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&eb); err != nil {
			t.Fatalf("GET %s: %d with a body that is not an error: %v", path, resp.StatusCode, err)
		}
		return resp.StatusCode, eb
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("GET %s: decode: %v", path, err)
	}
	return resp.StatusCode, eb
}

func (b bundle) round(t *testing.T, seat, workKey string, round int, in, out int64, at time.Time) {
	t.Helper()
	_, err := b.st.RecordRound(b.ctx, wire.RoundRow{
		Seat: seat, WorkKey: workKey, Round: round, Profile: "local",
		SystemSHA256: strings.Repeat("ab", 32), SystemBytes: 1234, InputTokens: in, OutputTokens: out, RecordedAt: at,
	}, berlin)
	if err != nil {
		t.Fatal(err)
	}
}

func TestSeatUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.round(t, "cto", "wk-today", 1, 60, 50, now.Add(-time.Hour))                          // 110, today
	b.round(t, "cto", "wk-saturday", 1, 20, 10, now.Add(-24*time.Hour))                    // 30, this week and month
	b.round(t, "cto", "wk-february", 1, 500, 500, now.AddDate(0, -1, -1))                  // 1000, February only
	b.round(t, "cfo", "wk-today", 1, 150, 50, now.Add(-2*time.Hour))                       // 200, company today
	b.round(t, "cto", "wk-today", 1, 999, 999, now.Add(-time.Hour))                        // a retried round charges nothing
	b.round(t, "cto", "wk-next-month", 1, 1, 1, time.Date(2026, 4, 1, 0, 0, 0, 0, berlin)) // future window

	seatUsed := map[string]int64{crewlet.WindowDay: 110, crewlet.WindowWeek: 140, crewlet.WindowMonth: 140}
	companyUsed := map[string]int64{crewlet.WindowDay: 310, crewlet.WindowWeek: 340, crewlet.WindowMonth: 340}
	resets := map[string]time.Time{
		crewlet.WindowDay:   time.Date(2026, 3, 30, 0, 0, 0, 0, berlin),
		crewlet.WindowWeek:  time.Date(2026, 3, 30, 0, 0, 0, 0, berlin),
		crewlet.WindowMonth: time.Date(2026, 4, 1, 0, 0, 0, 0, berlin),
	}

	tests := []struct {
		name        string
		handle      string
		seatCaps    config.Budget
		companyCaps config.Budget
		hold        *crewlet.BudgetHold
	}{
		{name: "under every cap", handle: "cto",
			seatCaps: config.Budget{TokensPerDay: 111}, companyCaps: config.Budget{TokensPerMonth: 341}},
		{name: "seat day cap reached", handle: "cto",
			seatCaps: config.Budget{TokensPerDay: 110}, companyCaps: config.Budget{TokensPerMonth: 341},
			hold: &crewlet.BudgetHold{Scope: crewlet.ScopeSeat, Window: crewlet.WindowDay, Cap: 110, Used: 110, ResetsAt: resets[crewlet.WindowDay]}},
		{name: "the cap that resets last holds", handle: "cto",
			seatCaps: config.Budget{TokensPerDay: 100}, companyCaps: config.Budget{TokensPerMonth: 300},
			hold: &crewlet.BudgetHold{Scope: crewlet.ScopeCompany, Window: crewlet.WindowMonth, Cap: 300, Used: 340, ResetsAt: resets[crewlet.WindowMonth]}},
		{name: "a human seat is never held and has no seat caps", handle: "alice",
			seatCaps: config.Budget{TokensPerDay: 1}, companyCaps: config.Budget{TokensPerDay: 10}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := b.serve(t, testOrg(tt.seatCaps, tt.companyCaps))
			var u crewlet.SeatUsage
			if code, eb := get(t, base, "/seats/"+tt.handle+"/usage", &u); code != http.StatusOK {
				t.Fatalf("status %d %+v; want 200", code, eb)
			}
			if u.Seat != tt.handle || u.Timezone != "Europe/Berlin" {
				t.Fatalf("seat %q timezone %q; want %q Europe/Berlin", u.Seat, u.Timezone, tt.handle)
			}
			if len(u.Windows) != 6 {
				t.Fatalf("got %d windows; want 6: %+v", len(u.Windows), u.Windows)
			}
			human := tt.handle == "alice"
			for _, w := range u.Windows {
				wantUsed, wantCap := companyUsed[w.Window], tt.companyCaps.Caps().Cap(w.Window)
				if w.Scope == crewlet.ScopeSeat {
					wantUsed, wantCap = seatUsed[w.Window], tt.seatCaps.Caps().Cap(w.Window)
					if human {
						wantUsed, wantCap = 0, 0
					}
				}
				if w.Used != wantUsed || w.Cap != wantCap || !w.ResetsAt.Equal(resets[w.Window]) {
					t.Errorf("%s %s: used %d cap %d resets %v; want used %d cap %d resets %v",
						w.Scope, w.Window, w.Used, w.Cap, w.ResetsAt, wantUsed, wantCap, resets[w.Window])
				}
			}
			switch {
			case tt.hold == nil && u.Hold != nil:
				t.Fatalf("hold %+v; want none", *u.Hold)
			case tt.hold != nil && u.Hold == nil:
				t.Fatalf("no hold; want %+v", *tt.hold)
			case tt.hold != nil:
				got, want := *u.Hold, *tt.hold
				if got.Scope != want.Scope || got.Window != want.Window || got.Cap != want.Cap || got.Used != want.Used || !got.ResetsAt.Equal(want.ResetsAt) {
					t.Fatalf("hold %+v; want %+v", got, want)
				}
			}
		})
	}

	t.Run("unknown seat", func(t *testing.T) {
		base := b.serve(t, testOrg(config.Budget{}, config.Budget{}))
		code, eb := get(t, base, "/seats/nobody/usage", nil)
		if code != http.StatusNotFound || eb.Error != crewlet.ENOTFOUND || !strings.Contains(eb.Detail, "nobody") {
			t.Fatalf("status %d %+v; want 404 naming the seat", code, eb)
		}
	})
}

// GET /seats/{handle}/usage and GET /usage give each window's money, its
// money cap and its unpriced tokens under these names (the console reads
// them), and the hold of a money cap in nano-dollars with its reason.
func TestUsageGivesMoney(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for i, r := range []wire.RoundRow{
		{Seat: "cto", Model: "m", Priced: true, NanoUSD: 1_500_000_000, InputTokens: 10, OutputTokens: 5},
		{Seat: "cto", Model: "homebrew", InputTokens: 70, OutputTokens: 7},
		{Seat: "cfo", Model: "m", Priced: true, NanoUSD: 250_000_000, InputTokens: 1, OutputTokens: 1},
	} {
		r.WorkKey, r.Round, r.Profile, r.Role, r.RecordedAt = fmt.Sprintf("wk-%d", i), 1, "local", "engineer", now.Add(-time.Hour)
		if _, err := b.st.RecordRound(b.ctx, r, berlin); err != nil {
			t.Fatal(err)
		}
	}
	base := b.serve(t, testOrg(config.Budget{USDPerDay: 1.5}, config.Budget{USDPerMonth: 100}))

	var seat struct {
		Windows []map[string]any   `json:"windows"`
		Hold    crewlet.BudgetHold `json:"hold"`
	}
	if code, eb := get(t, base, "/seats/cto/usage", &seat); code != http.StatusOK {
		t.Fatalf("status %d %+v; want 200", code, eb)
	}
	var company struct {
		Windows []map[string]any `json:"windows"`
	}
	if code, eb := get(t, base, "/usage", &company); code != http.StatusOK {
		t.Fatalf("status %d %+v; want 200", code, eb)
	}
	if len(seat.Windows) != 6 || len(company.Windows) != 3 {
		t.Fatalf("windows: seat %d, company %d; want 6 and 3", len(seat.Windows), len(company.Windows))
	}
	for _, tt := range []struct {
		name string
		w    map[string]any
		want map[string]float64
	}{
		{"seat day", seat.Windows[0], map[string]float64{"used_nano_usd": 1_500_000_000, "cap_nano_usd": 1_500_000_000, "unpriced_tokens": 77}},
		{"seat week (no cap)", seat.Windows[1], map[string]float64{"used_nano_usd": 1_500_000_000, "cap_nano_usd": 0, "unpriced_tokens": 77}},
		{"company month", company.Windows[2], map[string]float64{"used_nano_usd": 1_750_000_000, "cap_nano_usd": 100_000_000_000, "unpriced_tokens": 77}},
	} {
		for key, want := range tt.want {
			if got, ok := tt.w[key].(float64); !ok || got != want {
				t.Errorf("%s: %s = %v; want %v", tt.name, key, tt.w[key], want)
			}
		}
	}
	// The seat's day cap is reached, and the company's month holds usage
	// without a price: the month resets last, so it is the hold.
	h := seat.Hold
	if h.Unit != crewlet.UnitNanoUSD || h.Scope != crewlet.ScopeCompany || h.Window != crewlet.WindowMonth || h.Cap != 100_000_000_000 ||
		!strings.Contains(h.Reason, "77 tokens of model homebrew have no price") {
		t.Errorf("hold %+v; want the company's month cap of $100, in nano-dollars, held by homebrew's unpriced tokens", h)
	}
}

func TestSeatTurnsAndTurn(t *testing.T) {
	t.Parallel()
	b := setup(t)
	base := b.serve(t, testOrg(config.Budget{}, config.Budget{}))
	start := now.Add(-time.Hour)
	for i, wk := range []string{"wk0", "wk1", "wk2"} {
		testenv.SeatAtEpoch(t, b.ctx, b.st, "cto", 1)
		_, err := b.st.OpenTurn(b.ctx, wire.TurnRow{
			Seat: "cto", WorkKey: wk, TurnID: crewlet.TurnWorkflowID("cto", wk), Epoch: 1, MaxRounds: 8,
			Mail:      []crewlet.Message{{EventID: "e" + wk, Type: crewlet.MessageChat, From: "alice", To: "cto", Body: "hi " + wk}},
			Threads:   []int{0},
			StartedAt: start.Add(time.Duration(i) * time.Minute),
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.st.FinishTurn(b.ctx, "cto", "wk2", string(crewlet.TurnDone), "answered", "", 2); err != nil {
		t.Fatal(err)
	}
	msgs := []wire.TurnMessage{
		{Thread: 0, Key: "user", Message: crewlet.ChatMessage{Role: "user", Content: "hi wk2"}},
		{Thread: 0, Key: "r1", Round: 1, Message: crewlet.ChatMessage{Role: "assistant", ToolCalls: []crewlet.ToolCall{{ID: "c1", Name: "read", Args: json.RawMessage(`{"path":"a"}`)}}}},
		{Thread: 0, Key: "r1c1", Round: 1, Message: crewlet.ChatMessage{Role: "tool", ToolCallID: "c1", Content: "contents"}},
		{Thread: 0, Key: "r2", Round: 2, Message: crewlet.ChatMessage{Role: "assistant", Content: "done"}},
	}
	for _, m := range msgs {
		// A thread's conversation is recorded under its trigger's key.
		if _, err := b.st.AppendTurnMessage(b.ctx, "cto", crewlet.ThreadKey("ewk2"), m); err != nil {
			t.Fatal(err)
		}
	}
	b.round(t, "cto", crewlet.ThreadKey("ewk2"), 2, 7, 3, now)
	b.round(t, "cto", crewlet.ThreadKey("ewk2"), 1, 40, 2, now)

	t.Run("list, newest first", func(t *testing.T) {
		var turns []wire.TurnRow
		if code, eb := get(t, base, "/seats/cto/turns?limit=2", &turns); code != http.StatusOK {
			t.Fatalf("status %d %+v", code, eb)
		}
		if len(turns) != 2 || turns[0].WorkKey != "wk2" || turns[1].WorkKey != "wk1" {
			t.Fatalf("turns %+v; want wk2 then wk1", turns)
		}
		if turns[0].Status != string(crewlet.TurnDone) || turns[0].Rounds != 2 || turns[0].Note != "answered" || turns[0].FinishedAt == nil {
			t.Fatalf("wk2 = %+v; want done after 2 rounds, noted, finished", turns[0])
		}
		if code, _ := get(t, base, "/seats/cto/turns", &turns); code != http.StatusOK || len(turns) != 3 {
			t.Fatalf("default limit: status %d, %d turns; want 200 and all 3", code, len(turns))
		}
		if code, _ := get(t, base, "/seats/cfo/turns", &turns); code != http.StatusOK || turns == nil || len(turns) != 0 {
			t.Fatalf("seat with no turns: status %d, %#v; want 200 and []", code, turns)
		}
	})

	for _, limit := range []string{"0", "201", "ten", "-1"} {
		t.Run("bad limit "+limit, func(t *testing.T) {
			code, eb := get(t, base, "/seats/cto/turns?limit="+limit, nil)
			if code != http.StatusBadRequest || eb.Error != crewlet.EINVALID || !strings.Contains(eb.Detail, "from 1 to 200") || !strings.Contains(eb.Detail, limit) {
				t.Fatalf("status %d %+v; want 400 naming the range and the value", code, eb)
			}
		})
	}

	t.Run("unknown seat", func(t *testing.T) {
		code, eb := get(t, base, "/seats/nobody/turns", nil)
		if code != http.StatusNotFound || eb.Error != crewlet.ENOTFOUND {
			t.Fatalf("status %d %+v; want 404", code, eb)
		}
	})

	t.Run("one turn", func(t *testing.T) {
		var view wire.TurnView
		if code, eb := get(t, base, "/turns/cto/wk2", &view); code != http.StatusOK {
			t.Fatalf("status %d %+v", code, eb)
		}
		if view.Turn.TurnID != "turn/cto/wk2" || view.Turn.Status != string(crewlet.TurnDone) || len(view.Turn.Mail) != 1 {
			t.Fatalf("turn %+v; want turn/cto/wk2, done, one trigger", view.Turn)
		}
		if len(view.Messages) != len(msgs) {
			t.Fatalf("%d messages; want %d: %+v", len(view.Messages), len(msgs), view.Messages)
		}
		for i, m := range view.Messages {
			if m.Thread != msgs[i].Thread || m.Key != msgs[i].Key || m.Message.Role != msgs[i].Message.Role {
				t.Errorf("message %d = thread %d key %s role %s; want thread %d key %s role %s",
					i, m.Thread, m.Key, m.Message.Role, msgs[i].Thread, msgs[i].Key, msgs[i].Message.Role)
			}
		}
		if tc := view.Messages[1].Message.ToolCalls; len(tc) != 1 || tc[0].Name != "read" || string(tc[0].Args) != `{"path":"a"}` {
			t.Errorf("tool calls %+v; want read {\"path\":\"a\"}", tc)
		}
		if len(view.Receipts) != 2 || view.Receipts[0].Round != 1 || view.Receipts[1].Round != 2 {
			t.Fatalf("receipts %+v; want rounds 1 and 2 in order", view.Receipts)
		}
		r := view.Receipts[0]
		if r.SystemSHA256 != strings.Repeat("ab", 32) || r.SystemBytes != 1234 || r.InputTokens != 40 || r.OutputTokens != 2 || r.Profile != "local" {
			t.Fatalf("receipt %+v; want the recorded sha, size, tokens and profile", r)
		}
	})

	t.Run("a turn with nothing recorded yet", func(t *testing.T) {
		var view wire.TurnView
		if code, eb := get(t, base, "/turns/cto/wk0", &view); code != http.StatusOK {
			t.Fatalf("status %d %+v", code, eb)
		}
		if view.Turn.Status != "running" || view.Messages == nil || view.Receipts == nil {
			t.Fatalf("view %+v; want running with empty (not null) messages and receipts", view)
		}
	})

	t.Run("unknown turn", func(t *testing.T) {
		code, eb := get(t, base, "/turns/cto/nope", nil)
		if code != http.StatusNotFound || eb.Error != crewlet.ENOTFOUND {
			t.Fatalf("status %d %+v; want 404", code, eb)
		}
	})
	t.Run("malformed handle", func(t *testing.T) {
		code, eb := get(t, base, "/turns/NOT%20A%20SEAT/wk2", nil)
		if code != http.StatusBadRequest || eb.Error != crewlet.EINVALID {
			t.Fatalf("status %d %+v; want 400", code, eb)
		}
	})
}
