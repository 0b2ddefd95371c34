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

// promote makes buildID the current version of deployment name as the
// policy says (config.PromoteFirst, PromoteAlways, PromoteNever), and
// reports the current build it leaves. Workflow tasks go to the current
// version's workers only, so a deployment with no current version runs
// nothing on versioned workers: the first deploy must set one.
func promote(ctx context.Context, tc client.Client, name, buildID, policy string, log *slog.Logger) (string, error) {
	if policy == config.PromoteNever {
		return "", nil
	}
	began := time.Now()
	ctx, cancel := context.WithTimeout(ctx, promoteWithin)
	defer cancel()
	h := tc.WorkerDeploymentClient().GetHandle(name)
	last := fmt.Errorf("Temporal has not registered build %s in the deployment (it does at the build's first poll, in its worker service)", buildID)
	for {
		current, done, err := promoteOnce(ctx, h, buildID, policy)
		var unimplemented *serviceerror.Unimplemented
		var invalid *serviceerror.InvalidArgument
		var denied *serviceerror.PermissionDenied
		switch {
		case done:
			log.Info("build_checked", "deployment", name, "build_id", buildID, "current", current, "policy", policy,
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
			log.Info("build_promote_retry", "deployment", name, "build_id", buildID, "error", err)
			last = err
		}
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("worker deployment %s: could not make build %s current within %s: %w", name, buildID, promoteWithin, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// promoteOnce reads the deployment and, if the policy says so and Temporal
// knows the build, makes buildID current. done reports that there is
// nothing left to do: current is the current build then.
func promoteOnce(ctx context.Context, h client.WorkerDeploymentHandle, buildID, policy string) (current string, done bool, err error) {
	desc, err := h.Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	var notFound *serviceerror.NotFound
	if errors.As(err, &notFound) {
		return "", false, nil // no version of it has polled yet
	}
	if err != nil {
		return "", false, fmt.Errorf("describe worker deployment: %w", err)
	}
	if cur := desc.Info.RoutingConfig.CurrentVersion; cur != nil && (cur.BuildID == buildID || policy == config.PromoteFirst) {
		return cur.BuildID, true, nil
	}
	if !registered(desc.Info, buildID) {
		return "", false, nil
	}
	_, err = h.SetCurrentVersion(ctx, client.WorkerDeploymentSetCurrentVersionOptions{BuildID: buildID, ConflictToken: desc.ConflictToken})
	if err != nil {
		return "", false, fmt.Errorf("make build %s current: %w", buildID, err)
	}
	return buildID, true, nil
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
