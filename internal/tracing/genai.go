package tracing

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/crewlet/crewlet"
)

// Spans of model and tool calls follow the OpenTelemetry GenAI semantic
// conventions: model, provider, tokens, tool name. They carry no message
// content, prompt, answer or tool argument.

// profileKey names the crewlet profile a model call was made through.
const profileKey = attribute.Key("crewlet.profile")

// StartModelCall starts the span of one model call through profile:
// "chat {model}", or "chat" for a provider that names no model (scripted). End it with EndModelCall.
func StartModelCall(ctx context.Context, provider, model, profile string) (context.Context, trace.Span) {
	name := "chat"
	attrs := []attribute.KeyValue{semconv.GenAIOperationNameChat, semconv.GenAIProviderNameKey.String(provider), profileKey.String(profile)}
	if model != "" {
		name += " " + model
		attrs = append(attrs, semconv.GenAIRequestModel(model))
	}
	return Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// EndModelCall ends a model call's span with the model that answered and
// the tokens it used, or with the kind of failure.
func EndModelCall(span trace.Span, resp crewlet.ModelResponse, err error) {
	defer span.End()
	if err != nil {
		kind := "error"
		var pe *crewlet.ProviderError
		if errors.As(err, &pe) {
			kind = pe.Kind
		}
		span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		span.SetStatus(codes.Error, "model call failed: "+kind)
		return
	}
	if resp.Model != "" {
		span.SetAttributes(semconv.GenAIResponseModel(resp.Model))
	}
	span.SetAttributes(semconv.GenAIUsageInputTokens(int(resp.Usage.InputTokens)),
		semconv.GenAIUsageOutputTokens(int(resp.Usage.OutputTokens)))
}

// StartToolCall starts the span of one tool call: "execute_tool {name}".
// End it with EndToolCall.
func StartToolCall(ctx context.Context, name, callID string) (context.Context, trace.Span) {
	return Start(ctx, "execute_tool "+name, trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(
		semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(name), semconv.GenAIToolCallID(callID)))
}

// EndToolCall ends a tool call's span: an error if the call failed or its
// result is one.
func EndToolCall(span trace.Span, isError bool, err error) {
	defer span.End()
	switch {
	case err != nil:
		span.SetAttributes(semconv.ErrorTypeKey.String("call_failed"))
		span.SetStatus(codes.Error, "tool call failed")
	case isError:
		span.SetAttributes(semconv.ErrorTypeKey.String("tool_error"))
		span.SetStatus(codes.Error, "the tool answered with an error")
	}
}
