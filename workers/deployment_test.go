package workers

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
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
// becomes current under first, a later one does not under first or never
// while the current build polls, and does under always. Once every worker
// of the current build stopped, two nodes of a new build promote it at
// once under first, and an old build's node leaves it current.
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
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil)) // one handler: its writes are serialised
	workers := map[string][]worker.Worker{}
	poll := func(build string) {
		w := worker.New(tc, name, worker.Options{DeploymentOptions: deploymentOptions(name, build)})
		w.RegisterWorkflowWithOptions(func(workflow.Context) error { return nil }, workflow.RegisterOptions{Name: "Noop"})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(w.Stop)
		workers[build] = append(workers[build], w)
	}
	// The deployment is named after the queue, as the default is.
	promoting := func(build, policy string) *promotion {
		return newPromotion(tc, name, name, build, policy, nil, log)
	}
	current := func() string {
		desc, err := tc.WorkerDeploymentClient().GetHandle(name).Describe(ctx, client.WorkerDeploymentDescribeOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cur := desc.Info.RoutingConfig.CurrentVersion; cur != nil {
			return cur.BuildID
		}
		return ""
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
		got, err := promoting(step.build, step.policy).atStart(ctx)
		if err != nil {
			t.Fatalf("%s under %s: %v", step.build, step.policy, err)
		}
		if got != step.want {
			t.Fatalf("%s under %s: current %q; want %q", step.build, step.policy, got, step.want)
		}
	}
	if cur := current(); cur != "b2" {
		t.Fatalf("current version %q; want b2", cur)
	}

	// Every node of b2 stops, b1's still poll: two nodes of b3 start at
	// once and each checks until b2's pollers are gone, then both promote.
	// A stopped worker's last poll is a second old a second after it
	// stopped; a live one's can be a long poll old, so only these checks
	// take a second for gone.
	for _, w := range workers["b2"] {
		w.Stop()
	}
	poll("b3")
	poll("b3")
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				p := promoting("b3", config.PromoteFirst)
				p.goneAfter = time.Second
				got, err := p.atStart(ctx)
				if err != nil || got == "b3" {
					errs <- err
					return
				}
				if got != "b2" {
					errs <- fmt.Errorf("current %q while b2's pollers age; want b2", got)
					return
				}
				select {
				case <-ctx.Done():
					errs <- ctx.Err()
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("b3 under first, b2's workers stopped: %v", err)
		}
	}
	if cur := current(); cur != "b3" {
		t.Fatalf("current version %q after b2's workers stopped; want b3", cur)
	}
	if !strings.Contains(logged.String(), "msg=build_promoted deployment="+name+" build_id=b3 previous=b2 reason="+reasonNoPoller) {
		t.Fatalf("no build_promoted of b3 with reason %s in the log:\n%s", reasonNoPoller, logged.String())
	}
	// An old build's node restarting now leaves b3, which polls, current.
	if got, err := promoting("b1", config.PromoteFirst).atStart(ctx); err != nil || got != "b3" {
		t.Fatalf("b1 under first with b3 polling: current %q, %v; want b3", got, err)
	}
	if cur := current(); cur != "b3" {
		t.Fatalf("current version %q after b1's node checked; want b3", cur)
	}

	// Every node of b3 stops in Temporal's eyes, but crewlet's presence
	// rows still show one beating (a queue description read one partition
	// only, or a poll began long ago): b4 leaves b3 current while they do,
	// and while a node of an unrecorded build beats; once the rows show no
	// node of b3, it promotes.
	for _, w := range workers["b3"] {
		w.Stop()
	}
	poll("b4")
	withRows := func(builds ...string) *promotion {
		p := newPromotion(tc, name, name, "b4", config.PromoteFirst, func(context.Context) (map[string]bool, error) {
			live := map[string]bool{}
			for _, b := range builds {
				live[b] = true
			}
			return live, nil
		}, log)
		p.goneAfter = time.Second
		return p
	}
	for {
		polled, err := withRows().polled(ctx, "b3")
		if err != nil {
			t.Fatal(err)
		}
		if !polled {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("b3's pollers never aged past a second")
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, rows := range [][]string{{"b3", "b4"}, {"", "b4"}} {
		if got, err := withRows(rows...).atStart(ctx); err != nil || got != "b3" {
			t.Fatalf("b4 under first, live nodes of builds %q: current %q, %v; want b3 kept", rows, got, err)
		}
	}
	if got, err := withRows("b1", "b4").atStart(ctx); err != nil || got != "b4" {
		t.Fatalf("b4 under first, no live node of b3: current %q, %v; want b4", got, err)
	}
}
