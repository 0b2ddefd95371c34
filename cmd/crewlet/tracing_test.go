package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tracing"
	"github.com/crewlet/crewlet/workers"
)

// tracedOrg's seat notes what it is told with a first-party tool, then
// answers: one message is one model round with a tool call, and a second
// round that answers.
const tracedOrg = `
company: { name: tracers }
api: { listen: "%s" }
mailbox: { key_prefix: %s }
profiles:
  mind:
    provider: scripted
    rules:
      - match: '^remember (.*)'
        tools: [ { name: diary_write, args: { text: '{{index .Groups 1}}' } } ]
        reply: 'Noted.'
roles:
  clerk: { charter: keeps notes, profile: mind }
seats:
  - { handle: %s, role: clerk }
`

// One message is one trace, continuing the caller's: `crewlet serve`, with
// tracing exporting to the SDK's in-memory exporter, answers a message whose
// request carries a traceparent; the trace then holds the API request, the
// publish, the seat starting the turn, the turn, each model round (GenAI
// attributes, tokens) and the tool call, each under the one before, and no
// span carries the message's text.
func TestOneMessageIsOneTrace(t *testing.T) {
	stack := testenv.Stack(t)
	suffix := testenv.Suffix()
	exporter := tracetest.NewInMemoryExporter()
	provider := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter))
	fromEnv := tracingFromEnv
	tracingFromEnv = func(context.Context) (*tracing.Tracing, error) { return tracing.New(provider), nil }
	t.Cleanup(func() { tracingFromEnv = fromEnv })

	handle := "tracer-" + suffix
	taskQueue := "crewlet-trace-" + suffix
	addr := freeAddr(t)
	org := filepath.Join(t.TempDir(), "org.yaml")
	if err := os.WriteFile(org, []byte(fmt.Sprintf(tracedOrg, addr, "trace"+suffix, handle)), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("CREWLET_PG_URL", testenv.Database(t))
	t.Setenv("CREWLET_TEMPORAL_ADDRESS", stack.Temporal)
	t.Setenv("CREWLET_TEMPORAL_TASK_QUEUE", taskQueue)
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())

	ctx, stop := context.WithCancel(context.Background())
	served := make(chan struct{})
	var serveErr error
	var log testenv.Log
	go func() {
		defer close(served)
		serveErr = run(ctx, []string{"serve", "--config", org, "--node-id", "n-" + suffix}, io.Discard, &log)
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-served:
		case <-time.After(2 * time.Minute):
			t.Error("serve did not stop within 2 minutes")
		}
		tc, err := client.Dial(client.Options{HostPort: stack.Temporal})
		if err != nil {
			return
		}
		defer tc.Close()
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tc.TerminateWorkflow(cctx, crewlet.SeatWorkflowID(handle), "", "tracing test over")
		_ = tc.ScheduleClient().GetHandle(cctx, workers.RebalanceScheduleID(taskQueue)).Delete(cctx)
		_ = tc.ScheduleClient().GetHandle(cctx, workers.MaintenanceScheduleID(taskQueue)).Delete(cctx)
		_ = tc.ScheduleClient().GetHandle(cctx, workers.ReconcileScheduleID(taskQueue)).Delete(cctx)
	})
	base := "http://" + addr
	testenv.Eventually(t, time.Minute, "crewlet serve ready", func() error {
		select {
		case <-served:
			t.Fatalf("serve ended: %v\n%s", serveErr, log.String())
		default:
		}
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("readyz: HTTP %d", resp.StatusCode)
		}
		return nil
	})

	callerTrace, callerSpan := trace.TraceID{0xc7, 1, 2, 3}, trace.SpanID{0xc7, 4}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the message's trace:\n%s", traceTree(exporter.GetSpans(), callerTrace, callerSpan))
		}
	})
	req, err := http.NewRequest(http.MethodPost, base+"/seats/"+handle+"/messages", strings.NewReader(`{"text":"remember the secret word ostrich"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	token, err := readLocalToken(base)
	if err != nil || token == "" {
		t.Fatalf("the local token of the API at %s: %q, %v", base, token, err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("traceparent", fmt.Sprintf("00-%s-%s-01", callerTrace, callerSpan))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted && resp.StatusCode != http.StatusOK {
		t.Fatalf("send: HTTP %d", resp.StatusCode)
	}

	route := "POST /seats/{handle}/messages"
	// The turn runs inline in the seat workflow: its steps start under the
	// message's span, not the seat run's.
	want := []string{route, "publish " + handle, "StartActivity:ModelRound", "RunActivity:ModelRound", "chat",
		"StartActivity:ToolCall", "RunActivity:ToolCall", "execute_tool diary_write"}
	var spans map[string][]tracetest.SpanStub
	testenv.Eventually(t, time.Minute, "the message's trace has every span", func() error {
		spans = map[string][]tracetest.SpanStub{}
		for _, s := range exporter.GetSpans() {
			if s.SpanContext.TraceID() == callerTrace {
				spans[s.Name] = append(spans[s.Name], s)
			}
		}
		for _, name := range want {
			if len(spans[name]) == 0 {
				return fmt.Errorf("no span %q yet", name)
			}
		}
		// The turn ends after its second round has answered; a span is
		// exported when it ends, so its round's activity comes after it.
		if len(spans["chat"]) < 2 || len(spans["RunActivity:ModelRound"]) < 2 {
			return fmt.Errorf("%d model rounds, %d ended", len(spans["chat"]), len(spans["RunActivity:ModelRound"]))
		}
		return nil
	})

	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, list := range spans {
		for _, s := range list {
			byID[s.SpanContext.SpanID()] = s
		}
	}
	under := func(child, ancestor string) {
		t.Helper()
		for _, s := range spans[child] {
			for p := s.Parent.SpanID(); ; {
				a, ok := byID[p]
				if !ok {
					t.Fatalf("span %q is not under %q in the message's trace", child, ancestor)
				}
				if a.Name == ancestor {
					break
				}
				p = a.Parent.SpanID()
			}
		}
	}
	if got := spans[route][0].Parent.SpanID(); got != callerSpan {
		t.Fatalf("API span's parent %s; want the caller's span %s", got, callerSpan)
	}
	under("publish "+handle, route)
	under("StartActivity:ModelRound", "publish "+handle)
	under("RunActivity:ModelRound", "StartActivity:ModelRound")
	under("chat", "RunActivity:ModelRound")
	under("StartActivity:ToolCall", "publish "+handle)
	under("RunActivity:ToolCall", "StartActivity:ToolCall")
	under("execute_tool diary_write", "RunActivity:ToolCall")
	if seat := attr(spans["StartActivity:ModelRound"][0], "temporalWorkflowID"); seat != crewlet.SeatWorkflowID(handle) {
		t.Fatalf("the model round was started by %q; want the seat workflow %s", seat, crewlet.SeatWorkflowID(handle))
	}
	round := spans["chat"][0]
	for key, want := range map[string]string{
		"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted", "crewlet.profile": "mind",
	} {
		if got := attr(round, key); got != want {
			t.Fatalf("model span %s = %q; want %q", key, got, want)
		}
	}
	if attr(round, "gen_ai.usage.input_tokens") == "" || attr(round, "gen_ai.usage.output_tokens") == "" {
		t.Fatalf("model span has no token counts: %v", round.Attributes)
	}
	if got := attr(spans["execute_tool diary_write"][0], "gen_ai.tool.name"); got != "diary_write" {
		t.Fatalf("tool span gen_ai.tool.name = %q; want diary_write", got)
	}
	for _, s := range exporter.GetSpans() {
		for _, kv := range s.Attributes {
			if strings.Contains(kv.Value.Emit(), "ostrich") {
				t.Fatalf("span %q attribute %s carries the message's text: %q", s.Name, kv.Key, kv.Value.Emit())
			}
		}
	}
}

// traceTree draws the spans of a trace under parent, one a line, indented
// by depth.
func traceTree(spans tracetest.SpanStubs, id trace.TraceID, parent trace.SpanID) string {
	var b strings.Builder
	var draw func(parent trace.SpanID, depth int)
	draw = func(parent trace.SpanID, depth int) {
		for _, s := range spans {
			if s.SpanContext.TraceID() == id && s.Parent.SpanID() == parent {
				fmt.Fprintf(&b, "%s%s (%s)\n", strings.Repeat("  ", depth), s.Name, s.EndTime.Sub(s.StartTime).Round(time.Microsecond))
				draw(s.SpanContext.SpanID(), depth+1)
			}
		}
	}
	draw(parent, 0)
	return b.String()
}

// attr is a span's attribute as text, "" when it has none by that key.
func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if kv.Key == attribute.Key(key) {
			return kv.Value.Emit()
		}
	}
	return ""
}
