package activities

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// moneyBudgetOrg has cto's role's budget and the company's to fill in;
// alice is the person asked. The task queue is the test's own
// (ticketService).
const moneyBudgetOrg = `
company: { name: acme, timezone: Europe/Berlin, budget: { %s } }
temporal: { task_queue: %s }
profiles:
  cheap: { provider: scripted, model: cheap-model }
roles:
  clerk: { charter: keeps the ledger, profile: cheap, budget: { %s } }
seats:
  - { handle: cto, role: clerk }
  - { handle: alice, kind: human }
prices:
  - { model: cheap-model, input_mtok: 1, output_mtok: 2 }
`

// moneyBudgetEnv caps cto at $1 a day; budget adds to its role's budget.
func moneyBudgetEnv(t *testing.T, budget string) *turnEnv {
	t.Helper()
	return companyBudgetEnv(t, "usd_per_day: 1"+budget, "")
}

func companyBudgetEnv(t *testing.T, seatBudget, companyBudget string) *turnEnv {
	t.Helper()
	return setupTurnsOrg(t, fmt.Sprintf(moneyBudgetOrg, companyBudget, "crewlet-money-budget-test-"+testenv.Suffix(), seatBudget), nil)
}

// spend records a model call of cto at e.now that cost nano nano-dollars;
// unpriced records tokens of a model no price was found for instead.
func (e *turnEnv) spend(t *testing.T, key string, nano int64, unpricedModel string) {
	t.Helper()
	r := wire.RoundRow{Seat: "cto", Role: "clerk", WorkKey: key, Round: 1, Profile: "cheap", InputTokens: 1000, OutputTokens: 234,
		Model: "cheap-model", PriceVersion: "test", NanoUSD: nano, Priced: true, RecordedAt: e.now}
	if unpricedModel != "" {
		r.Model, r.NanoUSD, r.Priced, r.PriceVersion = unpricedModel, 0, false, ""
	}
	if _, err := e.store.RecordRound(e.ctx, r, e.turns.org.Now().Location()); err != nil {
		t.Fatal(err)
	}
}

// dayWindow is cto's day window as GET /seats/cto/usage gives it.
func (e *turnEnv) dayWindow(t *testing.T) crewlet.UsageWindow {
	t.Helper()
	org := e.turns.org.Now()
	usage, err := e.store.Usage(e.ctx, "cto", org.Roles["clerk"].Budget.Caps(), org.Company.Budget.Caps(), e.now, org.Location())
	if err != nil {
		t.Fatal(err)
	}
	return usage[0]
}

// A seat at its money cap is held like one at a token cap: no turn opened,
// nothing dead-lettered, the hold naming the window, the cap in
// nano-dollars and why; it runs again when the window turns.
func TestMoneyCapHoldsTheTurnUntilTheWindowTurns(t *testing.T) {
	t.Parallel()
	e := moneyBudgetEnv(t, "")
	ref := e.publish(t, "m1", "hello")
	e.spend(t, "earlier", 1_200_000_000, "")

	held := e.begin(t, "k1", ref)
	midnight := time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC)
	h := held.Hold
	if h == nil || h.Scope != crewlet.ScopeSeat || h.Window != crewlet.WindowDay || h.Unit != crewlet.UnitNanoUSD ||
		h.Cap != 1_000_000_000 || h.Used != 1_200_000_000 || !h.ResetsAt.Equal(midnight) || held.Threads != 0 {
		t.Fatalf("BeginTurn at the money cap: got %+v (hold %+v); want the seat's day hold of 1e9 nano-dollars, 1.2e9 used, until %v", held, h, midnight)
	}
	if want := "the seat's day budget of $1.00 is spent ($1.20 used)"; !strings.Contains(h.Reason, want) {
		t.Errorf("hold reason %q; want it to say %q", h.Reason, want)
	}
	if _, err := e.store.Turn(e.ctx, "cto", "k1"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("a held turn was opened (err %v); want nothing recorded", err)
	}
	if dead, err := e.mb.DeadLetters(e.ctx, 10); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters while held: %+v, %v; want none", dead, err)
	}
	w := e.dayWindow(t)
	if w.UsedNanoUSD != 1_200_000_000 || w.CapNanoUSD != 1_000_000_000 || w.UnpricedTokens != 0 {
		t.Errorf("usage of the day: %+v; want 1.2e9 of 1e9 nano-dollars, nothing unpriced", w)
	}
	if hold, err := e.turns.CheckBudget(e.ctx, crewlet.CheckBudgetInput{Handle: "cto"}); err != nil || hold == nil || hold.Unit != crewlet.UnitNanoUSD {
		t.Fatalf("CheckBudget before midnight: %+v, %v; want the money cap still holding", hold, err)
	}

	e.now = midnight.Add(time.Minute)
	if hold, err := e.turns.CheckBudget(e.ctx, crewlet.CheckBudgetInput{Handle: "cto"}); err != nil || hold != nil {
		t.Fatalf("CheckBudget after midnight: %+v, %v; want no hold", hold, err)
	}
	if open := e.begin(t, "k1", ref); open.Hold != nil || open.Threads != 1 {
		t.Fatalf("BeginTurn after midnight: got %+v; want one thread and no hold", open)
	}
}

