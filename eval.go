package crewlet

import "encoding/json"

// EvalRunWorkflowID is the id of the EvalRun workflow of run: one per run,
// so a run starts once however often its start is asked again.
func EvalRunWorkflowID(run string) string { return "eval/" + run }

// EvalRunInput starts EvalRun.
type EvalRunInput struct {
	Run string `json:"run"`
}

// EvalPlan is the turns of a run still to replay, in the dataset's order,
// and how many to replay at once.
type EvalPlan struct {
	Turns       []string `json:"turns"`
	Concurrency int      `json:"concurrency"`
}

// EvalTurnInput replays one turn of a run and scores it.
type EvalTurnInput struct {
	Run  string `json:"run"`
	Turn string `json:"turn"`
}

// EvalTurnOutput is what became of the turn: scored, failed, refused (the
// eval budget is spent), or already (a result was written before: a retry
// or a resumed run skips it).
type EvalTurnOutput struct {
	Status string `json:"status"`
}

// EvalTurnAlready is EvalTurnOutput's status of a turn scored before.
const EvalTurnAlready = "already"

// EvalFinishInput ends a run: done, or budget_exhausted with its pending
// turns refused.
type EvalFinishInput struct {
	Run    string `json:"run"`
	Status string `json:"status"`
}

// ReplayTurnWorkflowID is the id of one ReplayTurn workflow of the turn
// turnID; nonce tells two replays of one turn apart.
func ReplayTurnWorkflowID(turnID, nonce string) string { return "replay/" + turnID + "/" + nonce }

// ReplayTurnInput is one replay run on a worker node: the turn, who asked
// (charged to evals.budget), the change as the replay engine reads it, and
// the length each tool result of the report is clipped at (zero keeps
// them whole).
type ReplayTurnInput struct {
	Turn      string          `json:"turn"`
	Principal string          `json:"principal"`
	Change    json.RawMessage `json:"change"`
	ClipAt    int             `json:"clip_at,omitempty"`
}

// ReplayTurnOutput is the replay's report as JSON, or the refusal the
// replay engine gave (a domain error's code and message, for the API to
// answer with).
type ReplayTurnOutput struct {
	Report    json.RawMessage `json:"report,omitempty"`
	ErrorCode string          `json:"error_code,omitempty"`
	Error     string          `json:"error,omitempty"`
}
