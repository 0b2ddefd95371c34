package tracing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// The standard OTEL_* variables turn tracing on and choose the exporter;
// with none set it is off, and a value it cannot use is refused by name.
func TestFromEnv(t *testing.T) {
	vars := []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT",
		"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"}
	for _, tc := range []struct {
		name    string
		env     map[string]string
		on      bool
		wantErr string
	}{
		{name: "nothing set", on: false},
		{name: "an OTLP endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: true},
		{name: "a traces endpoint over grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, on: true},
		{name: "console", env: map[string]string{"OTEL_TRACES_EXPORTER": "console"}, on: true},
		{name: "none", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, on: false},
		{name: "SDK disabled", env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, on: false},
		{name: "unknown exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,zipkin"}, wantErr: `OTEL_TRACES_EXPORTER names "zipkin"`},
		{name: "unknown protocol", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"}, wantErr: `PROTOCOL is "http/json"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range vars {
				t.Setenv(v, tc.env[v])
			}
			tr, err := FromEnv(context.Background())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v; want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Shutdown(context.Background())
			if on := tr != nil; on != tc.on {
				t.Fatalf("tracing on: %v; want %v", on, tc.on)
			}
		})
	}
}

// Off, the HTTP handler is the one given, and the Temporal client gets no
// interceptor: tracing costs nothing.
func TestOffWrapsNothing(t *testing.T) {
	t.Parallel()
	var off *Tracing
	h := http.NewServeMux()
	if got := off.Handler(h); got != http.Handler(h) {
		t.Fatal("tracing off wrapped the handler")
	}
	if is, err := off.Interceptors(); err != nil || len(is) != 0 {
		t.Fatalf("tracing off: interceptors %v, %v; want none", is, err)
	}
	if err := off.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// A request's span is named by its route once NameRequest has run, and
// continues the caller's trace.
func TestHandlerNamesTheRoute(t *testing.T) {
	t.Parallel()
	exporter := tracetest.NewInMemoryExporter()
	tr := New(sdktrace.NewTracerProvider(sdktrace.WithSyncer(exporter)))
	h := tr.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		NameRequest(r.Context(), r.Method, "/seats/{handle}")
		w.WriteHeader(http.StatusNoContent)
	}))
	req := httptest.NewRequest(http.MethodGet, "/seats/cto", nil)
	req.Header.Set("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	h.ServeHTTP(httptest.NewRecorder(), req)
	spans := exporter.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans; want 1", len(spans))
	}
	s := spans[0]
	if s.Name != "GET /seats/{handle}" || attr(s, "http.route") != "/seats/{handle}" {
		t.Fatalf("span %q route %q; want GET /seats/{handle}", s.Name, attr(s, "http.route"))
	}
	if got := s.SpanContext.TraceID().String(); got != "0af7651916cd43dd8448eb211c80319c" {
		t.Fatalf("trace %s; want the caller's", got)
	}
}
