package views

import (
	"context"
	"strings"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/budget"
	"github.com/crewlet/crewlet/internal/store"
)

// MaxTurns is the most turns one Turns call lists.
const MaxTurns = 200

// Usage returns the tokens the seat and the company used in the current day,
// week and month on the company's clock, with their caps and the cap that
// holds the seat's turns, if any. A human seat runs no turns: its own windows
// have no cap and it is never held, but the company's windows are still
// reported.
func (v *Reader) Usage(ctx context.Context, handle string) (crewlet.SeatUsage, error) {
	s, err := v.org.SeatNamed(handle)
	if err != nil {
		return crewlet.SeatUsage{}, err
	}
	agent := s.Kind != string(crewlet.SeatHuman)
	var seatCaps crewlet.BudgetCaps
	if agent {
		seatCaps = v.org.Roles[s.Role].Budget.Caps()
	}
	loc := v.org.Location()
	windows, err := v.store.Usage(ctx, s.Handle, seatCaps, v.org.Company.Budget.Caps(), v.Now(), loc)
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
// MaxTurns.
func (v *Reader) Turns(ctx context.Context, handle string, limit int) ([]store.TurnRow, error) {
	s, err := v.org.SeatNamed(handle)
	if err != nil {
		return nil, err
	}
	if limit < 1 || limit > MaxTurns {
		return nil, crewlet.Errorf(crewlet.EINVALID, "limit must be from 1 to %d, got %d", MaxTurns, limit)
	}
	turns, err := v.store.SeatTurns(ctx, s.Handle, limit)
	if err != nil {
		return nil, err
	}
	if turns == nil {
		turns = []store.TurnRow{}
	}
	return turns, nil
}

// TurnView is one turn as recorded: its row, its model conversation (every
// thread, in the order written) and the receipt and token charge of each
// model call.
type TurnView struct {
	Turn     store.TurnRow       `json:"turn"`
	Messages []store.TurnMessage `json:"messages"`
	Receipts []store.RoundRow    `json:"receipts"`
}

// ParseTurnID splits a turn id, "turn/{handle}/{work_key}" (the turn's
// workflow id), into its seat and work key. The "turn/" prefix may be left
// off.
func ParseTurnID(id string) (handle, workKey string, ok bool) {
	rest := strings.TrimPrefix(id, "turn/")
	handle, workKey, ok = strings.Cut(rest, "/")
	if !ok || !crewlet.ValidName(handle) || workKey == "" || strings.Contains(workKey, "/") {
		return "", "", false
	}
	return handle, workKey, true
}

// Turn returns the turn with that id, "turn/{handle}/{work_key}". A turn of a
// seat since removed from the org is still answered: its record outlives the
// seat.
func (v *Reader) Turn(ctx context.Context, turnID string) (TurnView, error) {
	handle, workKey, ok := ParseTurnID(turnID)
	if !ok {
		return TurnView{}, crewlet.Errorf(crewlet.EINVALID, "turn id %q is not turn/{handle}/{work_key}; `crewlet seats turns HANDLE` lists them", turnID)
	}
	row, err := v.store.Turn(ctx, handle, workKey)
	if err != nil {
		return TurnView{}, err
	}
	// Each thread's conversation is recorded under the work key of its
	// trigger (crewlet.ThreadKey), so a resumed trigger keeps its history.
	var msgs []store.TurnMessage
	var rounds []store.RoundRow
	for thread, i := range row.Threads {
		if i >= len(row.Mail) {
			continue
		}
		key := crewlet.ThreadKey(row.Mail[i].EventID)
		tm, err := v.store.TurnMessages(ctx, handle, key, 0)
		if err != nil {
			return TurnView{}, err
		}
		for _, m := range tm {
			m.Thread = thread
			msgs = append(msgs, m)
		}
		rr, err := v.store.TurnRounds(ctx, handle, key)
		if err != nil {
			return TurnView{}, err
		}
		rounds = append(rounds, rr...)
	}
	if msgs == nil {
		msgs = []store.TurnMessage{}
	}
	if rounds == nil {
		rounds = []store.RoundRow{}
	}
	return TurnView{Turn: row, Messages: msgs, Receipts: rounds}, nil
}
