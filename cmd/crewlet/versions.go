package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/workflows"
)

// versionCount is how many running runs of a workflow type are on one
// version of a change (docs/versioning.md).
type versionCount struct {
	change, workflowType string
	// version is the version counted; workflow.DefaultVersion for the runs
	// with no marker of the change.
	version workflow.Version
	running int64
}

// runVersions prints, for every change id in workflows.Changes, how many of
// the deployment's running runs are on each version, and for every shim in
// workflows.Shims how many runs it still serves: what decides whether the
// code kept for older runs (marked COMPAT) may be deleted.
func (c *cli) versionsCmd() *cobra.Command {
	return &cobra.Command{
		Use: "versions",
		Short: "count the running seats and turns on each version of each workflow change and on each worker build, " +
			"and say which code kept for older runs may go and which old build's nodes may stop (docs/versioning.md)",
		Example: "  crewlet versions --config crewlet.yaml",
		Args:    noArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return runVersions(cmd.Context(), c.config, c.stdout) },
	}
}

func runVersions(ctx context.Context, cfgPath string, stdout io.Writer) error {
	org, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	opts, err := temporalOptions(org)
	if err != nil {
		return err
	}
	tc, err := client.DialContext(ctx, opts)
	if err != nil {
		return fmt.Errorf("connect temporal at %s: %w", org.Temporal.Address, err)
	}
	defer tc.Close()
	count := func(ctx context.Context, query string) (int64, error) {
		resp, err := tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: org.Temporal.Namespace, Query: query})
		if err != nil {
			return 0, fmt.Errorf("count %q: %w", query, err)
		}
		return resp.GetCount(), nil
	}
	counts, err := countVersions(ctx, org.Temporal.TaskQueue, count)
	if err != nil {
		return err
	}
	shims, err := countShims(ctx, org.Temporal.TaskQueue, count)
	if err != nil {
		return err
	}
	printVersions(stdout, counts, shims)
	deployment := org.Temporal.DeploymentName()
	builds, err := countBuilds(ctx, tc.WorkerDeploymentClient().GetHandle(deployment), org.Temporal.TaskQueue, count)
	if err != nil {
		return err
	}
	current := ""
	for _, b := range builds {
		if b.current {
			current = b.build
		}
	}
	var held []seatclient.BuildRun
	if builds != nil {
		if held, err = seatclient.SeatRunsOffBuild(ctx, tc, org.Temporal.Namespace, org.Temporal.TaskQueue, deployment, current); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout)
	printBuilds(stdout, deployment, builds, held)
	return nil
}

// buildCount is how many running seats and turns one build of the worker
// deployment runs (docs/versioning.md, "Which build each seat runs").
type buildCount struct {
	// build is the build id; empty for the runs on no build, begun before
	// the deployment had a current build.
	build            string
	current, ramping bool
	// drainage is Temporal's word on whether runs still need the build:
	// draining, drained, or empty while it is current.
	drainage     string
	seats, turns int64
}

// countBuilds counts, for each build Temporal knows in the deployment, the
// running seats and turns on it, then those on none; nil when the
// deployment does not exist yet (no node has polled as it).
func countBuilds(ctx context.Context, d client.WorkerDeploymentHandle, taskQueue string,
	count func(context.Context, string) (int64, error)) ([]buildCount, error) {
	desc, err := d.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("describe worker deployment: %w", err)
	}
	routing := desc.Info.RoutingConfig
	var out []buildCount
	var seats, turns int64
	for _, v := range desc.Info.VersionSummaries {
		b := buildCount{
			build:   v.Version.BuildID,
			current: routing.CurrentVersion != nil && routing.CurrentVersion.BuildID == v.Version.BuildID,
			ramping: routing.RampingVersion != nil && routing.RampingVersion.BuildID == v.Version.BuildID,
		}
		switch v.DrainageStatus {
		case client.WorkerDeploymentVersionDrainageStatusDraining:
			b.drainage = "draining"
		case client.WorkerDeploymentVersionDrainageStatusDrained:
			b.drainage = "drained"
		}
		on := fmt.Sprintf(" AND TemporalWorkerDeploymentVersion = '%s:%s'", desc.Info.Name, v.Version.BuildID)
		if b.seats, err = count(ctx, running(taskQueue, crewlet.WorkflowSeat)+on); err != nil {
			return nil, err
		}
		if b.turns, err = count(ctx, running(taskQueue, crewlet.WorkflowTurn)+on); err != nil {
			return nil, err
		}
		seats, turns = seats+b.seats, turns+b.turns
		out = append(out, b)
	}
	none := buildCount{}
	if none.seats, err = count(ctx, running(taskQueue, crewlet.WorkflowSeat)); err != nil {
		return nil, err
	}
	if none.turns, err = count(ctx, running(taskQueue, crewlet.WorkflowTurn)); err != nil {
		return nil, err
	}
	none.seats, none.turns = max(none.seats-seats, 0), max(none.turns-turns, 0)
	return append(out, none), nil
}

