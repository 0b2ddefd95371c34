package api

import (
	"net/http"
	"net/url"

	"github.com/go-chi/chi/v5"

	"github.com/crewlet/crewlet"
)

// ProfilesView is the answer of GET /profiles: every profile with its load
// and whether it can take turns now.
type ProfilesView struct {
	Profiles []crewlet.ProfileStatus `json:"profiles"`
}

// ModelSwitchRequest is the body of POST /models/{id}/disable and
// /models/{id}/enable. By defaults to the caller's principal.
type ModelSwitchRequest struct {
	Reason string `json:"reason"`
	By     string `json:"by"`
}

func (s *Server) listProfiles(w http.ResponseWriter, r *http.Request) {
	profiles, err := s.Profiles.Status(r.Context())
	if err != nil {
		s.logError(w, r, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "profiles cannot be read now; see the server log"))
		return
	}
	writeJSON(w, http.StatusOK, ProfilesView{Profiles: profiles})
}

func (s *Server) disableModel(w http.ResponseWriter, r *http.Request) { s.switchModel(w, r, true) }

func (s *Server) enableModel(w http.ResponseWriter, r *http.Request) { s.switchModel(w, r, false) }

// switchModel switches a model off or back on for the whole fleet. A model
// id may hold a slash ("meta-llama/Llama-3.1-8B"), sent escaped as %2F.
func (s *Server) switchModel(w http.ResponseWriter, r *http.Request, disabled bool) {
	model := chi.URLParam(r, "id")
	if r.URL.RawPath != "" {
		unescaped, err := url.PathUnescape(model)
		if err != nil {
			writeError(w, crewlet.Errorf(crewlet.EINVALID, "model id is not a valid escaped path segment; escape it as a URL path segment (a slash as %%2F)"))
			return
		}
		model = unescaped
	}
	if err := crewlet.CheckText("model id", model, crewlet.MaxIDBytes); err != nil {
		writeError(w, err)
		return
	}
	var req ModelSwitchRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := crewlet.CheckText("reason", req.Reason, crewlet.MaxReasonBytes); err != nil {
		writeError(w, err)
		return
	}
	by, err := actingAs(r, req.By, "operator")
	if err != nil {
		writeError(w, err)
		return
	}
	sw, err := s.Profiles.SwitchModel(r.Context(), model, disabled, by, crewlet.Clean(req.Reason))
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, sw)
}
