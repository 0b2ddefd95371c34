// Package schedules owns the org's schedules as Temporal Schedules
// (docs/architecture.md, "Schedules"): Sync makes Temporal's match the
// org, and Service answers and steers them for the API (list, show,
// trigger, pause, unpause, backfill). A fire itself is the ScheduleFire
// workflow and its activities.
package schedules

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/fanout"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
	"github.com/crewlet/crewlet/workflows"
)

// idPrefix begins the id of every org schedule's Temporal Schedule of a
// task queue; Sync deletes those with it that the org no longer has.
func idPrefix(taskQueue string) string { return "crewlet-schedule/" + taskQueue + "/" }

// ID is the id of an org schedule's Temporal Schedule. Temporal appends
// each fire's time to it for the fire's workflow id.
func ID(taskQueue, name string) string { return idPrefix(taskQueue) + name }

// pausedByConfig is the note of a schedule paused because the org says
// paused: true. Sync unpauses only such a schedule when the org says
// paused: false again, so an operator's pause outlives a config apply.
const pausedByConfig = "paused by config"

// overlapPolicy maps a schedule's overlap to Temporal's.
var overlapPolicy = map[string]enumspb.ScheduleOverlapPolicy{
	config.OverlapSkip:      enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	config.OverlapBufferOne: enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE,
	config.OverlapAllow:     enumspb.SCHEDULE_OVERLAP_POLICY_ALLOW_ALL,
}

// fireTimeout bounds a fire's workflow: its wait for the answer and some
// room to deliver and record.
const fireTimeout = workflows.FireAwaitBound + 10*time.Minute

func spec(org *config.Config, s config.Schedule) client.ScheduleSpec {
	sp := client.ScheduleSpec{Jitter: s.Jitter, TimeZoneName: org.ScheduleZone(s)}
	if s.Cron != "" {
		sp.CronExpressions = []string{s.Cron}
	} else {
		sp.Intervals = []client.ScheduleIntervalSpec{{Every: s.Every}}
	}
	return sp
}

func action(org *config.Config, s config.Schedule) *client.ScheduleWorkflowAction {
	tq := org.Temporal.TaskQueue
	return &client.ScheduleWorkflowAction{
		ID: ID(tq, s.Name), Workflow: crewlet.WorkflowScheduleFire, TaskQueue: tq,
		Args:                     []any{crewlet.ScheduleFireInput{Schedule: s.Name}},
		WorkflowExecutionTimeout: fireTimeout,
	}
}

// Sync makes the Temporal Schedules of org's task queue match org's
// schedules: it creates the missing, updates every other one to the org's
// spec, target and policies, and deletes those the org no longer has. It
// is idempotent; call it at boot and on every config apply. A schedule
// paused by an operator stays paused; one the org pauses is paused, and
// unpaused when the org stops pausing it.
func Sync(ctx context.Context, tc client.Client, org *config.Config, log *slog.Logger) error {
	sc := tc.ScheduleClient()
	tq := org.Temporal.TaskQueue
	var errs []error
	want := map[string]bool{}
	for _, s := range org.Schedules {
		id := ID(tq, s.Name)
		want[id] = true
		if err := ensure(ctx, sc, org, s, log); err != nil {
			errs = append(errs, fmt.Errorf("schedule %s: %w", s.Name, err))
		}
	}
	have, err := listIDs(ctx, sc, idPrefix(tq))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, id := range have {
		if want[id] {
			continue
		}
		err := sc.GetHandle(ctx, id).Delete(ctx)
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
		case err != nil:
			errs = append(errs, fmt.Errorf("delete schedule %s: %w", id, err))
		default:
			log.Info("schedule_deleted", "schedule", strings.TrimPrefix(id, idPrefix(tq)), "id", id)
		}
	}
	return errors.Join(errs...)
}

// ensure creates one schedule, or brings an existing one to the org's.
func ensure(ctx context.Context, sc client.ScheduleClient, org *config.Config, s config.Schedule, log *slog.Logger) error {
	id := ID(org.Temporal.TaskQueue, s.Name)
	sp := spec(org, s)
	note := ""
	if s.Paused {
		note = pausedByConfig
	}
	_, err := sc.Create(ctx, client.ScheduleOptions{
		ID: id, Spec: sp, Action: action(org, s),
		Overlap: overlapPolicy[s.Overlap], CatchupWindow: s.CatchupWindow,
		Paused: s.Paused, Note: note,
	})
	var exists *serviceerror.AlreadyExists
	if err == nil {
		log.Info("schedule_created", "schedule", s.Name, "id", id, "paused", s.Paused)
		return nil
	}
	if !errors.As(err, &exists) && !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return err
	}
	// One request sets spec, action, policy and the pause config asks
	// for. The update carries the schedule's whole state, and Temporal
	// applies a pause or unpause sent beside it before the update, so a
	// separate Unpause could be undone by the state this update carried.
	// An operator's pause (its own note) is kept.
	return sc.GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			sched := in.Description.Schedule
			if sched.State == nil {
				sched.State = &client.ScheduleState{}
			}
			switch st := sched.State; {
			case s.Paused && !st.Paused:
				st.Paused, st.Note = true, pausedByConfig
			case !s.Paused && st.Paused && st.Note == pausedByConfig:
				st.Paused, st.Note = false, "unpaused by config"
			}
			sched.Spec = &sp
			sched.Action = action(org, s)
			sched.Policy = &client.SchedulePolicies{Overlap: overlapPolicy[s.Overlap], CatchupWindow: s.CatchupWindow}
			return &client.ScheduleUpdate{Schedule: &sched}, nil
		},
	})
}

