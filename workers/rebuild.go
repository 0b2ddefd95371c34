package workers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/reconcile"
	"github.com/crewlet/crewlet/internal/schedules"
)

// Temporal's state is rebuildable
// (docs/operations.md, "When Temporal loses its state"): everything a
// company must not lose lives in Postgres and Redis, and Temporal holds the
// running executions, the duty and org Schedules and the worker
// deployment's routing. A Temporal that comes back empty or older (a dev
// server restarted, a namespace recreated, a restore from a backup, a move
// to another cluster) answers every call as if nothing were wrong, so each
// node checks, on a loop of its own, that what it made there at boot is
// still there, and makes it again when it is not.

// temporalCheckEvery is how often a node checks Temporal's state: two
// describes, the same for 10 seats or 10,000. Noticing a loss takes at
// most this long after Temporal answers again; the rebuild itself is
// bounded by promoteWithin.
const temporalCheckEvery = 15 * time.Second

// temporalCheckWithin bounds one check's calls, so a Temporal that hangs
// delays the next check, never the loop for good.
const temporalCheckWithin = 5 * time.Second

// What temporal_state_lost names as missing.
const (
	missingDuties             = "duty_schedules"
	missingDutiesReplaced     = "duty_schedules_replaced"
	missingDutiesRolledBack   = "duty_schedules_rolled_back"
	missingDeployment         = "worker_deployment"
	missingDeploymentReplaced = "worker_deployment_replaced"
	missingCurrentVersion     = "current_version"
)

// temporalFacts is what one check read of Temporal.
type temporalFacts struct {
	// DutyFound says the reconcile duty's Schedule exists, DutyCreated
	// when Temporal created it and DutyActions how many runs it started:
	// a count that only grows, unless Temporal went back to a backup.
	DutyFound   bool
	DutyCreated time.Time
	DutyActions int
	// DeploymentFound says the worker deployment exists, DeploymentCreated
	// when Temporal created it, and Current is its current build ("" for
	// none).
	DeploymentFound   bool
	DeploymentCreated time.Time
	Current           string
}

// temporalSeen is what the node last read while Temporal held its state;
// zero values are what it has not seen yet.
type temporalSeen struct {
	DutyCreated       time.Time
	DutyActions       int
	DeploymentCreated time.Time
	Current           string
}

// rebuildPlan is what a node does about what it read.
type rebuildPlan struct {
	// Missing names what Temporal lost; empty means nothing was.
	Missing []string
	// Promote says to make the node's build current by the promotion rule
	// (as under PromoteFirst: a lost routing is not a deploy, so
	// PromoteAlways does not take over a build a peer made current).
	Promote bool
	// Fix is what an operator must do that the node will not, if anything.
	Fix string
}

// planRebuild is the rule: a node that ensured the duty Schedules at boot
// and finds the reconcile duty's gone, or made again since it last looked
// (a peer rebuilt first), or with fewer runs than it saw (Temporal restored
// from an older backup), or finds the deployment gone or made again, or
// its current version gone, takes Temporal's state as lost and rebuilds it
// all: every step is idempotent, so a node that rebuilds after a peer only
// repeats it. Unknown is never missing: the caller plans nothing from a
// check that failed.
func planRebuild(f temporalFacts, seen temporalSeen, policy string) rebuildPlan {
	var p rebuildPlan
	switch {
	case !f.DutyFound:
		p.Missing = append(p.Missing, missingDuties)
	case !seen.DutyCreated.IsZero() && !f.DutyCreated.Equal(seen.DutyCreated):
		p.Missing = append(p.Missing, missingDutiesReplaced)
	case f.DutyActions < seen.DutyActions:
		p.Missing = append(p.Missing, missingDutiesRolledBack)
	}
	switch {
	case !f.DeploymentFound:
		if !seen.DeploymentCreated.IsZero() {
			p.Missing = append(p.Missing, missingDeployment)
		}
	case !seen.DeploymentCreated.IsZero() && !f.DeploymentCreated.Equal(seen.DeploymentCreated):
		p.Missing = append(p.Missing, missingDeploymentReplaced)
	}
	if f.Current == "" && seen.Current != "" {
		p.Missing = append(p.Missing, missingCurrentVersion)
	}
	if len(p.Missing) == 0 {
		return p
	}
	switch {
	case policy != config.PromoteNever:
		p.Promote = true
	case f.Current == "":
		p.Fix = "temporal.deployment.promote is never, so no node makes a build current: run temporal worker deployment set-current-version (docs/versioning.md)"
	}
	return p
}

