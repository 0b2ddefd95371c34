package api

import (
	"net/http"
	"strconv"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

func (s *Server) listAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := limitParam(r, 50, maxLimit)
	if err != nil {
		writeError(w, err)
		return
	}
	f := store.AuditFilter{Principal: q.Get("principal"), Outcome: q.Get("outcome"), Action: q.Get("action"), Limit: limit}
	switch f.Outcome {
	case "", wire.AuditAllowed, wire.AuditDenied, wire.AuditFailed:
	default:
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "outcome must be allowed, denied or failed, got %q", f.Outcome))
		return
	}
	if v := q.Get("before"); v != "" {
		if f.Before, err = strconv.ParseInt(v, 10, 64); err != nil || f.Before < 1 {
			writeError(w, crewlet.Errorf(crewlet.EINVALID, "before must be an audit row id, got %q", v))
			return
		}
	}
	if err := crewlet.CheckText("principal", f.Principal, crewlet.MaxNameBytes); err != nil {
		writeError(w, err)
		return
	}
	if err := crewlet.CheckText("action", f.Action, crewlet.MaxReasonBytes); err != nil {
		writeError(w, err)
		return
	}
	entries, err := s.Store.Audit(r.Context(), f)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if entries == nil {
		entries = []wire.AuditEntry{}
	}
	writeJSON(w, http.StatusOK, entries)
}