// Usage no price was found for, in a window with a money cap, holds the
// seat: it cannot prove it is under the cap. The hold names the tokens and
// the model, and says to price it.
func TestUnpricedUsageUnderAMoneyCapHolds(t *testing.T) {
	t.Parallel()
	e := moneyBudgetEnv(t, "")
	ref := e.publish(t, "m1", "hello")
	e.spend(t, "earlier", 0, "homebrew-7b")

	held := e.begin(t, "k1", ref)
	if held.Hold == nil || held.Threads != 0 {
		t.Fatalf("BeginTurn with unpriced usage under a money cap: %+v; want a hold", held)
	}
	if want := "1234 tokens of model homebrew-7b have no price; add it to prices: in the org file"; !strings.Contains(held.Hold.Reason, want) {
		t.Errorf("hold reason %q; want it to say %q", held.Hold.Reason, want)
	}
	if w := e.dayWindow(t); w.UnpricedTokens != 1234 || len(w.UnpricedModels) != 1 || w.UnpricedModels[0].Model != "homebrew-7b" {
		t.Errorf("usage of the day: %+v; want 1234 unpriced tokens of homebrew-7b", w)
	}
}

// on_limit: ask puts one question to alice when the day's spend reaches
// half the cap, however often the step runs; the seat goes on while it
// waits and after a yes, holds at the cap, and after a no holds until the
// window turns.
func TestMoneyBudgetAsksOnceAndHoldsOnlyOnNo(t *testing.T) {
	e := moneyBudgetEnv(t, ", on_limit: ask, ask: { to: alice, at: 0.5 }")
	_, tk := ticketService(t, e.store, e.mb, e.turns.org.Now())
	e.turns.tickets = tk
	conn, err := pgx.Connect(e.ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	asks := func() []crewlet.Ticket {
		t.Helper()
		rows, err := conn.Query(e.ctx, `SELECT id, from_handle, to_handle, phase, question FROM tickets ORDER BY created_at`)
		if err != nil {
			t.Fatal(err)
		}
		out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (crewlet.Ticket, error) {
			var tk crewlet.Ticket
			return tk, r.Scan(&tk.ID, &tk.From, &tk.To, &tk.Phase, &tk.Question)
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	e.spend(t, "r1", 400_000_000, "")
	if begun := e.begin(t, "k1", e.publish(t, "m1", "hello")); begun.Hold != nil || len(asks()) != 0 {
		t.Fatalf("below the share: %+v, tickets %+v; want the turn and no question", begun, asks())
	}
	e.spend(t, "r2", 200_000_000, "")
	ref := e.publish(t, "m2", "hello again")
	for i := range 3 { // the step run again, and the next turn
		key := "k2"
		if i == 2 {
			key = "k3"
		}
		if i == 1 {
			// As if the first run's node died after the ticket opened and
			// before the question was recorded: the re-run asks again.
			if _, err := conn.Exec(e.ctx, `DELETE FROM budget_asks`); err != nil {
				t.Fatal(err)
			}
		}
		if begun := e.begin(t, key, ref); begun.Hold != nil || begun.Threads != 1 {
			t.Fatalf("at the share, waiting (run %d): %+v; want the seat to go on", i, begun)
		}
	}
	got := asks()
	if len(got) != 1 || got[0].From != "alice" || got[0].To != "cto" || got[0].Phase != crewlet.TicketAsking ||
		!strings.Contains(got[0].Question, "cto has spent $0.60 of its day budget of $1.00") {
		t.Fatalf("tickets at the share: %+v; want exactly one question to alice about cto's $0.60 of $1.00", got)
	}
	ticket := got[0]
	testenv.Eventually(t, 15*time.Second, "alice's note of the question", func() error {
		for _, m := range notices(t, e.ctx, e.mb, "alice") {
			if strings.Contains(m.Body, ticket.ID) && strings.Contains(m.Body, "May it go on to the cap?") {
				return nil
			}
		}
		return fmt.Errorf("no note of %s yet", ticket.ID)
	})
	if w := e.dayWindow(t); w.Ask == nil || w.Ask.Decision != crewlet.AskWaiting || w.Ask.Ticket != ticket.ID || w.Ask.To != "alice" {
		t.Fatalf("usage while asking: ask %+v; want %s waiting on alice", w.Ask, ticket.ID)
	}

	answered, err := tk.Answer(e.ctx, ticket.ID, "Yes, go on", "alice")
	if err != nil || answered.Phase != crewlet.TicketDone || !strings.Contains(answered.Reply, "Read as yes") {
		t.Fatalf("answer yes: %+v, %v; want the ticket done, read as yes", answered, err)
	}
	if begun := e.begin(t, "k4", e.publish(t, "m4", "more")); begun.Hold != nil {
		t.Fatalf("after yes: held %+v; want the seat to go on", begun.Hold)
	}
	e.spend(t, "r3", 400_000_000, "")
	if begun := e.begin(t, "k5", e.publish(t, "m5", "more")); begun.Hold == nil || begun.Hold.Unit != crewlet.UnitNanoUSD || begun.Hold.Used != 1_000_000_000 {
		t.Fatalf("after yes, at the cap: %+v; want the money cap to hold", begun.Hold)
	}

	// The next day asks again, once; no holds it until that day turns.
	e.now = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	e.spend(t, "r4", 700_000_000, "")
	if begun := e.begin(t, "k6", e.publish(t, "m6", "a new day")); begun.Hold != nil {
		t.Fatalf("a new day at the share: held %+v; want the seat to go on while it waits", begun.Hold)
	}
	got = asks()
	if len(got) != 2 || got[1].Phase != crewlet.TicketAsking {
		t.Fatalf("tickets after the second day's share: %+v; want a second question", got)
	}
	if answered, err := tk.Answer(e.ctx, got[1].ID, "no, that is enough for today", "alice"); err != nil || !strings.Contains(answered.Reply, "Read as no") {
		t.Fatalf("answer no: %+v, %v; want the ticket done, read as no", answered, err)
	}
	ref = e.publish(t, "m7", "still there?")
	held := e.begin(t, "k7", ref)
	if held.Hold == nil || held.Threads != 0 || !strings.Contains(held.Hold.Reason, "alice answered no to going on past $0.70 of the seat's day budget of $1.00") {
		t.Fatalf("after no: %+v (hold %+v); want the seat held, saying alice answered no", held, held.Hold)
	}
	if dead, err := e.mb.DeadLetters(e.ctx, 10); err != nil || len(dead) != 0 {
		t.Fatalf("dead letters while held: %+v, %v; want none", dead, err)
	}
	e.now = time.Date(2026, 11, 30, 23, 1, 0, 0, time.UTC)
	if begun := e.begin(t, "k7", ref); begun.Hold != nil || begun.Threads != 1 {
		t.Fatalf("after the day that said no turned: %+v; want the turn", begun)
	}
	if got := asks(); len(got) != 2 {
		t.Fatalf("tickets after the window turned: %+v; want still two (nothing spent in the new day)", got)
	}
}

// The company's budget asks a person too: the question says what the
// company spent, and a no holds the seat that found it, naming the
// company's budget.
func TestCompanyMoneyBudgetAsksAndNoHolds(t *testing.T) {
	e := companyBudgetEnv(t, "", "usd_per_week: 10, on_limit: ask, ask: { to: alice }")
	_, tk := ticketService(t, e.store, e.mb, e.turns.org.Now())
	e.turns.tickets = tk
	e.spend(t, "r1", 8_000_000_000, "")
	conn, err := pgx.Connect(e.ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	if begun := e.begin(t, "k1", e.publish(t, "m1", "hello")); begun.Hold != nil {
		t.Fatalf("at 80%% of the company's week: held %+v; want the seat to go on while it waits", begun.Hold)
	}
	var id, question string
	if err := conn.QueryRow(e.ctx, `SELECT id, question FROM tickets WHERE from_handle = 'alice' AND to_handle = 'cto'`).Scan(&id, &question); err != nil {
		t.Fatalf("the company's question: %v; want one ticket from alice to cto", err)
	}
	if want := "The company has spent $8.00 of its week budget of $10.00"; !strings.Contains(question, want) {
		t.Errorf("question %q; want it to say %q", question, want)
	}
	if _, err := tk.Answer(e.ctx, id, "nope", "alice"); err != nil {
		t.Fatal(err)
	}
	held := e.begin(t, "k2", e.publish(t, "m2", "hello again"))
	if held.Hold == nil || held.Hold.Scope != crewlet.ScopeCompany || !strings.Contains(held.Hold.Reason, "alice answered no to going on past $8.00 of the company's week budget of $10.00") {
		t.Fatalf("after the company's no: %+v; want the company's week to hold the seat", held.Hold)
	}
}

// An answer taken while the question was not recorded yet (its run died
// between opening the ticket and recording the question) still counts: the
// next turn records the question with that answer, and settles the ticket.
func TestBudgetAnswerBeforeItsQuestionWasRecordedCounts(t *testing.T) {
	e := moneyBudgetEnv(t, ", on_limit: ask, ask: { to: alice }")
	_, tk := ticketService(t, e.store, e.mb, e.turns.org.Now())
	e.turns.tickets = tk
	conn, err := pgx.Connect(e.ctx, e.db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	e.spend(t, "r1", 900_000_000, "")
	e.begin(t, "k1", e.publish(t, "m1", "hello"))
	var id string
	if err := conn.QueryRow(e.ctx, `DELETE FROM budget_asks RETURNING ticket_id`).Scan(&id); err != nil {
		t.Fatalf("the question of the day: %v; want one recorded", err)
	}
	if _, err := tk.Answer(e.ctx, id, "no", "alice"); err != nil {
		t.Fatal(err)
	}
	if begun := e.begin(t, "k2", e.publish(t, "m2", "again")); begun.Hold != nil {
		t.Fatalf("the turn that records the answer: held %+v; want it to run (the hold was read before)", begun.Hold)
	}
	held := e.begin(t, "k3", e.publish(t, "m3", "and again"))
	if held.Hold == nil || !strings.Contains(held.Hold.Reason, "alice answered no") {
		t.Fatalf("after the late-recorded no: %+v; want the seat held, saying alice answered no", held.Hold)
	}
	var phase, reply string
	if err := conn.QueryRow(e.ctx, `SELECT phase, reply FROM tickets WHERE id = $1`, id).Scan(&phase, &reply); err != nil || phase != "done" || !strings.Contains(reply, "Read as no") {
		t.Fatalf("ticket %s: %s %q (%v); want done, read as no", id, phase, reply, err)
	}
}
