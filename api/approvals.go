package api

import (
	"net/http"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// approvalStatusAll lists approvals whatever their status.
const approvalStatusAll = "all"

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, err := limitParam(r, 50, wire.MaxApprovals)
	if err != nil {
		writeError(w, err)
		return
	}
	f := store.ApprovalFilter{Handle: q.Get("seat"), Status: q.Get("status"), Limit: limit}
	switch f.Status {
	case "":
		f.Status = crewlet.ApprovalPending
	case approvalStatusAll:
		f.Status = ""
	case crewlet.ApprovalPending, crewlet.ApprovalApproved, crewlet.ApprovalDenied, crewlet.ApprovalSuperseded:
	default:
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "status must be pending, approved, denied, superseded or all, got %q", crewlet.Clean(f.Status)))
		return
	}
	if f.Handle != "" {
		if err := crewlet.CheckID("seat", f.Handle); err != nil {
			writeError(w, err)
			return
		}
	}
	if p := principalOf(r); p.Role == config.RoleMember {
		f.Approvers = approverNames(s.Org.Now(), p)
	}
	list, err := s.Store.Approvals(r.Context(), f)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

func (s *Server) approveApproval(w http.ResponseWriter, r *http.Request) {
	s.decideApproval(w, r, true)
}

func (s *Server) denyApproval(w http.ResponseWriter, r *http.Request) { s.decideApproval(w, r, false) }

// decideApproval takes a decision from a principal the approval's policy
// names; anyone else gets 403.
func (s *Server) decideApproval(w http.ResponseWriter, r *http.Request, approve bool) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	var req wire.ApprovalDecision
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	if err := crewlet.CheckText("reason", req.Reason, crewlet.MaxReasonBytes); err != nil {
		writeError(w, err)
		return
	}
	if !approve && req.Reason == "" {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "a denial needs a reason: the model is told it"))
		return
	}
	var remember *approvals.Remember
	if req.Remember != nil {
		remember = &approvals.Remember{Args: req.Remember.Args, Until: req.Remember.Until}
	}
	p := principalOf(r)
	a, err := s.Approvals.Decide(r.Context(), id, approvals.Decider{Name: p.Name, Role: p.Role, Seat: p.Seat}, approve, req.Reason, remember)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}
