package tracing

import (
	"context"
	"fmt"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/testenv"
)

// fakeSeat stands in for the seat workflow under its type name: its first
// run continues as new, its second starts a turn for one entry of mail.
func fakeSeat(ctx workflow.Context, mail crewlet.MailRef) error {
	if workflow.GetInfo(ctx).ContinuedExecutionRunID == "" {
		return workflow.NewContinueAsNewError(ctx, crewlet.WorkflowSeat, mail)
	}
	ctx = workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID + "/turn"})
	return workflow.ExecuteChildWorkflow(ctx, crewlet.WorkflowTurn, crewlet.TurnInput{Mail: []crewlet.MailRef{mail}}).Get(ctx, nil)
}

func fakeTurn(workflow.Context, crewlet.TurnInput) error { return nil }

// A seat run is a root: neither the request that started the seat nor the
// run it continued from is its parent. A turn is a child of the message it
// answers, started by the seat run.
func TestSeatRunsAreRootsAndTurnsFollowTheirMessage(t *testing.T) {
	t.Parallel()
	stack := testenv.Stack(t)
	exporter := tracetest.NewInMemoryExporter()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter)))
	interceptors, err := tr.Interceptors()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.Dial(client.Options{HostPort: stack.Temporal, Interceptors: interceptors})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	queue := "tracing-" + testenv.Suffix()
	w := worker.New(c, queue, worker.Options{})
	w.RegisterWorkflowWithOptions(fakeSeat, workflow.RegisterOptions{Name: crewlet.WorkflowSeat})
	w.RegisterWorkflowWithOptions(fakeTurn, workflow.RegisterOptions{Name: crewlet.WorkflowTurn})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ctx, request := tr.provider.Tracer("test").Start(ctx, "request")
	message := trace.TraceID{0x3e, 5}
	traceparent := fmt.Sprintf("00-%s-%s-01", message, trace.SpanID{0x3e, 6})
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "seat/" + queue, TaskQueue: queue},
		crewlet.WorkflowSeat, crewlet.MailRef{StreamID: "1-0", EventID: "e1", Trace: traceparent})
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	request.End()

	var seatRuns []tracetest.SpanStub
	for _, s := range exporter.GetSpans() {
		switch s.Name {
		case "RunWorkflow:" + crewlet.WorkflowSeat:
			seatRuns = append(seatRuns, s)
			if s.Parent.IsValid() {
				t.Errorf("seat run %s has parent %s in trace %s; want a root", attr(s, "temporalRunID"), s.Parent.SpanID(), s.Parent.TraceID())
			}
		case "RunWorkflow:" + crewlet.WorkflowTurn, "StartChildWorkflow:" + crewlet.WorkflowTurn:
			if s.SpanContext.TraceID() != message {
				t.Errorf("%s is in trace %s; want the message's trace %s", s.Name, s.SpanContext.TraceID(), message)
			}
		}
	}
	if len(seatRuns) != 2 {
		t.Fatalf("%d seat run spans; want 2, one per run", len(seatRuns))
	}
	if seatRuns[0].SpanContext.TraceID() == seatRuns[1].SpanContext.TraceID() {
		t.Fatalf("both seat runs are in trace %s; want a trace each", seatRuns[0].SpanContext.TraceID())
	}
}

func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}
