package evals

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// CreateDataset freezes the finished turns req chooses as the dataset
// req.Name, created by principal: a seat's or a role's turns in a window,
// or a list of turn ids. Every problem with the request is an EINVALID
// error saying what to change.
func CreateDataset(ctx context.Context, st *store.Store, org *config.Config, principal string, req wire.DatasetRequest) (wire.Dataset, error) {
	if !crewlet.ValidName(req.Name) {
		return wire.Dataset{}, crewlet.Errorf(crewlet.EINVALID, "dataset name %q is not a name: use %s", req.Name, crewlet.NamePattern)
	}
	sel := req.DatasetSelector
	byWindow := sel.Seat != "" || sel.Role != ""
	switch {
	case byWindow && len(sel.Turns) > 0:
		return wire.Dataset{}, crewlet.Errorf(crewlet.EINVALID, "give either a seat or role with a window, or a list of turns, not both")
	case sel.Seat != "" && sel.Role != "":
		return wire.Dataset{}, crewlet.Errorf(crewlet.EINVALID, "give a seat or a role, not both")
	case !byWindow && len(sel.Turns) == 0:
		return wire.Dataset{}, crewlet.Errorf(crewlet.EINVALID, "say which turns: a seat (--seat) or a role (--role) with --since and --until, or turn ids (--turn)")
	case sel.Limit < 0 || sel.Limit > wire.MaxDatasetTurns:
		return wire.Dataset{}, crewlet.Errorf(crewlet.EINVALID, "limit %d is out of range: 1 to %d", sel.Limit, wire.MaxDatasetTurns)
	case len(sel.Turns) > wire.MaxDatasetTurns:
		return wire.Dataset{}, crewlet.Errorf(crewlet.EINVALID, "%d turns; a dataset holds at most %d", len(sel.Turns), wire.MaxDatasetTurns)
	}
	d := wire.Dataset{Name: req.Name, Selector: sel, CreatedBy: principal}
	if byWindow {
		turns, err := windowTurns(ctx, st, org, sel)
		if err != nil {
			return d, err
		}
		d.Turns = turns
	} else {
		turns, err := listedTurns(ctx, st, sel.Turns)
		if err != nil {
			return d, err
		}
		d.Turns = turns
	}
	return st.CreateDataset(ctx, d)
}

func windowTurns(ctx context.Context, st *store.Store, org *config.Config, sel wire.DatasetSelector) ([]string, error) {
	var seats []string
	if sel.Seat != "" {
		if _, ok := org.Seat(sel.Seat); !ok {
			return nil, crewlet.Errorf(crewlet.EINVALID, "seat %q is not in the org; `crewlet seats` lists them", sel.Seat)
		}
		seats = []string{sel.Seat}
	} else {
		if _, ok := org.Roles[sel.Role]; !ok {
			return nil, crewlet.Errorf(crewlet.EINVALID, "role %q is not in the org; `crewlet config show` lists the roles", sel.Role)
		}
		for _, s := range org.Seats {
			if s.Role == sel.Role {
				seats = append(seats, s.Handle)
			}
		}
	}
	until := sel.Until
	if until.IsZero() {
		until = time.Now()
	}
	if sel.Since.IsZero() || !sel.Since.Before(until) {
		return nil, crewlet.Errorf(crewlet.EINVALID, "the window is empty: since (%s) must be given and before until (%s)", stamp(sel.Since), stamp(until))
	}
	limit := sel.Limit
	if limit == 0 {
		limit = wire.MaxDatasetTurns
	}
	turns, err := st.FinishedTurns(ctx, seats, sel.Since, until, limit)
	if err != nil {
		return nil, err
	}
	if len(turns) == 0 {
		return nil, crewlet.Errorf(crewlet.EINVALID, "no finished turn of %s started between %s and %s; widen the window", strings.Join(seats, ", "), stamp(sel.Since), stamp(until))
	}
	return turns, nil
}

func listedTurns(ctx context.Context, st *store.Store, ids []string) ([]string, error) {
	var turns []string
	for _, id := range ids {
		if _, _, ok := crewlet.ParseTurnID(id); !ok {
			return nil, crewlet.Errorf(crewlet.EINVALID, "turn id %q is not turn/{handle}/{work_key}; `crewlet seats turns HANDLE` lists them", id)
		}
		if !slices.Contains(turns, id) {
			turns = append(turns, id)
		}
	}
	missing, err := st.UnfinishedOrMissing(ctx, turns)
	if err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, crewlet.Errorf(crewlet.EINVALID, "%d of the turns are not finished turns: %s; a dataset holds finished turns only", len(missing), strings.Join(first(missing, 5), ", "))
	}
	return turns, nil
}

func first(s []string, n int) []string { return s[:min(len(s), n)] }

func stamp(t time.Time) string {
	if t.IsZero() {
		return "not given"
	}
	return t.Format(time.RFC3339)
}
