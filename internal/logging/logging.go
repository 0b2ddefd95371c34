// Package logging builds a crewlet process's logger, text or JSON at the
// configured level, and carries a request's id in its context, so that
// every line the request causes, in whichever package, names it.
package logging

import (
	"context"
	"io"
	"log/slog"

	"go.opentelemetry.io/otel/trace"

	"github.com/crewlet/crewlet/internal/config"
)

// New returns the logger that log configures, writing to w. Every line
// logged with a context that carries a request id (WithRequestID) gets a
// request_id attribute.
func New(w io.Writer, log config.Log) (*slog.Logger, error) {
	level, err := log.SlogLevel()
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(w, opts)
	if log.Format == config.LogJSON {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(requestHandler{h}), nil
}

type requestIDKey struct{}

// WithRequestID returns ctx carrying the request's id.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestID is the id of the request ctx belongs to, "" outside one.
func RequestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// requestHandler adds the context's request id to each record, and the id
// of its trace when tracing is on.
type requestHandler struct{ slog.Handler }

func (h requestHandler) Handle(ctx context.Context, r slog.Record) error {
	if id := RequestID(ctx); id != "" {
		r.AddAttrs(slog.String("request_id", id))
	}
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h requestHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return requestHandler{h.Handler.WithAttrs(attrs)}
}

func (h requestHandler) WithGroup(name string) slog.Handler {
	return requestHandler{h.Handler.WithGroup(name)}
}
