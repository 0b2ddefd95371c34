package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Namespace registers a Temporal namespace of its own (prefix plus a
// suffix) on the dev server at hostPort, with the search attributes the dev
// stack registers on "default", and returns its name and drop, which deletes
// it. Tests that start seat workflows, whose ids are fixed (seat/{handle}),
// and close every seat they find, run in one so that no other package's
// seats are theirs to close. It returns once a workflow in the namespace has
// set every attribute and visibility has found it by them: a new
// namespace's attributes reach each Temporal service on its own refresh.
func Namespace(ctx context.Context, hostPort, prefix string) (name string, drop func(), err error) {
	if hostPort == "" {
		return "", nil, errors.New("CREWLET_TEMPORAL_ADDRESS is not set: run the tests with `task test`, or `deploy/dev/stack.sh up` then `set -a; . .dev/env; set +a`")
	}
	attrs, err := searchAttributes()
	if err != nil {
		return "", nil, err
	}
	name = prefix + "-" + Suffix()
	quiet := tlog.NewStructuredLogger(slog.New(slog.DiscardHandler))
	nc, err := client.NewNamespaceClient(client.Options{HostPort: hostPort, Logger: quiet})
	if err != nil {
		return "", nil, fmt.Errorf("connect temporal: %w", err)
	}
	defer nc.Close()
	if err := nc.Register(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace:                        name,
		WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}); err != nil {
		return "", nil, fmt.Errorf("register namespace %s: %w", name, err)
	}
	tc, err := client.Dial(client.Options{HostPort: hostPort, Namespace: name, Logger: quiet})
	if err != nil {
		return "", nil, fmt.Errorf("connect temporal namespace %s: %w", name, err)
	}
	// drop needs the connection, so it stays open until drop closes it. A
	// namespace left behind costs the dev server nothing after `stack:down`,
	// but a cluster keeps it in Postgres, run after run.
	drop = func() {
		defer tc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := tc.OperatorService().DeleteNamespace(ctx, &operatorservice.DeleteNamespaceRequest{Namespace: name}); err != nil {
			fmt.Fprintf(os.Stderr, "delete temporal namespace %s: %v (delete it with: temporal operator namespace delete -n %s)\n", name, err, name)
		}
	}
	// The namespace itself may be unknown to the frontend for a moment.
	types := map[string]enumspb.IndexedValueType{}
	for _, a := range attrs {
		types[a.name] = a.kind
	}
	if err := retry(ctx, func() error {
		_, err := tc.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: name, SearchAttributes: types})
		return err
	}); err != nil {
		drop()
		return "", nil, fmt.Errorf("add search attributes to %s: %w", name, err)
	}
	if err := probeSearchAttributes(ctx, tc, attrs); err != nil {
		drop()
		return "", nil, fmt.Errorf("namespace %s: %w", name, err)
	}
	return name, drop, nil
}

// searchAttribute is one line of temporal-config/search-attributes.txt.
type searchAttribute struct {
	name string
	kind enumspb.IndexedValueType
}

// searchAttributes reads the list the dev stack registers, so that a test
// namespace has the same ones.
func searchAttributes() ([]searchAttribute, error) {
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "..", "temporal-config", "search-attributes.txt")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read search attributes: %w", err)
	}
	defer f.Close()
	var out []searchAttribute
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		name, typ, _ := strings.Cut(line, "=")
		kind, err := enumspb.IndexedValueTypeFromString(typ)
		if err != nil {
			return nil, fmt.Errorf("%s: %q: %w", path, line, err)
		}
		out = append(out, searchAttribute{name: name, kind: kind})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return out, nil
}

// probeSearchAttributes runs, until one succeeds, a workflow that sets every
// attribute, and then waits until visibility finds it by each of them.
func probeSearchAttributes(ctx context.Context, tc client.Client, attrs []searchAttribute) error {
	var updates []temporal.SearchAttributeUpdate
	var query []string
	for _, a := range attrs {
		switch a.kind {
		case enumspb.INDEXED_VALUE_TYPE_KEYWORD:
			updates = append(updates, temporal.NewSearchAttributeKeyKeyword(a.name).ValueSet("probe"))
			query = append(query, a.name+" = 'probe'")
		case enumspb.INDEXED_VALUE_TYPE_INT:
			updates = append(updates, temporal.NewSearchAttributeKeyInt64(a.name).ValueSet(1))
			query = append(query, a.name+" = 1")
		case enumspb.INDEXED_VALUE_TYPE_BOOL:
			updates = append(updates, temporal.NewSearchAttributeKeyBool(a.name).ValueSet(true))
			query = append(query, a.name+" = true")
		case enumspb.INDEXED_VALUE_TYPE_DATETIME:
			// A range: visibility stores the time in its own precision.
			updates = append(updates, temporal.NewSearchAttributeKeyTime(a.name).ValueSet(time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)))
			query = append(query, a.name+" > '2001-01-01T00:00:00Z'")
		default:
			return fmt.Errorf("search attribute %s: type %s has no probe value", a.name, a.kind)
		}
	}
	queue := "namespace-probe-" + Suffix()
	w := worker.New(tc, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		return workflow.UpsertTypedSearchAttributes(ctx, updates...)
	}, workflow.RegisterOptions{Name: "namespace-probe"})
	if err := w.Start(); err != nil {
		return fmt.Errorf("start probe worker: %w", err)
	}
	defer w.Stop()
	var id string
	err := retry(ctx, func() error {
		// A workflow task refused for an unknown attribute is retried with
		// a growing back-off: a fresh workflow per try is quicker.
		id = "namespace-probe-" + Suffix()
		tctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		run, err := tc.ExecuteWorkflow(tctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue, WorkflowExecutionTimeout: 5 * time.Second}, "namespace-probe")
		if err != nil {
			return err
		}
		return run.Get(tctx, nil)
	})
	if err != nil {
		return fmt.Errorf("a workflow could not set its search attributes: %w", err)
	}
	err = retry(ctx, func() error {
		resp, err := tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: strings.Join(query, " AND ")})
		if err != nil {
			return err
		}
		for _, ex := range resp.GetExecutions() {
			if ex.GetExecution().GetWorkflowId() == id {
				return nil
			}
		}
		return fmt.Errorf("probe %s not listed yet", id)
	})
	if err != nil {
		return fmt.Errorf("visibility does not find a workflow by its search attributes: %w", err)
	}
	return nil
}

// retry calls f every 200 ms until it returns nil or ctx ends, and then
// returns f's last error.
func retry(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
}
