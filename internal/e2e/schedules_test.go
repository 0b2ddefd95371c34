package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/schedules"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// scheduleOrg has a fast seat pair (role fast) and a slow seat whose turns
// take seconds, and one schedule of each kind the tests drive.
const scheduleOrg = `
company: { name: clockwork }
profiles:
  fast: { provider: scripted, rules: [ { match: "(?s).*", reply: "done: {{.Text}}" } ] }
  slow: { provider: scripted, delay: 4s, rules: [ { match: "(?s).*", reply: "slowly done: {{.Text}}" } ] }
roles:
  fast: { charter: quick, profile: fast }
  slow: { charter: slow, profile: slow }
seats:
  - { handle: ana, role: fast }
  - { handle: ben, role: fast }
  - { handle: sol, role: slow }
schedules:
  # Never due during a test: driven by trigger and by hand.
  - { name: nightly, cron: "0 3 * * *", timezone: UTC, to: ana, text: "nightly report" }
  - { name: routed, cron: "0 3 * * *", timezone: UTC, to: "role:fast", text: "who takes this?" }
  # Fires every 2s into a seat whose turn takes 4s: overlap skip skips.
  - { name: tick, every: 2s, to: sol, text: "tick" }
  # Paused by the file; the operator unpauses it.
  - { name: held, every: 1s, to: ben, text: "held tick", paused: true }
  # Backfilled.
  - { name: minutely, every: 1m, to: ana, text: "minute report" }
`

// newScheduleCompany prepares a company of scheduleOrg whose org
// schedules are deleted from Temporal when the test ends.
func newScheduleCompany(t *testing.T) *company {
	t.Helper()
	path := filepath.Join(t.TempDir(), "org.yaml")
	if err := os.WriteFile(path, []byte(scheduleOrg), 0o600); err != nil {
		t.Fatal(err)
	}
	c := newCompany(t, path)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, name := range []string{"nightly", "routed", "tick", "held", "minutely", "added"} {
			_ = c.temporal.ScheduleClient().GetHandle(ctx, schedules.ID(c.taskQueue, name)).Delete(ctx)
		}
	})
	return c
}

func (c *company) schedule(name string) wire.ScheduleDetail {
	c.t.Helper()
	var d wire.ScheduleDetail
	if err := c.call(http.MethodGet, "/schedules/"+name+"?limit=100", nil, &d); err != nil {
		c.t.Fatalf("GET /schedules/%s: %v", name, err)
	}
	return d
}

// answers counts the seat's answers to a fire's message; a fire's
// conversation is its own, under its event id.
func (c *company) answers(eventID string) int {
	n := 0
	for _, conv := range c.conversation(eventID) {
		for _, m := range conv.Messages {
			if m.InReplyTo == eventID {
				n++
			}
		}
	}
	return n
}

// fireByHand starts a ScheduleFire for a fire time as a second start of
// that fire would: another workflow id, the same schedule and time.
func (c *company) fireByHand(id, schedule string, at time.Time) client.WorkflowRun {
	c.t.Helper()
	run, err := c.temporal.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: c.taskQueue},
		crewlet.WorkflowScheduleFire, crewlet.ScheduleFireInput{Schedule: schedule, FireTime: at})
	if err != nil {
		c.t.Fatalf("start fire %s: %v", id, err)
	}
	return run
}

