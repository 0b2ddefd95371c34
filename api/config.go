package api

import (
	"net/http"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/revisions"
	"github.com/crewlet/crewlet/internal/wire"
)

// maxConfigDocument bounds an org file sent to POST /config; the request
// body's bound (maxBody) holds it with JSON's escapes.
const maxConfigDocument = maxBody / 2

func (s *Server) applyConfig(w http.ResponseWriter, r *http.Request) {
	var req wire.ConfigApplyRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	switch {
	case req.Document == "":
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "document: empty; send the org file's YAML"))
		return
	case len(req.Document) > maxConfigDocument:
		writeError(w, crewlet.Errorf(crewlet.ETOOLARGE, "document: %d bytes, more than %d", len(req.Document), maxConfigDocument))
		return
	}
	if err := crewlet.CheckText("document", req.Document, maxConfigDocument); err != nil {
		writeError(w, err)
		return
	}
	report, err := revisions.Apply(r.Context(), s.Store, revisions.ApplyRequest{
		Document: []byte(req.Document), By: principalOf(r).Name, Restart: req.Restart, Allowed: s.mcpAllowed(),
	})
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if s.Follow != nil && !report.Unchanged {
		// This process takes the revision now; the others within a beat.
		if err := s.Follow(r.Context()); err != nil {
			s.Log.WarnContext(r.Context(), "config_follow_failed", "error", err)
		}
	}
	writeJSON(w, http.StatusOK, report)
}

// mcpAllowed is what an apply through this API may have MCP servers run
// and read: MCPAllowed of the file the process started with, else nothing.
func (s *Server) mcpAllowed() []config.MCPAllow {
	if s.MCPAllowed == nil {
		return []config.MCPAllow{}
	}
	return s.MCPAllowed
}

func (s *Server) getConfig(w http.ResponseWriter, r *http.Request) {
	active, ok, err := s.Store.ActiveConfig(r.Context())
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if !ok {
		writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "no config revision was applied yet; a starting process applies its org file, or run crewlet config apply FILE"))
		return
	}
	processes, err := s.Store.ConfigProcesses(r.Context(), 3*s.Org.Now().Nodes.HeartbeatTimeout)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if processes == nil {
		processes = []wire.ConfigProcess{}
	}
	// Values written inline that may be secrets are shown as <redacted>:
	// an operator reads the config but is not shown what only the
	// processes need.
	document, redacted, err := config.RedactDocument([]byte(active.Document))
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, wire.ConfigState{
		Revision: active.Revision, Digest: active.Digest, AppliedBy: active.AppliedBy, AppliedAt: active.AppliedAt,
		Changes: active.Changes, Processes: processes, Document: string(document), Redacted: redacted,
	})
}
