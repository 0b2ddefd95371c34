// Package tracing is crewlet's OpenTelemetry tracing: a tracer provider
// configured by the standard OTEL_* environment variables, the Temporal
// SDK's tracing interceptor, and the HTTP middleware. One message is one
// trace: the API request that publishes it, the publish, the seat starting
// the turn, the turn, each model round and each tool call. Tracing is off
// unless the environment names an exporter; off, nothing is wrapped. Spans
// are exported in the background and dropped when the exporter falls
// behind, so tracing never holds up a turn.
package tracing

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// Scope is the instrumentation scope of crewlet's own spans.
const Scope = "github.com/crewlet/crewlet"

// Tracing is a process's tracing. A nil *Tracing is tracing off: every
// method is safe on it and does nothing.
type Tracing struct {
	provider *sdktrace.TracerProvider
}

// New is tracing through provider; FromEnv builds the provider the
// environment configures, a test builds one with an in-memory exporter.
func New(provider *sdktrace.TracerProvider) *Tracing {
	return &Tracing{provider: provider}
}

// FromEnv builds tracing from the standard OpenTelemetry environment:
// OTEL_TRACES_EXPORTER (otlp, console or none; otlp when unset but an OTLP
// endpoint is set), OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL (http/protobuf or
// grpc), OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT and _HEADERS, OTEL_SERVICE_NAME
// (default crewlet), OTEL_RESOURCE_ATTRIBUTES, OTEL_TRACES_SAMPLER and
// OTEL_BSP_*. It returns nil (off) when none names an exporter, or when
// OTEL_SDK_DISABLED=true.
func FromEnv(ctx context.Context) (*Tracing, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return nil, nil
	}
	names := os.Getenv("OTEL_TRACES_EXPORTER")
	if names == "" {
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return nil, nil
		}
		names = "otlp"
	}
	var opts []sdktrace.TracerProviderOption
	for _, name := range strings.Split(names, ",") {
		exp, err := exporter(ctx, strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		if exp != nil {
			opts = append(opts, sdktrace.WithBatcher(exp))
		}
	}
	if len(opts) == 0 {
		return nil, nil
	}
	// Later sources win: the environment's service name over crewlet's.
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName("crewlet")),
		resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil {
		return nil, fmt.Errorf("tracing: OTEL_RESOURCE_ATTRIBUTES or OTEL_SERVICE_NAME: %w", err)
	}
	return New(sdktrace.NewTracerProvider(append(opts, sdktrace.WithResource(res))...)), nil
}

func exporter(ctx context.Context, name string) (sdktrace.SpanExporter, error) {
	switch name {
	case "none":
		return nil, nil
	case "console":
		return stdouttrace.New()
	case "otlp":
		protocol := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
		if protocol == "" {
			protocol = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
		}
		switch protocol {
		case "", "http/protobuf":
			return otlptracehttp.New(ctx)
		case "grpc":
			return otlptracegrpc.New(ctx)
		}
		return nil, fmt.Errorf("tracing: OTEL_EXPORTER_OTLP_PROTOCOL is %q; use http/protobuf or grpc", protocol)
	}
	return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER names %q; use otlp, console or none (a list is comma-separated)", name)
}

// Shutdown exports what is buffered and stops the exporters.
func (t *Tracing) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.provider.Shutdown(ctx)
}

// headerKey is the Temporal header field that carries a span; it is the one
// every SDK's tracing uses.
const headerKey = "_tracer-data"

// propagator carries a span across processes: in HTTP headers, Temporal
// headers and mailbox entries alike.
var propagator = propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})

// Interceptors are the Temporal client's interceptors, also used by every
// worker built from the client: the SDK's OpenTelemetry tracing, with a
// seat's runs made roots and a turn made a child of the message it answers.
func (t *Tracing) Interceptors() ([]interceptor.ClientInterceptor, error) {
	if t == nil {
		return nil, nil
	}
	spanKey := &struct{ name string }{"crewlet span"}
	tracer, err := temporalotel.NewTracer(temporalotel.TracerOptions{
		Tracer: t.provider.Tracer(Scope + "/temporal"), TextMapPropagator: propagator,
		SpanContextKey: spanKey, HeaderKey: headerKey,
	})
	if err != nil {
		return nil, fmt.Errorf("tracing: temporal interceptor: %w", err)
	}
	return []interceptor.ClientInterceptor{
		&seatRunsAreRoots{},
		interceptor.NewTracingInterceptor(tracer),
		&turnsFollowMessages{tracer: tracer, spanKey: spanKey},
	}, nil
}

// Handler wraps an HTTP handler so each request is a span, continuing the
// caller's trace when it sends a traceparent header. The span is named by
// the request's method until NameRequest names its route.
func (t *Tracing) Handler(h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return otelhttp.NewHandler(h, "crewlet.api", otelhttp.WithTracerProvider(t.provider),
		otelhttp.WithPropagators(propagator), otelhttp.WithSpanNameFormatter(func(_ string, r *http.Request) string {
			return r.Method
		}))
}

// NameRequest names a request's span by its route pattern once routing has
// found it, as the HTTP semantic conventions ask ("POST /seats/{handle}/messages").
func NameRequest(ctx context.Context, method, route string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetName(method + " " + route)
	span.SetAttributes(semconv.HTTPRoute(route))
}

// Start starts a crewlet span as a child of ctx's span, through the same
// provider; without a span in ctx (tracing off) it is a no-op span.
func Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	return trace.SpanFromContext(ctx).TracerProvider().Tracer(Scope).Start(ctx, name, opts...)
}

// Traceparent is the W3C traceparent of ctx's span, "" without one: what a
// mailbox entry carries so the turn that answers it joins its trace.
func Traceparent(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier["traceparent"]
}

// withTraceparent is ctx with the remote span a traceparent names as its
// span; ctx unchanged for "" or a malformed one.
func withTraceparent(ctx context.Context, traceparent string) context.Context {
	if traceparent == "" {
		return ctx
	}
	return propagation.TraceContext{}.Extract(ctx, propagation.MapCarrier{"traceparent": traceparent})
}
