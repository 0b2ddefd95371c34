package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/wire"
)

// EvalRunRequest is the body of POST /evals/runs.
type EvalRunRequest struct {
	Dataset string        `json:"dataset"`
	Change  replay.Change `json:"change"`
	Checks  []evals.Check `json:"checks,omitempty"`
	// Concurrency is how many replays run at once; 0 is 8.
	Concurrency int `json:"concurrency,omitempty"`
}

func (s *Server) createDataset(w http.ResponseWriter, r *http.Request) {
	var req wire.DatasetRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	d, err := evals.CreateDataset(r.Context(), s.Store, s.Org.Now(), principalOf(r).Name, req)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, d)
}

func (s *Server) listDatasets(w http.ResponseWriter, r *http.Request) {
	ds, err := s.Store.Datasets(r.Context())
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, ds)
}

func (s *Server) getDataset(w http.ResponseWriter, r *http.Request) {
	name, ok := pathID(w, r, "name")
	if !ok {
		return
	}
	d, err := s.Store.Dataset(r.Context(), name)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, d)
}

func (s *Server) deleteDataset(w http.ResponseWriter, r *http.Request) {
	name, ok := pathID(w, r, "name")
	if !ok {
		return
	}
	if err := s.Store.DeleteDataset(r.Context(), name); err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"deleted": name})
}

// startEvalRun records a run, its dataset's turns pending, and starts its
// EvalRun workflow, whose id is the run's: the run is replayed once, by
// whichever worker nodes are up, and outlives any of them.
func (s *Server) startEvalRun(w http.ResponseWriter, r *http.Request) {
	var req EvalRunRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	org := s.Org.Now()
	if err := checkRunRequest(&req, org.Profiles); err != nil {
		writeError(w, err)
		return
	}
	if err := evals.Validate(req.Checks, org); err != nil {
		writeError(w, err)
		return
	}
	if req.Checks == nil {
		req.Checks = []evals.Check{}
	}
	change, err := json.Marshal(req.Change)
	if err != nil {
		s.logError(w, r, fmt.Errorf("encode change: %w", err))
		return
	}
	checks, err := json.Marshal(req.Checks)
	if err != nil {
		s.logError(w, r, fmt.Errorf("encode checks: %w", err))
		return
	}
	run, err := s.Store.CreateEvalRun(r.Context(), wire.EvalRun{
		ID: req.Dataset + "-" + strings.ReplaceAll(uuid.NewString(), "-", "")[:10], Dataset: req.Dataset,
		Change: change, Checks: checks, Concurrency: req.Concurrency, Principal: principalOf(r).Name,
	})
	if err != nil {
		s.logError(w, r, err)
		return
	}
	_, err = s.Temporal.ExecuteWorkflow(r.Context(), client.StartWorkflowOptions{
		ID: crewlet.EvalRunWorkflowID(run.ID), TaskQueue: org.Temporal.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, crewlet.WorkflowEvalRun, crewlet.EvalRunInput{Run: run.ID})
	if err != nil {
		// Nothing replays a run whose workflow did not start.
		_ = s.Store.DeleteEvalRun(r.Context(), run.ID)
		s.logError(w, r, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "eval run of %s cannot start: Temporal is unreachable; try again", req.Dataset))
		return
	}
	run, err = s.Store.EvalRun(r.Context(), run.ID, false)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, run)
}

// checkRunRequest refuses a run request the replays could not run, and
// fills the default concurrency.
func checkRunRequest(req *EvalRunRequest, profiles map[string]config.Profile) error {
	switch {
	case req.Dataset == "":
		return crewlet.Errorf(crewlet.EINVALID, "dataset is empty; `crewlet eval dataset list` lists them")
	case !crewlet.ValidName(req.Dataset):
		return crewlet.Errorf(crewlet.EINVALID, "dataset %q is not a name: use %s", req.Dataset, crewlet.NamePattern)
	case req.Concurrency < 0 || req.Concurrency > wire.MaxEvalConcurrency:
		return crewlet.Errorf(crewlet.EINVALID, "concurrency %d is out of range: 1 to %d (0 is %d)", req.Concurrency, wire.MaxEvalConcurrency, wire.DefaultEvalConcurrency)
	case req.Change.Revision < 0:
		return crewlet.Errorf(crewlet.EINVALID, "revision %d is not a config revision; `crewlet config show` names the active one", req.Change.Revision)
	}
	if p := req.Change.Profile; p != "" && req.Change.Revision == 0 {
		if _, ok := profiles[p]; !ok {
			return crewlet.Errorf(crewlet.EINVALID, "profile %q is not in the org; `crewlet profiles` lists them", p)
		}
	}
	if req.Concurrency == 0 {
		req.Concurrency = wire.DefaultEvalConcurrency
	}
	return nil
}

func (s *Server) listEvalRuns(w http.ResponseWriter, r *http.Request) {
	runs, err := s.Store.EvalRuns(r.Context())
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, runs)
}

// getEvalRun answers a run's report: its totals and per turn the recorded
// and replayed answers (each clipped at 4 KiB) and each check's result;
// ?turn= answers that turn alone with its whole replay report.
func (s *Server) getEvalRun(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "run")
	if !ok {
		return
	}
	run, err := s.Store.EvalRun(r.Context(), id, true)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if turn := r.URL.Query().Get("turn"); turn != "" {
		var one []wire.EvalResult
		for _, res := range run.Results {
			if res.Turn == turn {
				one = append(one, res)
			}
		}
		if one == nil {
			writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "turn %s is not in eval run %s", turn, id))
			return
		}
		run.Results = one
		writeJSON(w, http.StatusOK, run)
		return
	}
	for i := range run.Results {
		res := &run.Results[i]
		res.Report = nil
		res.Recorded, res.Replayed = crewlet.Clip(res.Recorded, maxListText), crewlet.Clip(res.Replayed, maxListText)
	}
	head := run
	head.Results = nil
	n := fit(len(run.Results), readBudget-jsonSize(head), func(i int) int { return jsonSize(run.Results[i]) })
	if n < len(run.Results) {
		w.Header().Set(truncatedHeader, fmt.Sprintf("%d of %d turns, at the %d-byte limit of one answer; read a turn with ?turn=ID", n, len(run.Results), readBudget))
	}
	run.Results = run.Results[:n]
	writeJSON(w, http.StatusOK, run)
}

// policyWhatIf holds the recorded tool calls of a dataset's or listed turns
// to a candidate org's approvals and may: no model is called, nothing is
// written. The totals count every call; the turns are cut short at
// readBudget bytes.
func (s *Server) policyWhatIf(w http.ResponseWriter, r *http.Request) {
	var req replay.PolicyRequest
	if err := readJSON(r, &req); err != nil {
		writeError(w, err)
		return
	}
	report, err := replay.WhatIfPolicy(r.Context(), s.Store, req)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	head := report
	head.Turns = nil
	n := fit(len(report.Turns), readBudget-jsonSize(head), func(i int) int { return jsonSize(report.Turns[i]) })
	if n < len(report.Turns) {
		w.Header().Set(truncatedHeader, fmt.Sprintf("%d of %d turns, at the %d-byte limit of one answer; the totals count them all; ask for fewer turns", n, len(report.Turns), readBudget))
	}
	report.Turns = report.Turns[:n]
	writeJSON(w, http.StatusOK, report)
}
