package api

import (
	"context"
	"net/http"
	"time"

	"go.temporal.io/sdk/client"
)

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

type readiness struct {
	Ready    bool   `json:"ready"`
	Temporal string `json:"temporal"`
	Postgres string `json:"postgres"`
	Redis    string `json:"redis"`
}

// readyz reports each dependency as ok or unreachable; 503 when any is
// unreachable. Why is in the log under the request's id, never in the
// answer: the probe is public, and a driver's error names hosts, ports,
// users and databases.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	check := func(backend string, err error) string {
		if err != nil {
			s.Log.WarnContext(r.Context(), "readyz_unreachable", "backend", backend, "error", err)
			return backendUnreachable
		}
		return backendOK
	}
	_, terr := s.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
	res := readiness{
		Temporal: check("temporal", terr),
		Postgres: check("postgres", s.Store.Ping(ctx)),
		Redis:    check("redis", s.Mailbox.Ping(ctx)),
	}
	res.Ready = res.Temporal == backendOK && res.Postgres == backendOK && res.Redis == backendOK
	status := http.StatusOK
	if !res.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, res)
}

// What readyz says of a backend.
const (
	backendOK          = "ok"
	backendUnreachable = "unreachable"
)