// duty is one duty's Temporal Schedule.
type duty struct {
	id, workflow string
	every        time.Duration
}

// dutiesOf are the duty Schedules of org's task queue, at org's cadences.
func dutiesOf(org *config.Config) []duty {
	tq := org.Temporal.TaskQueue
	return []duty{
		{RebalanceScheduleID(tq), crewlet.WorkflowRebalance, org.Nodes.RebalanceInterval},
		{MaintenanceScheduleID(tq), crewlet.WorkflowMaintenance, org.Maintenance.Interval},
		{ReconcileScheduleID(tq), crewlet.WorkflowReconcile, org.Nodes.ReconcileInterval},
		{HealthScheduleID(tq), crewlet.WorkflowHealth, org.Health.Interval},
	}
}

// ensureDuties creates or updates every duty's Schedule, and returns what
// failed (each is also logged).
func (n *Node) ensureDuties(ctx context.Context, duties []duty) error {
	var errs []error
	for _, d := range duties {
		if err := n.ensureSchedule(ctx, d.id, d.workflow, d.every); err != nil {
			n.log.Warn("duty_schedule_failed", "schedule", d.id, "error", err)
			errs = append(errs, fmt.Errorf("duty schedule %s: %w", d.id, err))
		}
	}
	return errors.Join(errs...)
}

// temporalWatch is a node's check of Temporal's state and its rebuild.
type temporalWatch struct {
	n         *Node
	promotion *promotion
	rec       *reconcile.Reconciler
	duties    []duty
	log       *slog.Logger
	seen      temporalSeen
	// retry holds what a rebuild that did not finish was about, so the
	// next check rebuilds again whatever it reads.
	retry []string
	// downSince is when the checks began to fail; zero while they work.
	downSince time.Time
}

// watchTemporal starts the node's check of Temporal's state, taking what
// Temporal holds now as what the node made at boot.
func (n *Node) watchTemporal(ctx context.Context, p *promotion, rec *reconcile.Reconciler, duties []duty) {
	w := &temporalWatch{n: n, promotion: p, rec: rec, duties: duties, log: n.log}
	call, cancel := context.WithTimeout(ctx, temporalCheckWithin)
	if f, err := w.read(call); err == nil {
		w.remember(f)
	}
	cancel()
	n.loopsDone.Add(1)
	go func() { defer n.loopsDone.Done(); w.run(n.stop) }()
}

func (w *temporalWatch) run(stop <-chan struct{}) {
	every(stop, temporalCheckEvery, func(ctx context.Context) bool {
		w.check(ctx)
		return false
	})
}

// check reads Temporal's state once and rebuilds what it lost.
func (w *temporalWatch) check(ctx context.Context) {
	call, cancel := context.WithTimeout(ctx, temporalCheckWithin)
	f, err := w.read(call)
	cancel()
	switch {
	case ctx.Err() != nil:
		return
	case err != nil:
		if w.downSince.IsZero() {
			w.downSince = time.Now()
			w.log.Warn("temporal_unreachable", "error", err,
				"note", "publishing goes on (mail is durable in Redis); seats run again once Temporal answers")
		}
		return
	case !w.downSince.IsZero():
		w.log.Info("temporal_reachable", "after", time.Since(w.downSince).Round(time.Millisecond))
		w.downSince = time.Time{}
	}
	plan := planRebuild(f, w.seen, w.promotion.policy)
	if len(plan.Missing) == 0 && len(w.retry) == 0 {
		w.remember(f)
		return
	}
	switch {
	case len(w.retry) == 0:
		// One loss, one line: a rebuild tried again says
		// temporal_rebuild_incomplete, not this.
		w.log.Error("temporal_state_lost", "missing", plan.Missing, "current", f.Current, "build_id", w.promotion.buildID,
			"note", "Temporal came back without what this node made there (restarted empty, restored from an older backup, or another cluster); rebuilding it")
	case len(plan.Missing) == 0:
		plan = rebuildPlan{Missing: w.retry, Promote: w.promotion.policy != config.PromoteNever}
	}
	w.rebuild(ctx, plan)
}

