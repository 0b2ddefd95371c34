package schedules_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/schedules"
	"github.com/crewlet/crewlet/internal/testenv"
)

// org is an org file with the given schedules on its own task queue.
func org(t *testing.T, taskQueue, schedulesYAML string) *config.Config {
	t.Helper()
	c, err := config.Parse([]byte(fmt.Sprintf(`
company: { name: acme, timezone: Europe/Berlin }
temporal: { task_queue: %s }
profiles: { p: { provider: scripted } }
roles: { eng: { charter: works as eng, profile: p } }
seats: [ { handle: cto, role: eng } ]
schedules:
%s`, taskQueue, schedulesYAML)))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Sync creates what the org has, brings each schedule to the org's spec
// and policies, deletes what the org dropped, and keeps an operator's pause
// while undoing the org's own once the org stops pausing.
func TestSync(t *testing.T) {
	stack := testenv.Stack(t)
	tc, err := client.Dial(client.Options{HostPort: stack.Temporal, Namespace: "default"})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	ctx := context.Background()
	tq := "sync-" + testenv.Suffix()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	t.Cleanup(func() {
		for _, name := range []string{"standup", "build", "gone"} {
			_ = tc.ScheduleClient().GetHandle(ctx, schedules.ID(tq, name)).Delete(ctx)
		}
	})
	describe := func(name string) *client.ScheduleDescription {
		t.Helper()
		d, err := tc.ScheduleClient().GetHandle(ctx, schedules.ID(tq, name)).Describe(ctx)
		if err != nil {
			t.Fatalf("describe %s: %v", name, err)
		}
		return d
	}

	first := org(t, tq, `
  - { name: standup, cron: "0 9 * * 1-5", to: cto, text: plan }
  - { name: build, every: 1h, to: cto, text: check, paused: true, overlap: allow }
  - { name: gone, every: 1h, to: cto, text: bye }
  - { name: report, every: 1h, to: cto, text: sum up }
`)
	if err := schedules.Sync(ctx, tc, first, log); err != nil {
		t.Fatalf("first sync: %v", err)
	}
	standup := describe("standup")
	if got := standup.Schedule.Spec; got.TimeZoneName != "Europe/Berlin" || len(got.CronExpressions)+len(got.Calendars) == 0 {
		t.Errorf("standup spec = %+v; want the cron on the company's zone", got)
	}
	if p := standup.Schedule.Policy; p.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_SKIP || p.CatchupWindow != time.Hour {
		t.Errorf("standup policy = %+v; want skip and a 1h catch-up window", p)
	}
	if st := describe("build").Schedule.State; !st.Paused || st.Note != "paused by config" {
		t.Errorf("build state = %+v; want paused by config", st)
	}

	// An operator pauses standup; the org unpauses build, pauses report,
	// changes standup's overlap and drops gone.
	if err := tc.ScheduleClient().GetHandle(ctx, schedules.ID(tq, "standup")).Pause(ctx, client.SchedulePauseOptions{Note: "paused by ops: holiday"}); err != nil {
		t.Fatal(err)
	}
	second := org(t, tq, `
  - { name: standup, cron: "0 10 * * 1-5", to: cto, text: plan, overlap: buffer_one }
  - { name: build, every: 30m, to: cto, text: check }
  - { name: report, every: 1h, to: cto, text: sum up, paused: true }
`)
	testenv.Eventually(t, 20*time.Second, "gone deleted by a sync", func() error {
		if err := schedules.Sync(ctx, tc, second, log); err != nil {
			return err
		}
		if _, err := tc.ScheduleClient().GetHandle(ctx, schedules.ID(tq, "gone")).Describe(ctx); err == nil {
			return fmt.Errorf("gone is still there")
		}
		return nil
	})
	// Temporal's scheduler takes an update a moment after it answered,
	// and a describe may answer before: on the dev server under a full
	// suite's load, once after more than 10 s. Each sync is one update per
	// schedule, pause included: a pause or unpause sent beside it was
	// applied first and then undone by the state the update carried.
	testenv.Eventually(t, 60*time.Second, "standup buffer_one, still paused; build unpaused and every 30m; report paused by config", func() error {
		standup := describe("standup")
		if p := standup.Schedule.Policy; p.Overlap != enumspb.SCHEDULE_OVERLAP_POLICY_BUFFER_ONE {
			return fmt.Errorf("standup overlap = %s; want buffer_one", p.Overlap)
		}
		if st := standup.Schedule.State; !st.Paused || st.Note != "paused by ops: holiday" {
			return fmt.Errorf("standup state = %+v; want the operator's pause kept", st)
		}
		build := describe("build")
		if st := build.Schedule.State; st.Paused {
			return fmt.Errorf("build state = %+v; want unpaused once the org stopped pausing it", st)
		}
		if iv := build.Schedule.Spec.Intervals; len(iv) != 1 || iv[0].Every != 30*time.Minute {
			return fmt.Errorf("build intervals = %+v; want every 30m", iv)
		}
		if st := describe("report").Schedule.State; !st.Paused || st.Note != "paused by config" {
			return fmt.Errorf("report state = %+v; want paused by config", st)
		}
		return nil
	})
}