// printBuilds writes the builds' counts, then which old build's nodes may
// stop, and for one that may not, the seats whose turn holds them on it:
// held are the seat runs off the current build.
func printBuilds(w io.Writer, deployment string, builds []buildCount, held []seatclient.BuildRun) {
	if builds == nil {
		fmt.Fprintf(w, "worker deployment %s: none yet (no node has started on it).\n", deployment)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "BUILD (deployment %s)\tROUTING\tSEATS\tTURNS\n", deployment)
	for _, b := range builds {
		build, routing := b.build, b.drainage
		switch {
		case build == "":
			build = "(none)"
		case b.current:
			routing = "current"
		case b.ramping:
			routing = "ramping"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\n", build, routing, b.seats, b.turns)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, b := range builds {
		switch {
		case b.build == "" || b.current || b.ramping:
		case b.seats+b.turns > 0:
			// A seat run is pinned to its build and moves to the current
			// one at continue-as-new: an idle seat within a beat of the
			// current build's nodes, one in a turn when the turn ends.
			fmt.Fprintf(w, "%s: %d seats and %d turns still run on it: keep a node of this build running until they move "+
				"(an idle seat moves within a beat, a seat in a turn when its turn ends).\n", b.build, b.seats, b.turns)
			for _, r := range held {
				if r.Build != b.build || r.Turn == "" {
					continue
				}
				line := fmt.Sprintf("  %s holds it with turn %s, begun %s", r.Handle, r.Turn, r.TurnSince.UTC().Format(time.RFC3339))
				if r.Waiting != "" {
					line += ", waiting on " + r.Waiting
				}
				fmt.Fprintln(w, line)
			}
		default:
			fmt.Fprintf(w, "%s: no seat or turn runs on it: its nodes may stop.\n", b.build)
		}
	}
}

// running is the visibility query of a type's running runs on the task
// queue.
func running(taskQueue, workflowType string) string {
	return fmt.Sprintf("TaskQueue = '%s' AND WorkflowType = '%s' AND ExecutionStatus = 'Running'", taskQueue, workflowType)
}

// countVersions counts the running runs on each version of each change,
// newest first, then those with no marker.
func countVersions(ctx context.Context, taskQueue string, count func(context.Context, string) (int64, error)) ([]versionCount, error) {
	var out []versionCount
	for _, ch := range workflows.Changes {
		base := running(taskQueue, ch.WorkflowType)
		total, err := count(ctx, base)
		if err != nil {
			return nil, err
		}
		marked := int64(0)
		for v := ch.Newest; v >= 1; v-- {
			// The SDK records "id-version"; one marker per change id per run.
			q := fmt.Sprintf("%s AND TemporalChangeVersion = '%s-%d'", base, ch.ID, v)
			n, err := count(ctx, q)
			if err != nil {
				return nil, err
			}
			marked += n
			out = append(out, versionCount{change: ch.ID, workflowType: ch.WorkflowType, version: v, running: n})
		}
		// The runs with no marker are the type's running runs less those
		// with one.
		out = append(out, versionCount{change: ch.ID, workflowType: ch.WorkflowType, version: workflow.DefaultVersion, running: max(total-marked, 0)})
	}
	return out, nil
}

// shimCount is how many running runs a shim with no change id still serves.
type shimCount struct {
	shim    workflows.Shim
	running int64
}

func countShims(ctx context.Context, taskQueue string, count func(context.Context, string) (int64, error)) ([]shimCount, error) {
	var out []shimCount
	for _, s := range workflows.Shims {
		q := fmt.Sprintf("%s AND StartTime < '%s'", running(taskQueue, s.WorkflowType), s.StartedBefore.UTC().Format(time.RFC3339))
		n, err := count(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, shimCount{shim: s, running: n})
	}
	return out, nil
}

// printVersions writes the counts as a table, then what may be deleted.
func printVersions(w io.Writer, counts []versionCount, shims []shimCount) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CHANGE\tWORKFLOW\tVERSION\tRUNNING")
	for _, c := range counts {
		version := strconv.Itoa(int(c.version))
		if c.version == workflow.DefaultVersion {
			version = "none"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\n", c.change, c.workflowType, version, c.running)
	}
	for _, s := range shims {
		fmt.Fprintf(tw, "%s\t%s\tstarted before %s\t%d\n", s.shim.ID, s.shim.WorkflowType, s.shim.StartedBefore.UTC().Format(time.RFC3339), s.running)
	}
	_ = tw.Flush()
	fmt.Fprintln(w)
	for _, ch := range workflows.Changes {
		for v := ch.Oldest + 1; v <= ch.Newest; v++ {
			if v == 0 {
				continue // DefaultVersion is -1; versions start at 1
			}
			below := int64(0)
			for _, c := range counts {
				if c.change == ch.ID && c.version < v {
					below += c.running
				}
			}
			if below == 0 {
				fmt.Fprintf(w, "%s: no running %s run is below version %d: the code marked COMPAT(%s@%d) may be deleted.\n", ch.ID, ch.WorkflowType, v, ch.ID, v)
			} else {
				fmt.Fprintf(w, "%s: %d running %s runs are below version %d: keep the code marked COMPAT(%s@%d).\n", ch.ID, below, ch.WorkflowType, v, ch.ID, v)
			}
		}
		if ch.Unmarked != "" {
			fmt.Fprintf(w, "%s: \"none\" also counts %s.\n", ch.ID, ch.Unmarked)
		}
	}
	for _, s := range shims {
		if s.running == 0 {
			fmt.Fprintf(w, "%s: no running %s run started before it: the code marked COMPAT(%s) may be deleted.\n", s.shim.ID, s.shim.WorkflowType, s.shim.ID)
		} else {
			fmt.Fprintf(w, "%s: %d running %s runs started before it: keep the code marked COMPAT(%s).\n", s.shim.ID, s.running, s.shim.WorkflowType, s.shim.ID)
		}
	}
}
