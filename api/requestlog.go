package api

import (
	"context"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/logging"
	"github.com/crewlet/crewlet/internal/tracing"
)

// accessKey carries a request's access entry, which guard completes with
// the principal once it knows who is asking.
type accessKey struct{}

type accessEntry struct{ principal string }

// requestLog gives every request an id, the caller's X-Request-Id when it
// is a valid id of at most 64 characters and a new one otherwise, echoes it
// in the X-Request-Id response header and carries it in the request's
// context, so every line the request causes names it. When the request
// ends it writes one access line: method, route pattern, status, duration
// and principal.
func (s *Server) requestLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		began := time.Now()
		id := r.Header.Get("X-Request-Id")
		if len(id) > 64 || crewlet.CheckID("request id", id) != nil {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		entry := &accessEntry{principal: "-"}
		ctx := context.WithValue(logging.WithRequestID(r.Context(), id), accessKey{}, entry)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		r = r.WithContext(ctx)
		next.ServeHTTP(rec, r)
		route := "-"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		took := time.Since(began)
		tracing.NameRequest(ctx, r.Method, route)
		s.Metrics.HTTPRequest(r.Method+" "+route, rec.status, took)
		s.Log.InfoContext(ctx, "http_request", "method", r.Method, "route", route, "status", rec.status,
			"duration_ms", took.Milliseconds(), "principal", entry.principal)
	})
}

// requestID is the request's id, also in the X-Request-Id response header.
func requestID(r *http.Request) string {
	return logging.RequestID(r.Context())
}

// setPrincipal records, for the request's access line, who asked.
func setPrincipal(r *http.Request, p Principal) {
	if entry, ok := r.Context().Value(accessKey{}).(*accessEntry); ok && p.Name != "" {
		entry.principal = p.Name
	}
}