func TestSchedules(t *testing.T) {
	c := newScheduleCompany(t)
	serve := c.serve()
	testenv.Eventually(t, 30*time.Second, "every schedule in Temporal", func() error {
		var list []wire.Schedule
		if err := c.call(http.MethodGet, "/schedules", nil, &list); err != nil {
			return err
		}
		if len(list) != 5 {
			return fmt.Errorf("%d schedules listed, want 5", len(list))
		}
		for _, s := range list {
			if s.Error != "" {
				return fmt.Errorf("%s: %s", s.Name, s.Error)
			}
		}
		return nil
	})

	t.Run("a fire started twice for one fire time is answered once", func(t *testing.T) {
		at := time.Now().UTC().Truncate(time.Second).Add(-time.Hour)
		// Twice at once, then once more after both ended.
		first, second := c.fireByHand("fire-twice-1", "nightly", at), c.fireByHand("fire-twice-2", "nightly", at)
		var r1, r2, r3 crewlet.ScheduleFireResult
		for _, r := range []struct {
			run client.WorkflowRun
			out *crewlet.ScheduleFireResult
		}{{first, &r1}, {second, &r2}} {
			if err := r.run.Get(context.Background(), r.out); err != nil {
				t.Fatalf("fire %s: %v", r.run.GetID(), err)
			}
		}
		if err := c.fireByHand("fire-twice-3", "nightly", at).Get(context.Background(), &r3); err != nil {
			t.Fatalf("third fire: %v", err)
		}
		want := crewlet.ScheduleFireEventID("nightly", at)
		for i, r := range []crewlet.ScheduleFireResult{r1, r2, r3} {
			if r.EventID != want || r.Seat != "ana" || !r.Handled {
				t.Errorf("fire %d = %+v; want event %s to ana, handled", i+1, r, want)
			}
		}
		if n := c.answers(want); n != 1 {
			t.Errorf("ana answered the fire %d times; want once", n)
		}
		d := c.schedule("nightly")
		if len(d.History) != 1 || !d.History[0].FireTime.Equal(at) || d.History[0].HandledAt == nil {
			t.Errorf("history = %+v; want one answered fire at %s", d.History, at)
		}
	})

	t.Run("trigger fires now and routes a role target to one of its seats", func(t *testing.T) {
		out, err := c.cli("schedules", "trigger", "routed")
		if err != nil {
			t.Fatalf("schedules trigger: %v\n%s", err, out)
		}
		var fire wire.ScheduleFire
		testenv.Eventually(t, 30*time.Second, "the triggered fire answered", func() error {
			d := c.schedule("routed")
			if len(d.History) != 1 || d.History[0].HandledAt == nil {
				return fmt.Errorf("history %+v", d.History)
			}
			fire = d.History[0]
			return nil
		})
		if fire.Seat != "ana" && fire.Seat != "ben" {
			t.Errorf("routed to %q; want a seat of role fast", fire.Seat)
		}
		if n := c.answers(fire.EventID); n != 1 {
			t.Errorf("%d answers to the triggered fire; want 1", n)
		}
		if d := c.schedule("routed"); d.Fires != 1 {
			t.Errorf("Temporal counts %d fires of routed; want 1", d.Fires)
		}
	})

	t.Run("overlap skip skips while the previous fire's turn runs, and says so", func(t *testing.T) {
		var d wire.ScheduleDetail
		testenv.Eventually(t, 60*time.Second, "a tick skipped and a later tick answered", func() error {
			d = c.schedule("tick")
			for _, f := range d.History {
				if f.SkippedBefore > 0 && f.HandledAt != nil {
					return nil
				}
			}
			return fmt.Errorf("skipped %d, history %+v", d.Skipped, d.History)
		})
		if d.Skipped < 1 {
			t.Errorf("Temporal counts %d skipped ticks; want some", d.Skipped)
		}
		for _, f := range d.History {
			if f.HandledAt != nil && c.answers(f.EventID) != 1 {
				t.Errorf("tick at %s answered %d times; want once", f.FireTime, c.answers(f.EventID))
			}
		}
		// No two ticks' turns overlapped: each began after the one before
		// was answered.
		for i := 0; i+1 < len(d.History); i++ {
			newer, older := d.History[i], d.History[i+1]
			if older.HandledAt != nil && newer.FiredAt.Before(*older.HandledAt) {
				t.Errorf("tick at %s fired at %s, before the tick at %s was answered (%s)", newer.FireTime, newer.FiredAt, older.FireTime, *older.HandledAt)
			}
		}
		testenv.Eventually(t, 10*time.Second, "schedule_fires_skipped logged", func() error {
			if !strings.Contains(serve.out.String(), "schedule_fires_skipped") {
				return fmt.Errorf("not logged yet")
			}
			return nil
		})
		out, err := c.cli("schedules", "show", "tick")
		if err != nil || !strings.Contains(out, "skipped for overlap") {
			t.Errorf("schedules show tick: %v\n%s", err, out)
		}
		t.Logf("fire history of tick:\n%s", out)
	})

	t.Run("pause and unpause", func(t *testing.T) {
		d := c.schedule("held")
		if !d.Paused || d.Note != "paused by config" || d.Fires != 0 {
			t.Fatalf("held = paused %v, note %q, %d fires; want paused by config, none", d.Paused, d.Note, d.Fires)
		}
		if out, err := c.cli("schedules", "unpause", "held", "--reason", "go"); err != nil {
			t.Fatalf("schedules unpause: %v\n%s", err, out)
		}
		testenv.Eventually(t, 30*time.Second, "held fires once unpaused", func() error {
			if d := c.schedule("held"); len(d.History) == 0 || d.History[len(d.History)-1].HandledAt == nil {
				return fmt.Errorf("history %+v", d.History)
			}
			return nil
		})
		if out, err := c.cli("schedules", "pause", "held", "--reason", "enough"); err != nil {
			t.Fatalf("schedules pause: %v\n%s", err, out)
		}
		// Temporal's scheduler takes a pause as a request; a describe may
		// answer before it took it.
		var paused wire.ScheduleDetail
		testenv.Eventually(t, 10*time.Second, "held paused with the operator's note", func() error {
			paused = c.schedule("held")
			if !paused.Paused || !strings.Contains(paused.Note, "paused by") || !strings.Contains(paused.Note, "enough") {
				return fmt.Errorf("held after pause: paused %v, note %q", paused.Paused, paused.Note)
			}
			return nil
		})
		// The positive signal that time passed: tick fired twice more.
		ticks := c.schedule("tick").Fires
		testenv.Eventually(t, 60*time.Second, "two more ticks", func() error {
			if n := c.schedule("tick").Fires; n < ticks+2 {
				return fmt.Errorf("%d tick fires, want %d", n, ticks+2)
			}
			return nil
		})
		if n := c.schedule("held").Fires; n != paused.Fires {
			t.Errorf("held fired %d times while paused (from %d to %d)", n-paused.Fires, paused.Fires, n)
		}
	})

	t.Run("backfill runs the missed fires once each, also when asked twice", func(t *testing.T) {
		to := time.Now().UTC().Truncate(time.Minute)
		from := to.Add(-3 * time.Minute)
		before := c.schedule("minutely").Fires
		inRange := func(d wire.ScheduleDetail) []wire.ScheduleFire {
			var out []wire.ScheduleFire
			for _, f := range d.History {
				if !f.FireTime.Before(from) && f.FireTime.Before(to) {
					out = append(out, f)
				}
			}
			return out
		}
		backfill := func() {
			out, err := c.cli("schedules", "backfill", "minutely", "--from", from.Format(time.RFC3339), "--to", to.Add(-time.Second).Format(time.RFC3339))
			if err != nil {
				t.Fatalf("schedules backfill: %v\n%s", err, out)
			}
		}
		backfill()
		testenv.Eventually(t, 60*time.Second, "three backfilled fires answered", func() error {
			fires := inRange(c.schedule("minutely"))
			if len(fires) != 3 {
				return fmt.Errorf("%d fires in range: %+v", len(fires), fires)
			}
			for _, f := range fires {
				if f.HandledAt == nil {
					return fmt.Errorf("fire %s not answered yet", f.FireTime)
				}
			}
			return nil
		})
		backfill()
		testenv.Eventually(t, 60*time.Second, "the second backfill's fires ran", func() error {
			d := c.schedule("minutely")
			if d.Fires < before+6 || len(d.Running) > 0 {
				return fmt.Errorf("%d fires (want %d), running %v", d.Fires, before+6, d.Running)
			}
			return nil
		})
		for _, f := range inRange(c.schedule("minutely")) {
			if n := c.answers(f.EventID); n != 1 {
				t.Errorf("minutely at %s answered %d times; want once", f.FireTime, n)
			}
		}
		status, body, err := c.raw(http.MethodPost, "/schedules/minutely/backfill", wire.ScheduleBackfill{From: to.Add(-30 * 24 * time.Hour), To: to})
		if err != nil || status != http.StatusBadRequest || !strings.Contains(string(body), "ledger_retention") {
			t.Errorf("backfill past the ledger's retention = %d %s %v; want 400 naming ledger_retention", status, body, err)
		}
	})

	t.Run("ls and unknown names", func(t *testing.T) {
		out, err := c.cli("schedules", "ls")
		if err != nil || !strings.Contains(out, "nightly") || !strings.Contains(out, "role:fast") {
			t.Errorf("schedules ls: %v\n%s", err, out)
		}
		if status, _, _ := c.raw(http.MethodGet, "/schedules/nope", nil); status != http.StatusNotFound {
			t.Errorf("GET /schedules/nope = %d; want 404", status)
		}
	})
}

