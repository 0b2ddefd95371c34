package tracing

import (
	"context"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// seatRunsAreRoots makes each run of a seat workflow the root of its own
// trace. A seat outlives any message: the wake that started it would
// otherwise own every span of the run, and continue-as-new would chain
// every later run of the seat into that first message's trace. It runs
// before the SDK's tracing interceptor and takes the span out of a seat
// run's start header; signals keep theirs, so a wake or a pause still shows
// in the trace of the request that sent it.
type seatRunsAreRoots struct{ interceptor.InterceptorBase }

func (*seatRunsAreRoots) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	if workflow.GetInfo(ctx).WorkflowType.Name != crewlet.WorkflowSeat {
		return next
	}
	return &seatRootInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}}
}

type seatRootInbound struct {
	interceptor.WorkflowInboundInterceptorBase
}

func (i *seatRootInbound) ExecuteWorkflow(ctx workflow.Context, in *interceptor.ExecuteWorkflowInput) (any, error) {
	delete(interceptor.WorkflowHeader(ctx), headerKey)
	return i.Next.ExecuteWorkflow(ctx, in)
}

// turnsFollowMessages starts a turn as a child of the message it answers
// (the first of its batch that carries a trace), not of the seat run that
// starts it, so the turn, its model rounds and its tool calls join the
// trace of the request that published the message. It runs before the
// SDK's tracing interceptor on a workflow's outbound calls, and puts the
// message's span where that interceptor looks for a parent.
type turnsFollowMessages struct {
	interceptor.InterceptorBase
	tracer  interceptor.Tracer
	spanKey any
}

func (t *turnsFollowMessages) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	if workflow.GetInfo(ctx).WorkflowType.Name != crewlet.WorkflowSeat {
		return next
	}
	return &turnParentInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, root: t}
}

type turnParentInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	root *turnsFollowMessages
}

func (i *turnParentInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&turnParentOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: outbound}, root: i.root})
}

type turnParentOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	root *turnsFollowMessages
}

func (o *turnParentOutbound) ExecuteChildWorkflow(ctx workflow.Context, childWorkflowType string, args ...any) workflow.ChildWorkflowFuture {
	if childWorkflowType == crewlet.WorkflowTurn && len(args) == 1 {
		if in, ok := args[0].(crewlet.TurnInput); ok {
			ctx = o.root.withMessageSpan(ctx, in.Mail)
		}
	}
	return o.Next.ExecuteChildWorkflow(ctx, childWorkflowType, args...)
}

// Go starts a seat's inline turn (node-liveness 5) under the span of the
// message it answers, as ExecuteChildWorkflow starts a Turn child: the seat
// marks the turn's coroutine with its mail (crewlet.TurnMailKey).
func (o *turnParentOutbound) Go(ctx workflow.Context, name string, f func(ctx workflow.Context)) workflow.Context {
	if mail, ok := ctx.Value(crewlet.TurnMailKey).([]crewlet.MailRef); ok {
		ctx = o.root.withMessageSpan(ctx, mail)
	}
	return o.Next.Go(ctx, name, f)
}

// withMessageSpan is ctx with the span of the first entry of mail that
// carries one as its parent span; ctx unchanged when none does. It reads
// only the turn's input, so a replay sets the same value.
func (t *turnsFollowMessages) withMessageSpan(ctx workflow.Context, mail []crewlet.MailRef) workflow.Context {
	for _, m := range mail {
		if span := t.tracer.SpanFromContext(withTraceparent(context.Background(), m.Trace)); span != nil {
			return workflow.WithValue(ctx, t.spanKey, span)
		}
	}
	return ctx
}