// listIDs lists the ids of the Temporal Schedules that begin with prefix.
func listIDs(ctx context.Context, sc client.ScheduleClient, prefix string) ([]string, error) {
	it, err := sc.List(ctx, client.ScheduleListOptions{PageSize: 1000})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	var ids []string
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("list schedules: %w", err)
		}
		if strings.HasPrefix(e.ID, prefix) {
			ids = append(ids, e.ID)
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// Skipped is how many fires of the org schedule Temporal skipped so far
// because the previous fire still ran.
func Skipped(ctx context.Context, tc client.Client, org *config.Config, name string) (int64, error) {
	d, err := tc.ScheduleClient().GetHandle(ctx, ID(org.Temporal.TaskQueue, name)).Describe(ctx)
	if err != nil {
		return 0, err
	}
	return int64(d.Info.NumActionsSkippedOverlap), nil
}

// Service answers and steers the org's schedules for the API.
type Service struct {
	Org      config.Source
	Temporal client.Client
	Store    *store.Store
	Log      *slog.Logger
}

// describeAtOnce bounds the Describe calls of one list.
const describeAtOnce = 8

// List returns every schedule of the org with what Temporal says of it.
func (s *Service) List(ctx context.Context) []wire.Schedule {
	org := s.Org.Now()
	out := make([]wire.Schedule, len(org.Schedules))
	_ = fanout.Each(len(out), describeAtOnce, func(i int) error {
		out[i], _ = s.view(ctx, org, org.Schedules[i])
		return nil
	})
	return out
}

// Show returns one schedule with its fire history.
func (s *Service) Show(ctx context.Context, name string, limit int) (wire.ScheduleDetail, error) {
	sched, org, err := s.named(ctx, name)
	if err != nil {
		return wire.ScheduleDetail{}, err
	}
	view, d := s.view(ctx, org, sched)
	out := wire.ScheduleDetail{Schedule: view, Text: sched.Text, Recent: []wire.ScheduleRun{}, Running: []string{}}
	if d != nil {
		for _, a := range d.Info.RecentActions {
			run := wire.ScheduleRun{ScheduledAt: a.ScheduleTime, StartedAt: a.ActualTime}
			if a.StartWorkflowResult != nil {
				run.WorkflowID = a.StartWorkflowResult.WorkflowID
			}
			out.Recent = append(out.Recent, run)
		}
		for _, w := range d.Info.RunningWorkflows {
			out.Running = append(out.Running, w.WorkflowID)
		}
	}
	if out.History, err = s.Store.ScheduleFires(ctx, name, limit); err != nil {
		return out, err
	}
	return out, nil
}

// view is a schedule as GET /schedules lists it, and Temporal's
// description of it (nil when Temporal could not be asked).
func (s *Service) view(ctx context.Context, org *config.Config, sched config.Schedule) (wire.Schedule, *client.ScheduleDescription) {
	v := wire.Schedule{
		Name: sched.Name, ID: ID(org.Temporal.TaskQueue, sched.Name), Cron: sched.Cron,
		Timezone: org.ScheduleZone(sched), To: sched.To, Overlap: sched.Overlap,
		CatchupWindow: config.ShortDuration(sched.CatchupWindow), NextFires: []time.Time{},
	}
	if sched.Every > 0 {
		v.Every = config.ShortDuration(sched.Every)
	}
	if sched.Jitter > 0 {
		v.Jitter = config.ShortDuration(sched.Jitter)
	}
	d, err := s.Temporal.ScheduleClient().GetHandle(ctx, v.ID).Describe(ctx)
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &nf):
		v.Error = "not in Temporal yet: a worker creates it at boot and on config apply"
		return v, nil
	case err != nil:
		s.Log.WarnContext(ctx, "schedule_describe_failed", "schedule", sched.Name, "error", err)
		v.Error = "Temporal did not answer; see the server log"
		return v, nil
	}
	if st := d.Schedule.State; st != nil {
		v.Paused, v.Note = st.Paused, st.Note
	}
	v.Fires, v.Skipped, v.MissedCatchup = d.Info.NumActions, d.Info.NumActionsSkippedOverlap, d.Info.NumActionsMissedCatchupWindow
	v.NextFires = append(v.NextFires, d.Info.NextActionTimes...)
	return v, d
}

