package workers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet/internal/config"
)

// BuildID is the build id this process's workers poll as
// (docs/versioning.md, "Worker builds"): temporal.deployment.build_id, or
// the VCS revision the binary was built from, or, for a binary built from
// a modified tree or with no VCS stamp (go build -buildvcs=false, a copy
// of the source without .git), a digest of the binary itself, so two
// different binaries never share an id.
func BuildID(d config.TemporalDeployment) (string, error) {
	if d.BuildID != "" {
		return d.BuildID, nil
	}
	var revision string
	modified := true
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if len(revision) > 12 {
		revision = revision[:12]
	}
	if revision != "" && !modified {
		return revision, nil
	}
	digest, err := binaryDigest()
	if err != nil {
		return "", fmt.Errorf("temporal.deployment.build_id is empty and the binary carries no clean VCS revision, "+
			"so the build id would be a digest of the binary, which cannot be read (%w); set temporal.deployment.build_id "+
			"(CREWLET_TEMPORAL_DEPLOYMENT_BUILD_ID)", err)
	}
	if revision != "" {
		return revision + "-modified-" + digest, nil
	}
	return "bin-" + digest, nil
}

// binaryDigest is the first 12 hex digits of the running binary's SHA-256.
func binaryDigest() (string, error) {
	path, err := os.Executable()
	if err != nil {
		return "", err
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

// deploymentOptions opt the shared queue's worker into worker deployment
// versioning as version {name, buildID}. Every workflow type says its own
// behaviour at registration (RegisterWorkflows); the default is there for
// none.
func deploymentOptions(name, buildID string) worker.DeploymentOptions {
	return worker.DeploymentOptions{
		UseVersioning:             true,
		Version:                   worker.WorkerDeploymentVersion{DeploymentName: name, BuildID: buildID},
		DefaultVersioningBehavior: workflow.VersioningBehaviorAutoUpgrade,
	}
}

// promoteWithin bounds how long a starting node tries to make its build
// current. Temporal registers a new build at its first poll (under a
// second on an idle dev server) and then takes a few seconds to route the
// deployment to it, more on a loaded server, where one call can time out
// and is tried again.
const promoteWithin = 2 * time.Minute

// pollerGoneAfter is how long after its last poll began a poller counts as
// gone. Temporal keeps a stopped worker's pollers in the task queue's
// description for minutes, each with the time its last poll began, and a
// live idle poller begins one at least every long poll (a minute on the
// server, 70 s at most from the SDK), so two minutes leaves a busy server
// some slack before a live build would look dead.
const pollerGoneAfter = 2 * time.Minute

// recheckEvery is how often a node whose build is not current checks,
// under PromoteFirst, whether the current build's nodes are all gone. The
// wait for the last poller to age past pollerGoneAfter dominates how soon
// the build heals; each check is two reads of Temporal per node, cheap at
// this cadence. nodes.heartbeat_timeout is not the clock here: it bounds
// how fast crewlet sees a node gone, not how fast Temporal forgets its
// pollers.
const recheckEvery = 30 * time.Second

// The reasons build_promoted gives.
const (
	reasonNoCurrent = "no_current_build"
	reasonAlways    = "promote_always"
	reasonNoPoller  = "current_build_has_no_poller"
)

// promotion is where a node's build stands in its deployment.
type promotion struct {
	client  client.Client
	deploy  client.WorkerDeploymentHandle
	name    string // the worker deployment
	queue   string // the shared task queue its versions poll
	buildID string
	policy  string
	log     *slog.Logger
	// goneAfter is pollerGoneAfter; a test that stopped a build's worker
	// need not wait minutes for it.
	goneAfter time.Duration
	// liveBuilds returns the builds of the live nodes in crewlet's own
	// presence rows ("" for a node started before they recorded it); nil
	// reads Temporal's pollers only.
	liveBuilds func(ctx context.Context) (map[string]bool, error)
}

// newPromotion is the promotion of buildID in deployment name, whose
// versions poll queue; liveBuilds may be nil (see promotion.liveBuilds).
func newPromotion(tc client.Client, name, queue, buildID, policy string, liveBuilds func(context.Context) (map[string]bool, error), log *slog.Logger) *promotion {
	return &promotion{
		client: tc, deploy: tc.WorkerDeploymentClient().GetHandle(name), name: name, queue: queue,
		buildID: buildID, policy: policy, liveBuilds: liveBuilds, log: log,
		goneAfter: pollerGoneAfter,
	}
}

// atStart makes the build the current version of the deployment as the
// policy says (config.PromoteFirst, PromoteAlways, PromoteNever), and
// reports the current build it leaves. Workflow tasks go to the current
// version's workers only, so a deployment with no current version runs
// nothing on versioned workers: the first deploy must set one. It tries
// again until Temporal has registered the build and a call went through.
func (p *promotion) atStart(ctx context.Context) (string, error) {
	if p.policy == config.PromoteNever {
		return "", nil
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, promoteWithin)
	defer cancel()
	last := fmt.Errorf("Temporal has not registered build %s in the deployment (it does at the build's first poll, in its worker service)", p.buildID)
	for {
		current, done, err := p.once(ctx)
		var unimplemented *serviceerror.Unimplemented
		var invalid *serviceerror.InvalidArgument
		var denied *serviceerror.PermissionDenied
		switch {
		case done:
			p.log.Info("build_checked", "deployment", p.name, "build_id", p.buildID, "current", current, "policy", p.policy,
				"waited", time.Since(began).Round(time.Millisecond))
			return current, nil
		case errors.As(err, &unimplemented):
			return "", fmt.Errorf("Temporal does not serve worker deployments (crewlet needs server 1.28 or later, "+
				"with system.enableDeploymentVersions on): %w", err)
		case errors.As(err, &invalid), errors.As(err, &denied):
			return "", err
		case err != nil:
			// A conflict with another node promoting at the same moment,
			// or a call that timed out on a busy server: read the
			// deployment again.
			p.log.Info("build_promote_retry", "deployment", p.name, "build_id", p.buildID, "error", err)
			last = err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("worker deployment %s: could not make build %s current within %s: %w", p.name, p.buildID, promoteWithin, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// watch checks every recheckEvery, until buildID is current or stop
// closes, whether the current build's nodes are all gone, and if so makes
// buildID current (PromoteFirst): a company whose every node restarted on
// a new build runs again without an operator. While one node of the
// current build polls, as during a rollout, it changes nothing.
func (p *promotion) watch(stop <-chan struct{}) {
	every(stop, recheckEvery, func(ctx context.Context) bool {
		call, done := context.WithTimeout(ctx, recheckEvery)
		current, _, err := p.once(call)
		done()
		switch {
		case ctx.Err() != nil:
			return true
		case err != nil:
			p.log.Warn("build_check_failed", "deployment", p.name, "build_id", p.buildID, "error", err)
		}
		return current == p.buildID
	})
}

// every calls check each period, with a context that ends when stop
// closes, until stop closes or check reports it is done.
func every(stop <-chan struct{}, period time.Duration, check func(ctx context.Context) (done bool)) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if check(ctx) {
			return
		}
	}
}

// once reads the deployment and, if the policy says so and Temporal knows
// the build, makes buildID current. done reports that there is nothing
// left to do: current is the current build then.
func (p *promotion) once(ctx context.Context) (current string, done bool, err error) {
	desc, err := p.deploy.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return "", false, nil // no version of it has polled yet
	}
	if err != nil {
		return "", false, fmt.Errorf("describe worker deployment: %w", err)
	}
	reason := reasonAlways
	cur := desc.Info.RoutingConfig.CurrentVersion
	switch {
	case cur == nil:
		reason = reasonNoCurrent
	case cur.BuildID == p.buildID:
		return cur.BuildID, true, nil
	case p.policy == config.PromoteFirst:
		polled, err := p.running(ctx, cur.BuildID)
		if err != nil {
			// The build stays as it is, as before this check existed; a
			// node that is not current checks again (watch).
			p.log.Warn("build_check_failed", "deployment", p.name, "build_id", p.buildID, "current", cur.BuildID, "error", err)
			return cur.BuildID, true, nil
		}
		if polled {
			return cur.BuildID, true, nil
		}
		reason = reasonNoPoller
	}
	if !registered(desc.Info, p.buildID) {
		return "", false, nil
	}
	_, err = p.deploy.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: p.buildID, ConflictToken: desc.ConflictToken})
	if err != nil {
		return "", false, fmt.Errorf("make build %s current: %w", p.buildID, err)
	}
	previous := ""
	if cur != nil {
		previous = cur.BuildID
	}
	p.log.Info("build_promoted", "deployment", p.name, "build_id", p.buildID, "previous", previous, "reason", reason)
	return p.buildID, true, nil
}

// running reports whether a node of build may still be running: crewlet's
// presence rows show a live node of that build (or of a build they do not
// name), or Temporal shows a poller of it. The rows are crewlet's own
// liveness, judged by one clock and the heartbeat timeout; the pollers
// cover a node that is up but whose row is not (yet) there, and a queue
// description that reads one partition only cannot make a live build look
// dead while its node beats.
func (p *promotion) running(ctx context.Context, build string) (bool, error) {
	if p.liveBuilds != nil {
		builds, err := p.liveBuilds(ctx)
		if err != nil {
			return false, fmt.Errorf("read live nodes: %w", err)
		}
		if builds[build] || builds[""] {
			return true, nil
		}
	}
	return p.polled(ctx, build)
}

// polled reports whether a worker of build polled the shared queue for
// workflow tasks within pollerGoneAfter. Temporal describes the queue's
// root partition, where a live build's pollers show: a poller on another
// partition with no task there forwards its poll to the root, and a busy
// one begins a poll every task, on a partition picked at random.
func (p *promotion) polled(ctx context.Context, build string) (bool, error) {
	desc, err := p.client.DescribeTaskQueue(ctx, p.queue, enumspb.TASK_QUEUE_TYPE_WORKFLOW)
	if err != nil {
		return false, fmt.Errorf("describe task queue %s: %w", p.queue, err)
	}
	for _, poller := range desc.GetPollers() {
		d := poller.GetDeploymentOptions()
		if d.GetDeploymentName() == p.name && d.GetBuildId() == build && time.Since(poller.GetLastAccessTime().AsTime()) <= p.goneAfter {
			return true, nil
		}
	}
	return false, nil
}

// registered reports whether Temporal knows buildID as a version of the
// deployment.
func registered(info client.WorkerDeploymentInfo, buildID string) bool {
	for _, v := range info.VersionSummaries {
		if v.Version.BuildID == buildID {
			return true
		}
	}
	return false
}