// A fire whose turn is running when the node running it (the seat's host,
// and the fire's own wait) is killed is answered once, on the next node,
// and the fire sees it answered.
func TestScheduleFireSurvivesANodeKill(t *testing.T) {
	c := newScheduleCompany(t)
	c.apiServer()
	n1 := c.worker("n1")
	c.waitAttached(30 * time.Second)
	// tick would keep sol busy; only the fire by hand goes to it here.
	if err := c.call(http.MethodPost, "/schedules/tick/pause", wire.ScheduleNote{Reason: "quiet"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "sol idle", func() error {
		if st := c.state("sol"); st.Turn != nil {
			return fmt.Errorf("sol runs turn %s", st.Turn.ID)
		}
		return nil
	})
	at := time.Now().UTC().Truncate(time.Second).Add(-time.Minute)
	run := c.fireByHand("fire-kill", "tick", at)
	testenv.Eventually(t, 30*time.Second, "the fire's turn running on n1", func() error {
		if st := c.state("sol"); st.Turn == nil {
			return fmt.Errorf("no turn yet")
		}
		return nil
	})
	n1.kill(t)
	c.worker("n2")
	var out crewlet.ScheduleFireResult
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := run.Get(ctx, &out); err != nil {
		t.Fatalf("fire: %v", err)
	}
	if !out.Handled || out.Seat != "sol" {
		t.Errorf("fire = %+v; want handled by sol", out)
	}
	if n := c.answers(out.EventID); n != 1 {
		t.Errorf("sol answered the fire %d times; want once", n)
	}
}

// A config apply creates, changes and deletes schedules without a restart,
// and refuses a catch-up window the completion ledger does not outlive.
func TestConfigApplyChangesSchedules(t *testing.T) {
	c := newScheduleCompany(t)
	c.serve()
	next := strings.NewReplacer(
		"  - { name: nightly, cron: \"0 3 * * *\", timezone: UTC, to: ana, text: \"nightly report\" }\n", "",
		"  - { name: tick, every: 2s, to: sol, text: \"tick\" }\n", "  - { name: added, cron: \"0 4 * * *\", to: ben, text: \"added later\" }\n",
	).Replace(scheduleOrg)
	if next == scheduleOrg {
		t.Fatal("the replacements changed nothing")
	}
	out, err := c.cli("config", "apply", writeFile(t, "next.yaml", next))
	if err != nil || !strings.Contains(out, "schedules.added") || !strings.Contains(out, "schedules.nightly") {
		t.Fatalf("config apply: %v\n%s", err, out)
	}
	t.Logf("apply report:\n%s", out)
	testenv.Eventually(t, 30*time.Second, "added created, nightly and tick deleted", func() error {
		var list []wire.Schedule
		if err := c.call(http.MethodGet, "/schedules", nil, &list); err != nil {
			return err
		}
		for _, s := range list {
			if s.Error != "" {
				return fmt.Errorf("%s: %s", s.Name, s.Error)
			}
		}
		for _, gone := range []string{"nightly", "tick"} {
			if _, err := c.temporal.ScheduleClient().GetHandle(context.Background(), schedules.ID(c.taskQueue, gone)).Describe(context.Background()); err == nil {
				return fmt.Errorf("%s is still in Temporal", gone)
			}
		}
		return nil
	})
	if out, err := c.cli("schedules", "trigger", "added"); err != nil {
		t.Fatalf("trigger added: %v\n%s", err, out)
	}
	testenv.Eventually(t, 30*time.Second, "added's fire answered by ben", func() error {
		d := c.schedule("added")
		if len(d.History) != 1 || d.History[0].HandledAt == nil || d.History[0].Seat != "ben" {
			return fmt.Errorf("history %+v", d.History)
		}
		return nil
	})
	long := strings.Replace(next, `text: "added later" }`, `text: "added later", catchup_window: 200h }`, 1)
	if out, err := c.cli("config", "apply", writeFile(t, "long.yaml", long)); err == nil || !strings.Contains(out, "catchup_window") || !strings.Contains(out, "ledger_retention") {
		t.Fatalf("apply of a catch-up window past the ledger's retention: %v\n%s", err, out)
	}
}
