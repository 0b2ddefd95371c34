// Package health owns the seat health duty (docs/architecture.md, "Seat health"):
// it classifies every agent seat of the company from its workflow's state in
// Temporal's list and its facts in Postgres and Redis, records and logs each
// transition once, fails the tickets a gone seat serves, and posts
// transitions to the configured webhooks.
package health

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/budget"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/views"
)

// Lister lists the seat workflows Temporal runs with their published
// status, in one list call (paginated): seatclient.Client.Statuses.
type Lister interface {
	Statuses(ctx context.Context) (map[string]crewlet.SeatStatus, error)
}

// TicketFailer fails the open tickets a seat serves and tells their
// delegators: tickets.Service.FailTarget.
type TicketFailer interface {
	FailTarget(ctx context.Context, handle, reason string) error
}

// Monitor runs the health duty's passes for one org.
type Monitor struct {
	// Org is the org the process runs; a pass reads it once.
	Org     config.Source
	Store   *store.Store
	Mailbox *mailbox.Mailbox
	Seats   Lister
	Tickets TicketFailer
	// Notifier posts transitions; nil posts none.
	Notifier *Notifier
	// LiveWithin is how recent a node's beat must be for it to count.
	LiveWithin time.Duration
	Log        *slog.Logger
}

// Pass classifies every agent seat once. When Temporal's list does not
// answer, the seats' workflows are unknown, never absent: the pass
// classifies nothing and says so.
func (m *Monitor) Pass(ctx context.Context) (crewlet.HealthOutput, error) {
	org := m.Org.Now()
	th := org.Health
	agents := org.AgentSeats()
	out := crewlet.HealthOutput{Seats: len(agents)}
	statuses, err := m.Seats.Statuses(ctx)
	if err != nil {
		m.Log.Warn("seat_health_unknown", "reason", "the list of seat workflows did not answer; nothing classified", "error", err)
		out.Unknown = true
		return out, nil
	}
	handles := make([]string, len(agents))
	for i, s := range agents {
		handles[i] = s.Handle
	}
	records, err := m.Store.SeatHealth(ctx)
	if err != nil {
		return out, err
	}
	nodes, err := m.Store.Nodes(ctx, m.LiveWithin, false)
	if err != nil {
		return out, err
	}
	unplaceable := map[string]bool{}
	for _, h := range views.Placement(org, nodes, nil).Unplaceable() {
		unplaceable[h] = true
	}
	type unproven struct {
		node string
		for_ time.Duration
	}
	teardowns := map[string]unproven{}
	for _, n := range nodes {
		for seat, secs := range n.Unproven {
			if d := time.Duration(secs) * time.Second; d > teardowns[seat].for_ {
				teardowns[seat] = unproven{n.NodeID, d}
			}
		}
	}
	facts, err := m.Store.HealthFacts(ctx, handles, th.FailingTurns+1, th.DeadLetterWindow, usageWindows(org, time.Now()))
	if err != nil {
		return out, err
	}
	backlogs, err := m.Mailbox.Backlogs(ctx, handles)
	if err != nil {
		return out, err
	}
	onPerson := map[string]bool{}
	for _, s := range org.Seats {
		onPerson[s.Handle] = s.Kind == string(crewlet.SeatHuman)
	}
	now := facts.Now
	updates := make([]store.HealthUpdate, 0, len(agents))
	for _, s := range agents {
		rec, known := records[s.Handle]
		f := Facts{
			Handle: s.Handle, Prev: crewlet.HealthUnknown,
			Status: crewlet.StatusAbsent, StatusSince: now,
			Unplaceable: unplaceable[s.Handle],
			Turns:       facts.Turns[s.Handle], Waits: facts.Waits[s.Handle], OnPerson: onPerson,
			DeadLetters: facts.DeadLetters[s.Handle], Backlog: backlogs[s.Handle],
			Budget: budgetHold(org, s, facts.Usage, now), ProfileHeldSince: facts.ProfileHolds[s.Handle],
		}
		if st, ok := statuses[s.Handle]; ok {
			f.Status = st
		}
		if known {
			f.Prev, f.PrevCause = rec.State, rec.Cause
			if rec.ObservedStatus == string(f.Status) {
				f.StatusSince = rec.ObservedSince
			}
		}
		if u, ok := teardowns[s.Handle]; ok {
			f.UnprovenNode, f.Unproven = u.node, u.for_
		}
		state, cause := Classify(f, th, now)
		updates = append(updates, store.HealthUpdate{
			Seat: s.Handle, Prev: f.Prev, State: state, Cause: cause,
			ObservedStatus: string(f.Status), ObservedSince: f.StatusSince, Checked: now,
		})
	}
	transitions, err := m.Store.RecordHealth(ctx, updates)
	if err != nil {
		return out, err
	}
	for _, t := range transitions {
		m.Log.Info("seat_health", "seat", t.Seat, "from", t.From, "to", t.To, "cause", t.Cause)
		m.Notifier.Post(t)
	}
	out.Transitions = transitions
	// Every pass, not only on the transition: a ticket routed to the seat
	// since, or a failure to fail one, is caught by the next pass. One
	// count first, so terminal seats with nothing open cost nothing more.
	var terminal []string
	causes := map[string]string{}
	for _, u := range updates {
		if u.State.Terminal() {
			terminal = append(terminal, u.Seat)
			causes[u.Seat] = fmt.Sprintf("seat %s is %s: %s", u.Seat, u.State, u.Cause)
		}
	}
	if len(terminal) == 0 {
		return out, nil
	}
	open, err := m.Store.OpenTicketCounts(ctx, terminal)
	if err != nil {
		return out, err
	}
	for _, seat := range terminal {
		if open[seat] == 0 {
			continue
		}
		if err := m.Tickets.FailTarget(ctx, seat, causes[seat]); err != nil {
			m.Log.Warn("seat_health_tickets_unfailed", "seat", seat, "error", err)
			continue
		}
		out.TicketsFailed += open[seat]
	}
	return out, nil
}

// usageWindows are the day, week and month windows of now on the
// company's clock, whose counters the budgets are checked against.
func usageWindows(org *config.Config, now time.Time) store.HealthWindows {
	var w store.HealthWindows
	for _, win := range budget.Windows(now, org.Location()) {
		w.Names = append(w.Names, win.Name)
		w.Starts = append(w.Starts, win.Start)
	}
	return w
}

// budgetHold is the cap that holds the seat's turns now, as the seat's own
// check (activities.Turns.CheckBudget) would find it from the same counters.
func budgetHold(org *config.Config, s config.Seat, usage map[string]map[string]store.WindowUsage, now time.Time) *crewlet.BudgetHold {
	windows := budget.UsageWindows(org.Roles[s.Role].Budget.Caps(), org.Company.Budget.Caps(), now, org.Location())
	for i, w := range windows {
		u := usage[store.CounterScope(w.Scope, s.Handle)][w.Window]
		windows[i].Used, windows[i].UsedNanoUSD, windows[i].UnpricedTokens, windows[i].Ask = u.Tokens, u.NanoUSD, u.UnpricedTokens, u.Ask
	}
	return budget.Check(windows)
}
