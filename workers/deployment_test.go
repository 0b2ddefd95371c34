package workers

import (
	"context"
	"io"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/testenv"
)

// With no build id set, a binary with no clean VCS stamp (a test binary
// has none) is named by its own digest, the same on every call.
func TestBuildIDOfTheBinary(t *testing.T) {
	id, err := BuildID(config.TemporalDeployment{})
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^(bin-[0-9a-f]{12}|[0-9a-f]{12}(-modified-[0-9a-f]{12})?)$`).MatchString(id) {
		t.Fatalf("build id %q; want bin-<12 hex>, <revision> or <revision>-modified-<12 hex>", id)
	}
	if again, _ := BuildID(config.TemporalDeployment{}); again != id {
		t.Fatalf("build id %q, then %q", id, again)
	}
	if set, _ := BuildID(config.TemporalDeployment{BuildID: "v2.3.0"}); set != "v2.3.0" {
		t.Fatalf("build id %q; want the configured v2.3.0", set)
	}
}

// Each promotion policy against a real deployment: the first build
// becomes current under first, a later one does not under first or never,
// and does under always.
func TestPromotePolicies(t *testing.T) {
	stack := testenv.Stack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns, drop, err := testenv.Namespace(ctx, stack.Temporal, "crewlet-workers")
	if err != nil {
		t.Fatal(err)
	}
	defer drop()
	tc, err := client.Dial(client.Options{HostPort: stack.Temporal, Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer tc.Close()
	name := "promote-" + testenv.Suffix()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	poll := func(build string) {
		w := worker.New(tc, name, worker.Options{DeploymentOptions: deploymentOptions(name, build)})
		w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "Noop"})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
	}
	for _, step := range []struct {
		build, policy, want string
	}{
		{"b1", config.PromoteFirst, "b1"},
		{"b2", config.PromoteFirst, "b1"},
		{"b2", config.PromoteNever, ""},
		{"b2", config.PromoteAlways, "b2"},
		{"b1", config.PromoteFirst, "b2"},
	} {
		poll(step.build)
		got, err := promote(ctx, tc, name, step.build, step.policy, log)
		if err != nil {
			t.Fatalf("%s under %s: %v", step.build, step.policy, err)
		}
		if got != step.want {
			t.Fatalf("%s under %s: current %q; want %q", step.build, step.policy, got, step.want)
		}
	}
	desc, err := tc.WorkerDeploymentClient().GetHandle(name).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cur := desc.Info.RoutingConfig.CurrentVersion; cur == nil || cur.BuildID != "b2" {
		t.Fatalf("current version %+v; want b2", cur)
	}
}
