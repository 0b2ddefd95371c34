// Package spawn owns spawned seats (docs/architecture.md, "Spawned seats"):
// seats created at run time from a role's pool, up to its max_seats
// company-wide, and reaped once idle with nothing open.
package spawn

import (
	"context"
	"log/slog"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
)

// Service spawns and reaps seats.
type Service struct {
	Org     config.Source
	Store   *store.Store
	Mailbox *mailbox.Mailbox
	Seats   *seatclient.Client
	// Prepare gives seats their rows and mailboxes (reconcile's
	// PrepareSeats).
	Prepare func(ctx context.Context, org *config.Config) error
	Log     *slog.Logger
}

// Spawn creates a seat of role from its pool and starts it; by is who asked
// (a seat delegating, a person). The seat answers mail at once: this
// process takes it into its org before it returns, and every other process
// does within a beat, or as soon as it looks the seat up.
func (s *Service) Spawn(ctx context.Context, role, by string) (config.Seat, error) {
	org := s.Org.Now()
	pool, ok := org.PoolOf(role)
	if !ok {
		return config.Seat{}, crewlet.Errorf(crewlet.ENOTFOUND, "role %q has no pool to spawn seats from; add pools: [{role: %s, max_seats: N}] to the org", role, role)
	}
	spawned, err := s.Store.SpawnSeat(ctx, role, by, pool.MaxSeats, func(h string) bool { _, taken := org.Seat(h); return taken })
	if err != nil {
		return config.Seat{}, err
	}
	if live, ok := s.Org.(*config.Live); ok {
		if err := live.CatchUpNow(ctx); err != nil {
			return config.Seat{}, err
		}
	}
	seat, err := config.SeatIn(ctx, s.Org, spawned.Handle)
	if err != nil {
		return config.Seat{}, err
	}
	one := *s.Org.Now()
	one.Seats = []config.Seat{seat}
	if err := s.Prepare(ctx, &one); err != nil {
		return config.Seat{}, err
	}
	if _, err := s.Seats.Start(ctx, seat); err != nil {
		return config.Seat{}, err
	}
	s.Log.InfoContext(ctx, "seat_spawned", "seat", seat.Handle, "role", role, "by", by)
	return seat, nil
}

// Reclaimable returns the live spawned seats the reaper would reap now:
// idle (its workflow says so) for its pool's idle_reap_after, with no
// ticket it serves or opened still open and no mail waiting.
func (s *Service) Reclaimable(ctx context.Context) ([]string, error) {
	acts, err := s.Store.SpawnedActivities(ctx)
	if err != nil || len(acts) == 0 {
		return nil, err
	}
	statuses, err := s.Seats.Statuses(ctx)
	if err != nil {
		return nil, err
	}
	handles := make([]string, len(acts))
	for i, a := range acts {
		handles[i] = a.Handle
	}
	backlogs, err := s.Mailbox.Backlogs(ctx, handles)
	if err != nil {
		return nil, err
	}
	org := s.Org.Now()
	var out []string
	for _, a := range acts {
		after := config.DefaultIdleReapAfter
		if pool, ok := org.PoolOf(a.Role); ok {
			after = pool.IdleReapAfter
		}
		if a.IdleFor >= after && a.OpenTickets == 0 && statuses[a.Handle] == crewlet.StatusIdle && backlogs[a.Handle].Waiting == 0 {
			out = append(out, a.Handle)
		}
	}
	return out, nil
}

// Reap reaps the reclaimable seats: each leaves the org, and the reconcile
// duty stops its workflow and retires its mailbox by the usual rules. A
// seat that mail reached while it was being reaped is made live again.
func (s *Service) Reap(ctx context.Context) ([]string, error) {
	candidates, err := s.Reclaimable(ctx)
	if err != nil || len(candidates) == 0 {
		return nil, err
	}
	var reaped []string
	for _, h := range candidates {
		ok, err := s.Store.ReapSeat(ctx, h)
		if err != nil {
			return reaped, err
		}
		if !ok {
			continue
		}
		backlog, err := s.Mailbox.Backlogs(ctx, []string{h})
		if err == nil && backlog[h].Waiting > 0 {
			err = s.Store.UnreapSeat(ctx, h)
			s.Log.InfoContext(ctx, "seat_reap_undone", "seat", h, "reason", "mail reached it while it was reaped")
			if err != nil {
				return reaped, err
			}
			continue
		}
		if err != nil {
			return reaped, err
		}
		s.Log.InfoContext(ctx, "seat_reaped", "seat", h)
		reaped = append(reaped, h)
	}
	if live, ok := s.Org.(*config.Live); ok && len(reaped) > 0 {
		return reaped, live.CatchUpNow(ctx)
	}
	return reaped, nil
}