// named is the org's schedule of that name, and the org it is in, or
// ENOTFOUND; a schedule not known yet is looked up again after catching up
// with the active revision.
func (s *Service) named(ctx context.Context, name string) (config.Schedule, *config.Config, error) {
	if err := crewlet.CheckID("name", name); err != nil {
		return config.Schedule{}, nil, err
	}
	sched, org, ok := config.Known(ctx, s.Org, func(c *config.Config) (config.Schedule, bool) { return c.ScheduleNamed(name) })
	if !ok {
		return config.Schedule{}, nil, crewlet.Errorf(crewlet.ENOTFOUND, "no schedule %q in company %s; `crewlet schedules ls` lists them", name, org.Company.Name)
	}
	return sched, org, nil
}

// handle is the Temporal Schedule of a named org schedule, and the org it
// is in.
func (s *Service) handle(ctx context.Context, name string) (client.ScheduleHandle, *config.Config, error) {
	_, org, err := s.named(ctx, name)
	if err != nil {
		return nil, nil, err
	}
	return s.Temporal.ScheduleClient().GetHandle(ctx, ID(org.Temporal.TaskQueue, name)), org, nil
}

// Trigger fires a schedule now, under its own overlap policy: a schedule
// with overlap skip whose previous fire still runs skips this one too.
func (s *Service) Trigger(ctx context.Context, name string) error {
	h, _, err := s.handle(ctx, name)
	if err != nil {
		return err
	}
	return s.temporalErr(ctx, name, h.Trigger(ctx, client.ScheduleTriggerOptions{}))
}

// Pause stops a schedule firing; note says who and why.
func (s *Service) Pause(ctx context.Context, name, note string) error {
	h, _, err := s.handle(ctx, name)
	if err != nil {
		return err
	}
	return s.temporalErr(ctx, name, h.Pause(ctx, client.SchedulePauseOptions{Note: note}))
}

// Unpause lets a paused schedule fire again.
func (s *Service) Unpause(ctx context.Context, name, note string) error {
	h, _, err := s.handle(ctx, name)
	if err != nil {
		return err
	}
	return s.temporalErr(ctx, name, h.Unpause(ctx, client.ScheduleUnpauseOptions{Note: note}))
}

// Backfill runs the fires a schedule had between from and to, one after
// another. A fire that ran already is not answered again (its event id is
// in the completion ledger), so the range may reach only as far back as
// maintenance.ledger_retention keeps that ledger.
func (s *Service) Backfill(ctx context.Context, name string, from, to time.Time) error {
	h, org, err := s.handle(ctx, name)
	if err != nil {
		return err
	}
	now := time.Now()
	oldest := now.Add(-org.Maintenance.LedgerRetention)
	switch {
	case from.IsZero() || to.IsZero():
		return crewlet.Errorf(crewlet.EINVALID, "from and to are required (RFC 3339 times)")
	case !from.Before(to):
		return crewlet.Errorf(crewlet.EINVALID, "from (%s) must be before to (%s)", from.Format(time.RFC3339), to.Format(time.RFC3339))
	case to.After(now):
		return crewlet.Errorf(crewlet.EINVALID, "to (%s) is in the future; a backfill runs fires that were due", to.Format(time.RFC3339))
	case from.Before(oldest):
		return crewlet.Errorf(crewlet.EINVALID, "from (%s) is older than maintenance.ledger_retention (%s) reaches: a fire that far back could be answered twice; start at %s or later",
			from.Format(time.RFC3339), config.ShortDuration(org.Maintenance.LedgerRetention), oldest.Format(time.RFC3339))
	}
	err = h.Backfill(ctx, client.ScheduleBackfillOptions{Backfill: []client.ScheduleBackfill{{
		Start: from, End: to, Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ALL,
	}}})
	return s.temporalErr(ctx, name, err)
}

// temporalErr says what a failed schedule call means to the caller,
// keeping Temporal's text in the log.
func (s *Service) temporalErr(ctx context.Context, name string, err error) error {
	var nf *serviceerror.NotFound
	switch {
	case err == nil:
		return nil
	case errors.As(err, &nf):
		return crewlet.Errorf(crewlet.ENOTFOUND, "schedule %s is not in Temporal yet: a worker creates it at boot and on config apply", name)
	}
	s.Log.WarnContext(ctx, "schedule_call_failed", "schedule", name, "error", err)
	return crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "Temporal did not take the call on schedule %s; see the server log", name)
}
