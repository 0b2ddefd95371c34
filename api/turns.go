package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/google/uuid"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

func (s *Server) seatUsage(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	usage, err := s.Views.Usage(r.Context(), seat.Handle)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, usage)
}

func (s *Server) companyUsage(w http.ResponseWriter, r *http.Request) {
	usage, err := s.Views.CompanyUsage(r.Context())
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, usage)
}

func (s *Server) seatTurns(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	limit, err := limitParam(r, 20, wire.MaxTurns)
	if err != nil {
		writeError(w, err)
		return
	}
	turns, err := s.Views.Turns(r.Context(), seat.Handle, limit)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	for i := range turns {
		for j := range turns[i].Mail {
			turns[i].Mail[j].Body = crewlet.Clip(turns[i].Mail[j].Body, maxListText)
		}
	}
	if n := fit(len(turns), readBudget, func(i int) int { return jsonSize(turns[i]) }); n < len(turns) {
		w.Header().Set(truncatedHeader, fmt.Sprintf("%d of %d turns, at the %d-byte limit of one answer; ask for limit=%d, or read a turn whole with GET /turns/{handle}/{work_key}", n, len(turns), readBudget, n))
		turns = turns[:n]
	}
	writeJSON(w, http.StatusOK, turns)
}

func (s *Server) getTurn(w http.ResponseWriter, r *http.Request) {
	handle, ok := pathID(w, r, "handle")
	if !ok {
		return
	}
	workKey, ok := pathID(w, r, "work_key")
	if !ok {
		return
	}
	from, err := intParam(r, "from", "a message's index (the next of a previous answer)", 0)
	if err != nil {
		writeError(w, err)
		return
	}
	id := crewlet.TurnWorkflowID(handle, workKey)
	view, err := s.Views.Turn(r.Context(), id)
	if err == nil {
		view.Approvals, err = s.Store.Approvals(r.Context(), store.ApprovalFilter{Handle: handle, TurnID: id, Limit: wire.MaxApprovals})
	}
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fitTurnView(view, int(min(from, int64(len(view.Messages))))))
}

// fitTurnView is the view's messages from index from on, each content
// clipped at maxReadText, as many as fit in readBudget beside the rest of
// the view; Next says where the rest begins.
func fitTurnView(view wire.TurnView, from int) wire.TurnView {
	msgs := view.Messages[from:]
	view.Messages = nil
	for i := range msgs {
		msgs[i].Message.Content = crewlet.Clip(msgs[i].Message.Content, maxReadText)
	}
	n := fit(len(msgs), readBudget-jsonSize(view), func(i int) int { return jsonSize(msgs[i]) })
	view.Messages = msgs[:n]
	if n < len(msgs) {
		view.Next = from + n
	}
	return view
}

// replayTurn re-runs a recorded turn with a changed setting
// (docs/architecture.md, "Replay"). It runs here, in the API process: its
// model calls are stateless, it takes no profile slot a seat's turn would
// wait for, and no MCP child lives here, so no tool can run. A replay with
// live_read_only may run read-only MCP tools, which live on worker nodes:
// it is handed to one (liveReplay).
func (s *Server) replayTurn(w http.ResponseWriter, r *http.Request) {
	handle, ok := pathID(w, r, "handle")
	if !ok {
		return
	}
	workKey, ok := pathID(w, r, "work_key")
	if !ok {
		return
	}
	p := principalOf(r)
	if !MayReadTranscript(p, handle) {
		writeError(w, crewlet.Errorf(crewlet.EFORBIDDEN, "%s may not read %s's transcript, which a replay shows", p.Name, handle))
		return
	}
	if s.Replay == nil {
		writeError(w, crewlet.Errorf(crewlet.EUNAVAILABLE, "this process replays no turns; ask an API process started by crewlet serve or crewlet api"))
		return
	}
	var change replay.Change
	if err := readJSON(r, &change); err != nil {
		writeError(w, err)
		return
	}
	if change.Revision < 0 {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "revision %d is not a config revision; `crewlet config show` names the active one", change.Revision))
		return
	}
	turnID := crewlet.TurnWorkflowID(handle, workKey)
	var report replay.Report
	var err error
	if change.LiveReadOnly {
		report, err = s.liveReplay(r.Context(), turnID, p.Name, change)
	} else {
		report, err = s.Replay.Replay(r.Context(), turnID, p.Name, change)
		// The tool results are the recorded turn's, read whole with
		// GET /turns/{handle}/{work_key}; the report shows where each
		// came from.
		report.ClipResults(maxListText)
	}
	if err != nil {
		s.logError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, report)
}

// liveReplay runs a replay with live_read_only as a ReplayTurn workflow on
// a worker node, where the seat's MCP servers may start as its tenure
// starts them, and waits for its report, its tool results clipped there.
func (s *Server) liveReplay(ctx context.Context, turnID, principal string, change replay.Change) (replay.Report, error) {
	raw, err := json.Marshal(change)
	if err != nil {
		return replay.Report{}, fmt.Errorf("encode change: %w", err)
	}
	run, err := s.Temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: crewlet.ReplayTurnWorkflowID(turnID, uuid.NewString()), TaskQueue: s.Org.Now().Temporal.TaskQueue,
	}, crewlet.WorkflowReplayTurn, crewlet.ReplayTurnInput{Turn: turnID, Principal: principal, Change: raw, ClipAt: maxListText})
	if err != nil {
		return replay.Report{}, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the replay of %s cannot start on a worker node: Temporal is unreachable; try again", turnID)
	}
	var out crewlet.ReplayTurnOutput
	err = run.Get(ctx, &out)
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return replay.Report{}, crewlet.Errorf(crewlet.EUNAVAILABLE, "no worker node finished the replay of %s in time (workflow %s): `crewlet nodes` shows whether one runs; try again", turnID, run.GetID())
	}
	if err != nil {
		return replay.Report{}, fmt.Errorf("replay %s on a worker node (workflow %s): %w", turnID, run.GetID(), err)
	}
	if out.ErrorCode != "" {
		return replay.Report{}, crewlet.Errorf(out.ErrorCode, "%s", out.Error)
	}
	var report replay.Report
	if err := json.Unmarshal(out.Report, &report); err != nil {
		return replay.Report{}, fmt.Errorf("decode the report of %s: %w", run.GetID(), err)
	}
	return report, nil
}