// rebuild makes again what Temporal lost: the build current by the
// promotion rule, the duty Schedules, the org's Schedules, and a running
// workflow for every agent seat (each seat reads its mailbox when it
// starts, so the mail published meanwhile is answered).
func (w *temporalWatch) rebuild(ctx context.Context, plan rebuildPlan) {
	began := time.Now()
	var did []string
	var errs []error
	if plan.Promote {
		p := *w.promotion
		p.policy = config.PromoteFirst
		current, err := p.atStart(ctx)
		if err != nil {
			errs = append(errs, err)
		} else {
			did = append(did, "current_build="+current)
		}
	} else if plan.Fix != "" {
		w.log.Warn("build_not_current", "deployment", w.promotion.name, "build_id", w.promotion.buildID, "fix", plan.Fix)
	}
	if err := w.n.ensureDuties(ctx, w.duties); err != nil {
		errs = append(errs, err)
	} else {
		did = append(did, "duty_schedules")
	}
	org := w.n.org.Now()
	if err := schedules.Sync(ctx, w.n.temporal, org, w.log); err != nil {
		errs = append(errs, fmt.Errorf("org schedules: %w", err))
	} else {
		did = append(did, fmt.Sprintf("org_schedules=%d", len(org.Schedules)))
	}
	if err := w.rec.Reconcile(ctx, org, w.n.NodeID); err != nil {
		errs = append(errs, fmt.Errorf("start seats: %w", err))
	} else {
		did = append(did, fmt.Sprintf("seats_reconciled=%d", len(org.AgentSeats())))
	}
	took := time.Since(began).Round(time.Millisecond)
	if err := errors.Join(errs...); err != nil {
		if ctx.Err() != nil {
			return
		}
		w.retry = plan.Missing
		w.log.Warn("temporal_rebuild_incomplete", "missing", plan.Missing, "did", did, "took", took, "error", err,
			"note", fmt.Sprintf("tried again in %s", temporalCheckEvery))
		return
	}
	w.retry = nil
	w.log.Info("temporal_state_rebuilt", "missing", plan.Missing, "did", did, "took", took)
	call, cancel := context.WithTimeout(ctx, temporalCheckWithin)
	defer cancel()
	if f, err := w.read(call); err == nil {
		w.remember(f)
	}
}

// remember takes f as what the node last saw while Temporal held its state.
func (w *temporalWatch) remember(f temporalFacts) {
	if f.DutyFound {
		w.seen.DutyCreated, w.seen.DutyActions = f.DutyCreated, f.DutyActions
	}
	if f.DeploymentFound {
		w.seen.DeploymentCreated = f.DeploymentCreated
	}
	if f.Current != "" {
		w.seen.Current = f.Current
	}
}

// read describes the reconcile duty's Schedule and the worker deployment.
func (w *temporalWatch) read(ctx context.Context) (temporalFacts, error) {
	var f temporalFacts
	var notFound *serviceerror.NotFound
	desc, err := w.n.temporal.ScheduleClient().GetHandle(ctx, ReconcileScheduleID(w.promotion.queue)).Describe(ctx)
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		return f, fmt.Errorf("describe the reconcile duty's schedule: %w", err)
	default:
		f.DutyFound, f.DutyCreated, f.DutyActions = true, desc.Info.CreatedAt, desc.Info.NumActions
	}
	d, err := w.promotion.deploy.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	switch {
	case errors.As(err, &notFound):
	case err != nil:
		return f, fmt.Errorf("describe worker deployment %s: %w", w.promotion.name, err)
	default:
		f.DeploymentFound, f.DeploymentCreated = true, d.Info.CreateTime
		if cur := d.Info.RoutingConfig.CurrentVersion; cur != nil {
			f.Current = cur.BuildID
		}
	}
	return f, nil
}
