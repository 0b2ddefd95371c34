package activities

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
)

// Schedules runs the fires of the org's schedules
// (docs/architecture.md, "Schedules").
type Schedules struct {
	Store    *store.Store
	Org      config.Source
	Delivery *delivery.Service
	Tickets  *tickets.Service
	// Skipped reads how many fires of a schedule Temporal skipped for
	// overlap so far; a fire that sees the count grew logs it. Nil reads
	// none.
	Skipped func(ctx context.Context, name string) (int64, error)
	Log     *slog.Logger
	// Poll is the longest pause between two looks at the completion
	// ledger while a fire waits for its answer.
	Poll time.Duration
}

// DeliverFire delivers a fire's message: to the seat the fire went to when
// it ran before, else to the schedule's seat or one seat of its role, under
// the event id of (schedule, fire time). Delivering it again lands nothing
// new, and a seat answers it once.
func (a *Schedules) DeliverFire(ctx context.Context, in crewlet.DeliverFireInput) (crewlet.DeliverFireOutput, error) {
	// A fire of a schedule just added may reach a worker that has not
	// taken its revision yet: look again after catching up.
	sched, _, ok := config.Known(ctx, a.Org, func(c *config.Config) (config.Schedule, bool) { return c.ScheduleNamed(in.Schedule) })
	if !ok {
		a.Log.WarnContext(ctx, "schedule_fire_dropped", "schedule", in.Schedule, "fire_time", in.FireTime, "reason", "not in the org")
		return crewlet.DeliverFireOutput{}, crewlet.Errorf(crewlet.ENOTFOUND, "no schedule %q in the org; its Temporal Schedule goes at the next sync", in.Schedule)
	}
	seat, err := a.fireSeat(ctx, sched, in.FireTime)
	if err != nil {
		return crewlet.DeliverFireOutput{}, err
	}
	var skipped int64
	if a.Skipped != nil {
		var err error
		if skipped, err = a.Skipped(ctx, sched.Name); err != nil {
			// Only the history's skip count suffers; the fire goes on.
			a.Log.WarnContext(ctx, "schedule_skips_unread", "schedule", sched.Name, "error", err)
		}
	}
	before, err := a.Store.LastScheduleSkips(ctx, sched.Name)
	if err != nil {
		return crewlet.DeliverFireOutput{}, err
	}
	eventID := crewlet.ScheduleFireEventID(sched.Name, in.FireTime)
	fire, first, err := a.Store.ClaimScheduleFire(ctx, sched.Name, in.FireTime, seat, eventID, max(skipped, before))
	if err != nil {
		return crewlet.DeliverFireOutput{}, err
	}
	if first && skipped > before {
		a.Log.InfoContext(ctx, "schedule_fires_skipped", "schedule", sched.Name, "skipped", skipped-before, "skipped_total", skipped,
			"reason", "overlap "+sched.Overlap+": the previous fire's message was still being answered")
	}
	to, err := config.SeatIn(ctx, a.Org, fire.Seat)
	if err != nil {
		// The seat the fire went to the first time left the org.
		return crewlet.DeliverFireOutput{}, err
	}
	if _, err := a.Delivery.Deliver(ctx, crewlet.Message{
		EventID: fire.EventID, Type: crewlet.MessageChat, From: crewlet.ScheduleSender, To: to.Handle,
		Conversation: fire.EventID, Body: sched.Text, SentAt: time.Now().UTC(),
	}); err != nil {
		return crewlet.DeliverFireOutput{}, err
	}
	if first {
		a.Log.InfoContext(ctx, "schedule_fired", "schedule", sched.Name, "fire_time", in.FireTime, "seat", to.Handle, "event_id", fire.EventID)
	}
	return crewlet.DeliverFireOutput{Seat: to.Handle, EventID: fire.EventID, Await: to.Kind == string(crewlet.SeatAgent)}, nil
}

// AwaitFire waits until the seat's completion ledger records the fire's
// message, or until the activity's deadline is near; it reports whether
// the message was answered. It looks often at first, then every Poll.
func (a *Schedules) AwaitFire(ctx context.Context, in crewlet.AwaitFireInput) (bool, error) {
	stopAt := time.Now().Add(time.Hour)
	if deadline, ok := ctx.Deadline(); ok {
		stopAt = deadline.Add(-5 * time.Second)
	}
	poll := a.Poll
	if poll <= 0 {
		poll = 2 * time.Second
	}
	wait := 100 * time.Millisecond
	for {
		done, err := a.Store.LedgerRecorded(ctx, in.Seat, []string{in.EventID})
		switch {
		case err != nil:
			a.Log.WarnContext(ctx, "schedule_fire_unread", "schedule", in.Schedule, "seat", in.Seat, "error", err)
		case done[in.EventID]:
			if err := a.Store.ScheduleFireHandled(ctx, in.Schedule, in.FireTime); err != nil {
				return false, err
			}
			return true, nil
		}
		activity.RecordHeartbeat(ctx)
		if time.Now().Add(wait).After(stopAt) {
			a.Log.WarnContext(ctx, "schedule_fire_unanswered", "schedule", in.Schedule, "fire_time", in.FireTime, "seat", in.Seat, "event_id", in.EventID)
			return false, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(wait):
		}
		wait = min(2*wait, poll)
	}
}

// fireSeat is the seat a fire goes to: the schedule's seat, the seat of
// its role:NAME routed as a ticket is, or for spawn:ROLE a seat spawned
// for the fire. A fire run again goes to the seat it was claimed for, so a
// retry spawns nothing more; two first runs racing may each spawn one, and
// the one not claimed is reaped once idle.
func (a *Schedules) fireSeat(ctx context.Context, sched config.Schedule, fireTime time.Time) (string, error) {
	switch {
	case strings.HasPrefix(sched.To, config.SpawnPrefix):
		seat, found, err := a.Store.ScheduleFireSeat(ctx, sched.Name, fireTime)
		if err != nil || found {
			return seat, err
		}
		return a.Tickets.Route(ctx, sched.To)
	case strings.HasPrefix(sched.To, crewlet.RolePrefix):
		return a.Tickets.Route(ctx, sched.To)
	}
	return sched.To, nil
}
