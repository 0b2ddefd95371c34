package views

import (
	"context"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/budget"
	"github.com/crewlet/crewlet/internal/wire"
)

// Usage returns the tokens the seat and the company used in the current day,
// week and month on the company's clock, with their caps and the cap that
// holds the seat's turns, if any. A human seat runs no turns: its own windows
// have no cap and it is never held, but the company's windows are still
// reported.
func (v *Reader) Usage(ctx context.Context, handle string) (crewlet.SeatUsage, error) {
	s, err := v.org.Now().SeatNamed(handle)
	if err != nil {
		return crewlet.SeatUsage{}, err
	}
	agent := s.Kind != string(crewlet.SeatHuman)
	var seatCaps crewlet.BudgetCaps
	if agent {
		seatCaps = v.org.Now().Roles[s.Role].Budget.Caps()
	}
	loc := v.org.Now().Location()
	windows, err := v.store.Usage(ctx, s.Handle, seatCaps, v.org.Now().Company.Budget.Caps(), v.Now(), loc)
	if err != nil {
		return crewlet.SeatUsage{}, err
	}
	u := crewlet.SeatUsage{Seat: s.Handle, Timezone: loc.String(), Windows: windows}
	if agent {
		u.Hold = budget.Check(windows)
	}
	return u, nil
}

// Turns returns the seat's latest turns, newest first: limit of them, 1 to
// wire.MaxTurns.
func (v *Reader) Turns(ctx context.Context, handle string, limit int) ([]wire.TurnRow, error) {
	s, err := v.org.Now().SeatNamed(handle)
	if err != nil {
		return nil, err
	}
	if limit < 1 || limit > wire.MaxTurns {
		return nil, crewlet.Errorf(crewlet.EINVALID, "limit must be from 1 to %d, got %d", wire.MaxTurns, limit)
	}
	turns, err := v.store.SeatTurns(ctx, s.Handle, limit)
	if err != nil {
		return nil, err
	}
	if turns == nil {
		turns = []wire.TurnRow{}
	}
	return turns, nil
}

// Turn returns the turn with that id, "turn/{handle}/{work_key}". A turn of a
// seat since removed from the org is still answered: its record outlives the
// seat.
func (v *Reader) Turn(ctx context.Context, turnID string) (wire.TurnView, error) {
	handle, workKey, ok := crewlet.ParseTurnID(turnID)
	if !ok {
		return wire.TurnView{}, crewlet.Errorf(crewlet.EINVALID, "turn id %q is not turn/{handle}/{work_key}; `crewlet seats turns HANDLE` lists them", turnID)
	}
	row, err := v.store.Turn(ctx, handle, workKey)
	if err != nil {
		return wire.TurnView{}, err
	}
	// Each thread's conversation is recorded under the work key of its
	// trigger (crewlet.ThreadKey), so a resumed trigger keeps its history.
	var msgs []wire.TurnMessage
	var rounds []wire.RoundRow
	for thread, i := range row.Threads {
		if i >= len(row.Mail) {
			continue
		}
		key := crewlet.ThreadKey(row.Mail[i].EventID)
		tm, err := v.store.TurnMessages(ctx, handle, key, 0)
		if err != nil {
			return wire.TurnView{}, err
		}
		for _, m := range tm {
			m.Thread = thread
			msgs = append(msgs, m)
		}
		rr, err := v.store.TurnRounds(ctx, handle, key)
		if err != nil {
			return wire.TurnView{}, err
		}
		rounds = append(rounds, rr...)
	}
	if msgs == nil {
		msgs = []wire.TurnMessage{}
	}
	if rounds == nil {
		rounds = []wire.RoundRow{}
	}
	return wire.TurnView{Turn: row, Messages: msgs, Receipts: rounds}, nil
}

// CompanyUsage returns the company's token usage against its caps
// (company.budget), one window per period, on the company's timezone.
func (v *Reader) CompanyUsage(ctx context.Context) (crewlet.CompanyUsage, error) {
	org := v.org.Now()
	loc := org.Location()
	windows, err := v.store.Usage(ctx, "", crewlet.BudgetCaps{}, org.Company.Budget.Caps(), v.Now(), loc)
	if err != nil {
		return crewlet.CompanyUsage{}, err
	}
	u := crewlet.CompanyUsage{Timezone: loc.String(), Windows: []crewlet.UsageWindow{}}
	for _, w := range windows {
		if w.Scope == crewlet.ScopeCompany {
			u.Windows = append(u.Windows, w)
		}
	}
	return u, nil
}
