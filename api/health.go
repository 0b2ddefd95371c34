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

// readyz reports each dependency; 503 when any is unreachable.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
	defer cancel()
	check := func(err error) string {
		if err != nil {
			return "unreachable: " + err.Error()
		}
		return "ok"
	}
	_, terr := s.Temporal.CheckHealth(ctx, &client.CheckHealthRequest{})
	res := readiness{
		Temporal: check(terr),
		Postgres: check(s.Store.Ping(ctx)),
		Redis:    check(s.Mailbox.Ping(ctx)),
	}
	res.Ready = res.Temporal == "ok" && res.Postgres == "ok" && res.Redis == "ok"
	status := http.StatusOK
	if !res.Ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, res)
}
