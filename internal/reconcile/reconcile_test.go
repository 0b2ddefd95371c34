package reconcile

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
)

var discard = slog.New(slog.DiscardHandler)

// bundle is one test's reconciler over its own database and mailbox prefix,
// and a Temporal that cannot be reached: these tests are about what a pass
// does when it cannot list the seats' workflows, and about nudges, which
// need no workflow (a wake that fails is logged, the mail kept).
type bundle struct {
	ctx   context.Context
	url   string
	store *store.Store
	mb    *mailbox.Mailbox
	org   *config.Config
	r     *Reconciler
}

func setup(t testing.TB, orgYAML string) bundle {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	url := testenv.MigratedDatabase(t)
	st := testenv.Store(t, url)
	mb, err := mailbox.Open(ctx, testenv.Stack(t).RedisURL, "rectest"+testenv.Suffix())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mb.Close() })
	org, err := config.Parse([]byte(orgYAML))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, h := range org.Handles() {
			_ = mb.Delete(context.Background(), h)
		}
	})
	tc, err := client.NewLazyClient(client.Options{HostPort: "127.0.0.1:1", Logger: tlog.NewStructuredLogger(discard)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	seats := seatclient.New(tc, org)
	return bundle{ctx: ctx, url: url, store: st, mb: mb, org: org, r: New(st, mb, seats, delivery.New(org, mb, seats, nil, nil, discard), discard)}
}

func (b bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	conn, err := pgx.Connect(b.ctx, b.url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(b.ctx)
	if _, err := conn.Exec(b.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// A pass that cannot list the seats' workflows still creates the rows and
// mailboxes the org lacks, but starts, stops and nudges nothing, and says
// why: unknown is never absent.
func TestPassThatCannotListWorkflowsJudgesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, `
company: { name: acme }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local, idle_nudge: { after: 1s } } }
seats: [ { handle: cto, role: clerk }, { handle: alice, kind: human } ]
`)
	ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
	defer cancel()
	report, err := b.r.Pass(ctx, b.org, "here")
	if err == nil {
		t.Fatal("pass with Temporal unreachable: no error; want the failed list")
	}
	if fmt.Sprint(report.RowsCreated) != "[alice cto]" || fmt.Sprint(report.MailboxesCreated) != "[alice cto]" {
		t.Fatalf("rows created %v, mailboxes created %v; want both seats' each", report.RowsCreated, report.MailboxesCreated)
	}
	if len(report.Started)+len(report.Stopped)+len(report.Nudged)+len(report.Repaired) != 0 {
		t.Fatalf("report %+v; want nothing started, stopped, repaired or nudged", report)
	}
	if len(report.Deferred) != 1 || !strings.Contains(report.Deferred[0].Action, "stop") ||
		!strings.Contains(report.Deferred[0].Reason, "unknown is never absent") {
		t.Fatalf("deferred %+v; want start, stop and nudge deferred, unknown being never absent", report.Deferred)
	}
	if created, err := b.mb.EnsureCreated(b.ctx, "cto"); err != nil || created {
		t.Fatalf("cto's mailbox had to be created after the pass (%v); want it there", err)
	}
}

// A seat waiting on a ticket it opened, quiet for its role's
// idle_nudge.after, gets one nudge per quiet period: a second pass sends
// none, a turn that answered only the nudge does not end the period, and a
// turn on other mail starts a new one, nudged once more. A seat whose role
// has no idle_nudge, one that is not idle, and one with no open ticket of
// its own are never nudged.
func TestIdleNudgeOncePerQuietPeriod(t *testing.T) {
	t.Parallel()
	b := setup(t, `
company: { name: acme }
profiles: { local: { provider: scripted } }
roles:
  lead: { charter: works as lead, profile: local, idle_nudge: { after: 1h } }
  worker: { charter: works as worker, profile: local }
seats:
  - { handle: lead, role: lead }
  - { handle: busy, role: lead }
  - { handle: served, role: lead }
  - { handle: w1, role: worker }
`)
	if err := b.r.PrepareSeats(b.ctx, b.org); err != nil {
		t.Fatal(err)
	}
	open := func(from, to string, age time.Duration) {
		t.Helper()
		tk, _, err := b.store.CreateTicket(b.ctx, from+"->"+to, crewlet.Ticket{From: from, FromSeat: true, To: to, Task: "a job", Conversation: "c-" + from})
		if err != nil {
			t.Fatal(err)
		}
		b.exec(t, `UPDATE tickets SET created_at = now() - make_interval(secs => $2) WHERE id = $1`, tk.ID, age.Seconds())
	}
	open("lead", "w1", 3*time.Hour)
	open("busy", "w1", 3*time.Hour)
	open("w1", "lead", 3*time.Hour) // w1's role has no nudge
	open("lead", "served", 3*time.Hour)
	running := map[string]crewlet.SeatStatus{"lead": crewlet.StatusIdle, "busy": crewlet.StatusRunning,
		"served": crewlet.StatusIdle, "w1": crewlet.StatusIdle}
	pass := func() []string {
		t.Helper()
		var report crewlet.ReconcileReport
		if err := b.r.nudge(b.ctx, b.org, running, &report); err != nil {
			t.Fatal(err)
		}
		return report.Nudged
	}
	nudges := func() []crewlet.Message {
		t.Helper()
		msgs, err := b.mb.Recent(b.ctx, "lead", 100)
		if err != nil {
			t.Fatal(err)
		}
		var out []crewlet.Message
		for _, m := range msgs {
			if strings.HasPrefix(m.EventID, nudgeEventPrefix) {
				out = append(out, m)
			}
		}
		return out
	}
	turn := func(key string, finishedAgo time.Duration, mail ...crewlet.Message) {
		t.Helper()
		raw, err := json.Marshal(mail)
		if err != nil {
			t.Fatal(err)
		}
		b.exec(t, `INSERT INTO turns (seat, work_key, turn_id, epoch, mail, status, started_at, finished_at)
			VALUES ('lead', $1, $1, 1, $2, 'done', now() - make_interval(secs => $3 + 1), now() - make_interval(secs => $3))`,
			key, raw, finishedAgo.Seconds())
	}

	if got := pass(); fmt.Sprint(got) != "[lead]" {
		t.Fatalf("first pass nudged %v; want [lead] (busy is in a turn, served and w1 opened nothing nudgeable)", got)
	}
	first := nudges()
	if len(first) != 1 || first[0].From != crewlet.TicketSender || !strings.Contains(first[0].Body, "2 tickets you opened") {
		t.Fatalf("lead's nudges = %+v; want one from %s naming its two open tickets", first, crewlet.TicketSender)
	}
	if got := pass(); len(got) != 0 || len(nudges()) != 1 {
		t.Fatalf("second pass nudged %v (%d in the mailbox); want none: same quiet period", got, len(nudges()))
	}

	// The nudge's own turn, long ago: still the same quiet period.
	turn("nudge-turn", 2*time.Hour, first[0])
	if got := pass(); len(got) != 0 {
		t.Fatalf("after a turn that answered only the nudge: nudged %v; want none", got)
	}

	// A turn on other mail, recent: a new quiet period, not yet long enough.
	chat := crewlet.Message{EventID: "chat-1", Type: crewlet.MessageChat, From: "operator", To: "lead", Body: "status?"}
	turn("chat-turn", time.Minute, chat)
	if got := pass(); len(got) != 0 {
		t.Fatalf("a minute after a turn on other mail: nudged %v; want none", got)
	}
	// The same turn, older than idle_nudge.after: the new period's nudge.
	b.exec(t, `UPDATE turns SET started_at = now() - interval '2 hours', finished_at = now() - interval '2 hours' WHERE work_key = 'chat-turn'`)
	if got := pass(); fmt.Sprint(got) != "[lead]" || len(nudges()) != 2 {
		t.Fatalf("after a quiet period of its own: nudged %v (%d in the mailbox); want lead once more", got, len(nudges()))
	}
	events, err := b.store.SeatEvents(b.ctx, "lead", 10)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range events {
		if e.Kind == NudgeEventKind {
			n++
		}
	}
	if n != 2 {
		t.Fatalf("lead has %d %s events; want 2", n, NudgeEventKind)
	}
}

// A seat workflow of the org on another task queue is restarted on ours
// only when the tenure it publishes is the one our database granted the
// seat; one whose tenure our database never granted may be another
// deployment's and is left alone, and not started on ours either.
func TestPassRepairsOnlyProvenRunsOnOtherQueues(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sfx := testenv.Suffix()
	ours, old := "rec-ours-"+sfx, "rec-old-"+sfx
	mine, theirs := "mine-"+sfx, "theirs-"+sfx
	b := setup(t, fmt.Sprintf(`
company: { name: acme }
temporal: { task_queue: %s }
nodes: { heartbeat_timeout: 60s }
profiles: { local: { provider: scripted } }
roles: { clerk: { charter: works as clerk, profile: local } }
seats: [ { handle: %s, role: clerk }, { handle: %s, role: clerk } ]
`, ours, mine, theirs))
	tc, err := client.Dial(client.Options{HostPort: testenv.Stack(t).Temporal, Logger: tlog.NewStructuredLogger(discard)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	t.Cleanup(func() {
		for _, h := range []string{mine, theirs} {
			_ = tc.TerminateWorkflow(context.Background(), crewlet.SeatWorkflowID(h), "", "test over")
		}
	})
	seats := seatclient.New(tc, b.org)
	r := New(b.store, b.mb, seats, delivery.New(b.org, b.mb, seats, nil, nil, discard), discard)
	if err := r.PrepareSeats(ctx, b.org); err != nil {
		t.Fatal(err)
	}
	b.exec(t, `UPDATE seats SET node = 'n1:aa', epoch = 4 WHERE handle = $1`, mine)
	b.exec(t, `UPDATE seats SET node = 'n1:bb', epoch = 1 WHERE handle = $1`, theirs)
	startOld := func(handle, node string, epoch int64) string {
		t.Helper()
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: crewlet.SeatWorkflowID(handle), TaskQueue: old,
			TypedSearchAttributes: temporal.NewSearchAttributes(
				temporal.NewSearchAttributeKeyKeyword(crewlet.SANode).ValueSet(node),
				temporal.NewSearchAttributeKeyInt64(crewlet.SAEpoch).ValueSet(epoch)),
		}, crewlet.WorkflowSeat)
		if err != nil {
			t.Fatal(err)
		}
		return run.GetRunID()
	}
	startOld(mine, "n1:aa", 4)
	theirsRun := startOld(theirs, "other:cc", 1)
	testenv.Eventually(t, 20*time.Second, "both runs listed on the old queue", func() error {
		runs, err := seats.RunsOnOtherQueues(ctx)
		if err != nil {
			return err
		}
		n := 0
		for _, run := range runs {
			if run.Handle == mine || run.Handle == theirs {
				n++
			}
		}
		if n != 2 {
			return fmt.Errorf("%d of 2 listed", n)
		}
		return nil
	})

	report, err := r.Pass(ctx, b.org, "here")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(report.Repaired) != fmt.Sprintf("[%s]", mine) || len(report.Started) != 0 {
		t.Fatalf("repaired %v, started %v; want %s repaired, nothing started", report.Repaired, report.Started, mine)
	}
	if len(report.Deferred) != 1 || fmt.Sprint(report.Deferred[0].Seats) != fmt.Sprintf("[%s]", theirs) ||
		report.Deferred[0].Action != "repair" || !strings.Contains(report.Deferred[0].Reason, old) {
		t.Fatalf("deferred %+v; want %s's repair, naming queue %s", report.Deferred, theirs, old)
	}
	queue := func(handle string) (string, string) {
		t.Helper()
		d, err := tc.DescribeWorkflowExecution(ctx, crewlet.SeatWorkflowID(handle), "")
		if err != nil {
			t.Fatal(err)
		}
		return d.GetExecutionConfig().GetTaskQueue().GetName(), d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	if q, _ := queue(mine); q != ours {
		t.Fatalf("%s runs on %q after the repair; want ours, %q", mine, q, ours)
	}
	if q, run := queue(theirs); q != old || run != theirsRun {
		t.Fatalf("%s runs on %q (run %s); want the other deployment's run on %q untouched", theirs, q, run, old)
	}
}
