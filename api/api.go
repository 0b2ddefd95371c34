// Package api is crewlet's REST API: a chi router over the org, its seats and
// their conversations. Errors are JSON {error, detail}.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/profiles"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/spawn"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/tracing"
	"github.com/crewlet/crewlet/internal/views"
	"github.com/crewlet/crewlet/internal/wire"
	"github.com/crewlet/crewlet/ui"
)

// Server serves the API.
type Server struct {
	Org config.Source
	// Seats steers seats (pause, resume, drain) and lists their statuses.
	Seats *seatclient.Client
	// Views answers the reads that combine workflows, Postgres and Redis.
	Views    *views.Reader
	Delivery *delivery.Service
	Store    *store.Store
	Tickets  *tickets.Service
	Profiles *profiles.Service
	Mailbox  *mailbox.Mailbox
	Temporal client.Client
	Log      *slog.Logger
	// Metrics is the process's registry: GET /metrics serves it, and every
	// request is counted in it; nil counts nothing.
	Metrics *metrics.Metrics
	// Tracing makes each request a span; nil (tracing off) makes none.
	Tracing *tracing.Tracing
	// Follow makes this process take the active config revision now, after
	// an apply; nil leaves it to the process's follower.
	Follow func(context.Context) error
	// Spawn creates seats from the roles' pools; nil refuses to.
	Spawn *spawn.Service
	// Approvals takes the decisions on gated tool calls.
	Approvals *approvals.Service
	// Events reads the live event streams; nil serves none (503).
	Events *events.Reader
	// Replay re-runs recorded turns (POST /turns/{handle}/{work_key}/replay);
	// nil serves none (503).
	Replay *replay.Engine
	// TicketWatch wakes POST /tickets long-polls when their ticket
	// changes; nil refuses wait.
	TicketWatch *store.TicketWatch
	// openStreams counts each principal's open live streams.
	openStreams streamCounts
	// heavyReads holds a slot per heavy read being served, and
	// heavyByPrincipal counts each principal's.
	heavyReads       chan struct{}
	heavyByPrincipal streamCounts
	// tokens are the tokens of the revision the process last served.
	tokens atomic.Pointer[tokensOf]
	// mutations are each principal's mutation budget, refusals its
	// budget of refused requests the audit log takes.
	mutations, refusals perPrincipal
	// LocalToken is the token auth.local_token minted for this boot,
	// taken as an admin's; empty when off.
	LocalToken string
	// MCPAllowed is the process's nodes.mcp_allow (config.MCPAllowed of the
	// file it started with): POST /config refuses a revision beyond it.
	MCPAllowed []config.MCPAllow
	// sources are what the door remembers of each caller's address.
	sources sourceTable
	// mcp serves /mcp (mcp.go).
	mcp http.Handler
}

// maxBody bounds a request body; mail and signals are small.
const maxBody = 1 << 20

// route is one API route and the action it takes, whose rule in the
// authority table (internal/authority, the one table of who may do what
// for REST, the CLI, which calls REST, and the seat tools) gives the right
// it needs and the scope it acts on. docs/operations.md lists the routes,
// and a test holds the two together. The same table describes the route
// in the OpenAPI document (GET /openapi.json): what it is for, its query
// parameters, the body it takes and the answer it gives.
type route struct {
	method, pattern string
	action          authority.Action
	handler         http.HandlerFunc
	summary         string
	query           []param
	// body is the request body's type (a zero value), nil for none, and
	// needs the fields of it the route refuses to go without.
	body  any
	needs []string
	// answer is the response body's type (a zero value), and statuses the
	// statuses it comes with (200 when none).
	answer   any
	statuses []int
	// conflict, when set, says when the route answers 409.
	conflict string
	// contentType is the answer's, when it is not JSON.
	contentType string
	// heavy marks a large read: its answer is held to readBudget bytes, and
	// at most maxHeavyReads run at once (429 past that).
	heavy bool
	// session marks a route that carries a session of calls (MCP), each a
	// route of its own called in-process: the guard authenticates it and
	// checks its action, and leaves the mutation budget and the audit row
	// of each call to the route the call is (and opening a session's budget
	// to the handler).
	session bool
	// rpc marks a JSON-RPC endpoint (A2A), whose requests are all POSTs:
	// the handler spends the principal's mutation budget once it has read
	// the method, for a method that changes something, so reading a task
	// costs what GET /tickets/{id} does.
	rpc bool
}

func (s *Server) routes() []route {
	get, post, del := http.MethodGet, http.MethodPost, http.MethodDelete
	accepted := []int{http.StatusAccepted}
	return append([]route{
		{method: get, pattern: "/healthz", action: authority.Probe, handler: s.healthz,
			summary: "the process is up", answer: map[string]string{}},
		{method: get, pattern: "/readyz", action: authority.Probe, handler: s.readyz,
			summary: "Temporal, Postgres and Redis each ok or unreachable (503 when one is unreachable); why is in the log under the request id", answer: readiness{},
			statuses: []int{http.StatusOK, http.StatusServiceUnavailable}},
		{method: get, pattern: "/openapi.json", action: authority.Probe, handler: s.openAPI,
			summary: "this document", answer: map[string]any{}},
		{method: get, pattern: "/metrics", action: authority.ReadFleet, handler: s.metrics,
			summary: "the process's metrics in Prometheus text format (docs/operations.md lists them)", answer: "",
			contentType: "text/plain"},
		{method: get, pattern: "/me", action: authority.ReadRoster, handler: s.me,
			summary: "who the token is, and what it may read and do", answer: Me{}},
		{method: get, pattern: "/seats", action: authority.ReadRoster, handler: s.listSeats,
			summary: "every seat of the org with its status, health, epoch and node, the turn it runs and the mail waiting for it", answer: []SeatSummary{}},
		{method: get, pattern: "/seats/{handle}", action: authority.ReadSeat, handler: s.getSeat,
			summary: "one seat: its config, tenure, live state and open tickets", answer: SeatDetail{}},
		{method: post, pattern: "/seats/{handle}/messages", action: authority.SendMail, handler: s.sendMessage,
			summary: "send the seat a message; it is answered in its conversation", body: SendMessageRequest{}, needs: []string{"text"},
			answer: crewlet.Message{}, statuses: accepted},
		{method: get, pattern: "/seats/{handle}/inbox", action: authority.ReadSeat, handler: s.inbox,
			summary: "the newest entries of the seat's mailbox, oldest first, Redis and its Postgres archive as one list",
			query:   []param{limitQuery(20, maxLimit), beforeQuery("the page before the entry with this stream_id (the first of a page)")}, answer: []crewlet.Message{}, heavy: true},
		{method: get, pattern: "/seats/{handle}/events", action: authority.ReadSeat, handler: s.seatEvents,
			summary: "the seat's recorded events, newest first", query: []param{limitQuery(100, maxLimit)}, answer: []wire.SeatEvent{}},
		{method: get, pattern: "/seats/{handle}/stream", action: authority.ReadSeat, handler: s.seatStream,
			summary: "the seat's live events as Server-Sent Events (id, event, data JSON), from after Last-Event-ID or from now; a keepalive comment when idle. 429 past stream.max_per_principal open streams",
			query:   []param{{LastEventQuery, "string", "the id to resume after, when the Last-Event-ID header cannot be sent"}},
			answer:  events.Event{}, contentType: "text/event-stream"},
		{method: post, pattern: "/seats/{handle}/pause", action: authority.SteerFleet, handler: s.pauseSeat,
			summary: "pause the seat (signal pause)", body: crewlet.PauseRequest{}, answer: SignalResponse{}, statuses: accepted,
			conflict: "the seat is paused already"},
		{method: post, pattern: "/seats/{handle}/resume", action: authority.SteerFleet, handler: s.resumeSeat,
			summary: "resume a paused seat (signal resume)", body: crewlet.ResumeRequest{}, answer: SignalResponse{}, statuses: accepted,
			conflict: "the seat is neither paused nor drained"},
		{method: post, pattern: "/seats/{handle}/drain", action: authority.SteerFleet, handler: s.drainSeat,
			summary: "drain the seat: finish its turn, take no more mail (signal drain)", body: crewlet.DrainRequest{},
			answer: SignalResponse{}, statuses: accepted, conflict: "the seat is draining or drained already"},
		{method: get, pattern: "/usage", action: authority.ReadFleet, handler: s.companyUsage,
			summary: "the company's token and money usage against company.budget, per window", answer: crewlet.CompanyUsage{}},
		{method: get, pattern: "/seats/{handle}/usage", action: authority.ReadSeat, handler: s.seatUsage,
			summary: "the seat's token and money usage against its budgets", answer: crewlet.SeatUsage{}},
		{method: get, pattern: "/seats/{handle}/turns", action: authority.ReadSeat, handler: s.seatTurns,
			summary: "the seat's recent turns, newest first; each trigger's body clipped at 4 KiB, and the list cut short at 4 MiB (header " + truncatedHeader + ")",
			query:   []param{limitQuery(20, wire.MaxTurns)}, answer: []wire.TurnRow{}, heavy: true},
		{method: get, pattern: "/seats/{handle}/memory", action: authority.ReadSeat, handler: s.seatMemory,
			summary: "the seat's diary, episodes and counterparties",
			query: []param{
				{"kind", "string", "one list: diary, episodes or counterparties; all three when unset"},
				{"before", "string", "the next page of the list kind names, from a previous page's next"},
				limitQuery(20, wire.MaxMemoryPage),
			}, answer: MemoryView{}},
		{method: get, pattern: "/turns/{handle}/{work_key}", action: authority.ReadSeat, handler: s.getTurn,
			summary: "one turn: its triggers, rounds, tool calls and outcome; a message's content clipped at 256 KiB, and the messages cut short at 4 MiB with next, the from of the rest",
			query:   []param{{"from", "integer", "the index of the first message to answer, a previous answer's next"}},
			answer:  wire.TurnView{}, heavy: true},
		{method: post, pattern: "/turns/{handle}/{work_key}/replay", action: authority.ReplayTurn, handler: s.replayTurn,
			summary: "re-run a finished turn with a changed charter, profile, model or config revision: each round's context as it stood, the model called anew, every tool call answered from the recorded call of the same tool and arguments or marked diverged and never run; charged to evals.budget (429 once spent), nothing written of the seat's; each tool result clipped at 4 KiB",
			body:    replay.Change{}, answer: replay.Report{},
			conflict: "the turn is still running"},
		{method: post, pattern: "/evals/datasets", action: authority.RunEvals, handler: s.createDataset,
			summary: "freeze a set of finished turns as a dataset: a seat's or a role's turns started in [since, until) (the newest limit of them), or a list of turn ids; at most " + strconv.Itoa(wire.MaxDatasetTurns),
			body:    wire.DatasetRequest{}, needs: []string{"name"}, answer: wire.Dataset{}, statuses: []int{http.StatusCreated},
			conflict: "a dataset of that name exists"},
		{method: get, pattern: "/evals/datasets", action: authority.ReadEvals, handler: s.listDatasets,
			summary: "the datasets, newest first, with their sizes", answer: []wire.Dataset{}},
		{method: get, pattern: "/evals/datasets/{name}", action: authority.ReadEvals, handler: s.getDataset,
			summary: "a dataset and its turn ids", answer: wire.Dataset{}},
		{method: del, pattern: "/evals/datasets/{name}", action: authority.RunEvals, handler: s.deleteDataset,
			summary: "delete a dataset; the runs made of it keep their turns", answer: map[string]string{}},
		{method: post, pattern: "/evals/runs", action: authority.RunEvals, handler: s.startEvalRun,
			summary: "replay every turn of a dataset with one change (charter, profile, model, revision) as a durable workflow, a bounded number at once (concurrency, default 8), and score each replay with the checks; charged to evals.budget, and stopped (status budget_exhausted, the rest refused) once it is spent",
			body:    EvalRunRequest{}, needs: []string{"dataset"}, answer: wire.EvalRun{}, statuses: accepted},
		{method: post, pattern: "/evals/policy", action: authority.RunEvals, handler: s.policyWhatIf,
			summary: "hold the recorded tool calls of a dataset's or listed turns to a candidate org file (its text in org, checked as `crewlet config check` does): each call allowed, gated (by which approval policy) or refused (why), beside whether it was gated or refused when it ran, and the totals newly and no longer gated or refused; no model is called, nothing written; each recorded result clipped at 4 KiB, the turns cut short at 4 MiB (header " + truncatedHeader + ")",
			body:    replay.PolicyRequest{}, needs: []string{"org"}, answer: replay.PolicyReport{}, heavy: true},
		{method: get, pattern: "/evals/runs", action: authority.ReadEvals, handler: s.listEvalRuns,
			summary: "the eval runs, newest first, with their totals", answer: []wire.EvalRun{}},
		{method: get, pattern: "/evals/runs/{run}", action: authority.ReadEvals, handler: s.getEvalRun,
			summary: "an eval run's report: totals (pass rate, tokens, divergences, cost) and per turn its status, recorded and replayed answers (clipped at 4 KiB) and each check's result; cut short at 4 MiB (header " + truncatedHeader + "); ?turn= answers one turn with its whole replay report",
			query:   []param{{"turn", "string", "one turn's result, with its replay report"}},
			answer:  wire.EvalRun{}, heavy: true},
		{method: get, pattern: "/conversations/{id}", action: authority.ReadConversation, handler: s.getConversation,
			summary: "a conversation's messages, oldest first, and its summaries; a body clipped at 256 KiB, and a page cut short at 4 MiB (next says where to go on)",
			query: []param{
				{"after", "integer", "the seq to go on after, a previous page's next"},
				limitQuery(conversationPage, maxConversationPage),
			}, answer: Conversation{}, heavy: true},
		{method: get, pattern: "/conversations/{id}/stream", action: authority.ReadConversation, handler: s.conversationStream,
			summary: "a conversation's live events as Server-Sent Events, resumable like a seat's (the ids are the conversation stream's own)",
			query:   []param{{LastEventQuery, "string", "the id to resume after, when the Last-Event-ID header cannot be sent"}},
			answer:  events.Event{}, contentType: "text/event-stream"},
		{method: post, pattern: "/tickets", action: authority.OpenTicket, handler: s.openTicket,
			summary: "open a ticket to a seat or role; with wait, answer once it ended (200) or the wait passed (202)",
			body:    OpenTicketRequest{}, needs: []string{"to", "task"}, answer: crewlet.Ticket{}, statuses: []int{http.StatusAccepted, http.StatusOK}},
		{method: get, pattern: "/tickets", action: authority.ReadTicket, handler: s.listTickets,
			summary: "tickets, newest first, each with what it cost (its sub-tickets included); a full page names the next one in " + NextBeforeHeader,
			query: []param{
				{"before", "string", "the tickets after this one, the last of the page you have (" + NextBeforeHeader + ")"},
				{"from", "string", "only tickets this seat delegated"},
				{"to", "string", "only tickets this seat serves"},
				{"opened_by", "string", "only tickets this API principal opened (a token's name)"},
				{"phase", "string", "only tickets in this phase"},
				{"open", "boolean", "only open tickets"},
				limitQuery(50, maxLimit),
			}, answer: []ListedTicket{}},
		{method: get, pattern: "/tickets/{id}", action: authority.ReadTicket, handler: s.getTicket,
			summary: "one ticket, what it cost with its sub-tickets at any depth, and that chain: each ticket's own cost (the thread serving it) and its total", answer: TicketView{}},
		{method: post, pattern: "/tickets/{id}/answer", action: authority.AnswerTicket, handler: s.answerTicket,
			summary: "answer the question a ticket asks", body: AnswerTicketRequest{}, needs: []string{"text"}, answer: crewlet.Ticket{},
			conflict: "the ticket asks nothing now, or has ended"},
		{method: post, pattern: "/tickets/{id}/cancel", action: authority.CancelTicket, handler: s.cancelTicket,
			summary: "cancel an open ticket", body: CancelTicketRequest{}, answer: crewlet.Ticket{},
			conflict: "the ticket has ended"},
		{method: get, pattern: "/approvals", action: authority.ReadApprovals, handler: s.listApprovals,
			summary: "approvals of gated tool calls, newest first: pending ones unless status says otherwise",
			query: []param{
				{"status", "string", "pending (the default), approved, denied, superseded or all"},
				{"seat", "string", "only this seat's calls"},
				limitQuery(50, wire.MaxApprovals),
			}, answer: []crewlet.Approval{}},
		{method: post, pattern: "/approvals/{id}/approve", action: authority.DecideApproval, handler: s.approveApproval,
			summary: "approve a gated tool call; with remember, the seat may call the tool (these arguments only, with args) without asking until then. Only a principal the policy names, or an admin (403 otherwise)",
			body:    wire.ApprovalDecision{}, answer: crewlet.Approval{}, conflict: "the approval was decided already"},
		{method: post, pattern: "/approvals/{id}/deny", action: authority.DecideApproval, handler: s.denyApproval,
			summary: "deny a gated tool call; the model receives \"denied by WHO: REASON\" as its result. Only a principal the policy names, or an admin (403 otherwise)",
			body:    wire.ApprovalDecision{}, needs: []string{"reason"}, answer: crewlet.Approval{}, conflict: "the approval was decided already"},
		{method: get, pattern: "/nodes", action: authority.ReadFleet, handler: s.listNodes,
			summary: "the worker nodes, live ones or (all=true) every incarnation kept",
			query:   []param{{"all", "boolean", "also the incarnations that stopped"}}, answer: NodesView{}},
		{method: post, pattern: "/nodes/{id}/drain", action: authority.SteerFleet, handler: s.drainNode,
			summary: "drain a node: its seats move, then it exits", answer: DrainNodeResponse{}, statuses: accepted,
			conflict: "the node is draining already"},
		{method: get, pattern: "/profiles", action: authority.ReadFleet, handler: s.listProfiles,
			summary: "model profiles with their load, health and switches", answer: ProfilesView{}},
		{method: get, pattern: "/prices", action: authority.ReadFleet, handler: s.getPrice,
			summary: "what one call of a model (or a profile's model) would cost at the prices a receipt written now is charged at: the embedded table (its version) or the org file's prices:",
			query: []param{
				{"model", "string", "the model, as a profile's model or the provider's answer names it"},
				{"profile", "string", "a profile of the org instead: its model, at the provider its base_url is"},
				{"input_tokens", "integer", "prompt tokens of the call, cached ones included (1000 unless given)"},
				{"output_tokens", "integer", "answer tokens of the call (1000 unless given)"},
				{"cached_tokens", "integer", "the part of input_tokens read from the provider's prompt cache"},
			}, answer: PriceQuote{}},
		{method: get, pattern: "/costs", action: authority.ReadFleet, handler: s.getCosts,
			summary: "what the company's model calls cost from since to until (days on the company clock, this month so far unless given), by seat, role, model, profile or day: each row's amount, rounds and tokens by kind, the most spent first (by day: every day, oldest first), the total, and the price versions charged",
			query: []param{
				{"by", "string", "seat (unless given), role, model, profile or day"},
				{"since", "string", "the first day, YYYY-MM-DD on the company clock (the 1st of this month unless given)"},
				{"until", "string", "the last day, included (today unless given); at most 400 days after since"},
			}, answer: Costs{}},
		{method: post, pattern: "/models/{id}/disable", action: authority.SteerFleet, handler: s.disableModel,
			summary: "switch a model off fleet-wide (a slash in the id is sent as %2F)", body: ModelSwitchRequest{},
			answer: crewlet.ModelSwitch{}},
		{method: post, pattern: "/models/{id}/enable", action: authority.SteerFleet, handler: s.enableModel,
			summary: "switch a model back on", body: ModelSwitchRequest{}, answer: crewlet.ModelSwitch{}},
		{method: get, pattern: "/deadletters", action: authority.ReadFleet, handler: s.listDeadLetters,
			summary: "dead letters, newest first, Redis and its Postgres archive as one list, at most 4 MiB (" + NextBeforeHeader + " gives the next page)",
			query:   []param{limitQuery(100, maxLimit), beforeQuery("the dead letters older than this id")}, answer: []mailbox.DeadLetter{}, heavy: true},
		{method: post, pattern: "/deadletters/{id}/requeue", action: authority.SteerFleet, handler: s.requeueDeadLetter,
			summary: "deliver a dead letter to its seat again", answer: mailbox.DeadLetter{}, statuses: accepted},
		{method: get, pattern: "/schedules", action: authority.ReadFleet, handler: s.listSchedules,
			summary: "the org's schedules: spec, target, paused, fires, skipped for overlap, next fires", answer: []wire.Schedule{}},
		{method: get, pattern: "/schedules/{name}", action: authority.ReadFleet, handler: s.getSchedule,
			summary: "one schedule with its fire history: recent and running fires, and the fires recorded (seat, answered, skips before)",
			query:   []param{limitQuery(20, wire.MaxScheduleFires)}, answer: wire.ScheduleDetail{}},
		{method: post, pattern: "/schedules/{name}/trigger", action: authority.SteerFleet, handler: s.triggerSchedule,
			summary: "fire the schedule now, under its overlap policy", answer: wire.ScheduleAction{}, statuses: accepted},
		{method: post, pattern: "/schedules/{name}/pause", action: authority.SteerFleet, handler: s.pauseSchedule,
			summary: "stop the schedule firing; the note says who and why", body: wire.ScheduleNote{}, answer: wire.ScheduleAction{}},
		{method: post, pattern: "/schedules/{name}/unpause", action: authority.SteerFleet, handler: s.unpauseSchedule,
			summary: "let a paused schedule fire again", body: wire.ScheduleNote{}, answer: wire.ScheduleAction{}},
		{method: post, pattern: "/schedules/{name}/backfill", action: authority.SteerFleet, handler: s.backfillSchedule,
			summary: "run the fires due between from and to (within maintenance.ledger_retention), one after another; a fire that ran already is not answered again",
			body:    wire.ScheduleBackfill{}, needs: []string{"from", "to"}, answer: wire.ScheduleAction{}, statuses: accepted},
		{method: post, pattern: "/seats/spawn", action: authority.Spawn, handler: s.spawnSeat,
			summary: "spawn a seat of a role from its pool (pools:); it answers mail at once and is reaped once idle with nothing open. 404 a role with no pool, 409 the pool is full",
			body:    wire.SpawnRequest{}, needs: []string{"role"}, answer: wire.SpawnedSeat{}, statuses: []int{http.StatusCreated},
			conflict: "the role's pool has max_seats spawned seats live"},
		{method: get, pattern: "/pools", action: authority.ReadFleet, handler: s.listPools,
			summary: "each role's spawn pool: max seats, live, free, reclaimable (idle past idle_reap_after with nothing open), and the live seats",
			answer:  []wire.PoolView{}},
		{method: get, pattern: "/config", action: authority.SteerFleet, handler: s.getConfig,
			summary: "the active config revision (who applied it, when, what changed, its document) and which revision each process runs",
			answer:  wire.ConfigState{}},
		{method: post, pattern: "/config", action: authority.AdministerFleet, handler: s.applyConfig,
			summary: "apply an org file as the next config revision; every process takes it within a beat. Refused whole when invalid (400), or when it changes a cold key without restart (409)",
			body:    wire.ConfigApplyRequest{}, needs: []string{"document"}, answer: wire.ConfigReport{},
			conflict: "the file changes a key that needs a restart and restart is not set, or another apply came in between"},
		{method: get, pattern: "/audit", action: authority.AdministerFleet, handler: s.listAudit,
			summary: "the audit log, newest first",
			query: []param{
				{"principal", "string", "only this principal's actions"},
				{"outcome", "string", "allowed, denied or failed"},
				{"action", "string", "only this action, \"METHOD /pattern\""},
				{"before", "integer", "rows older than this audit row id"},
				limitQuery(50, maxLimit),
			}, answer: []wire.AuditEntry{}},
		{method: post, pattern: mcpPath, action: authority.ConnectMCP, handler: s.serveMCP, session: true,
			summary: "MCP over streamable HTTP: a JSON-RPC message in, its answer as JSON or an event stream (202 for a notification). Tools ask_<handle>, ask_role_<role>, list_seats, ticket_status; resources crewlet://seats/{handle}, crewlet://conversations/{id}. Each tool call and read is the route it names (POST /tickets, GET /tickets/{id}, GET /seats, GET /seats/{handle}, GET /conversations/{id}), called with the caller's token: its rights, mutation budget and audit row are that route's. An ask_ call with params.task is an MCP task, its ticket (tasks/get, tasks/result, tasks/cancel, tasks/list), and a seat's question goes to a client that takes elicitations",
			answer:  map[string]any{}, contentType: "text/event-stream", statuses: []int{http.StatusOK, http.StatusAccepted}},
		{method: get, pattern: mcpPath, action: authority.ConnectMCP, handler: s.serveMCP, session: true,
			summary: "the MCP session's stream of messages the server sends unasked, as Server-Sent Events (header Mcp-Session-Id)",
			answer:  map[string]any{}, contentType: "text/event-stream"},
		{method: del, pattern: mcpPath, action: authority.ConnectMCP, handler: s.serveMCP, session: true,
			summary: "end the MCP session named by header Mcp-Session-Id", answer: "", statuses: []int{http.StatusNoContent}},
	}, s.a2aRoutes()...)
}

// Handler returns the API's router.
func (s *Server) Handler() http.Handler {
	r := chi.NewRouter()
	r.Use(s.requestLog, middleware.Recoverer, s.door)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "no route %s %s", r.Method, r.URL.Path))
	})
	r.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusMethodNotAllowed, errorBody{Error: "method_not_allowed", Detail: fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)})
	})
	s.heavyReads = make(chan struct{}, maxHeavyReads)
	s.mcp = s.newMCPHandler(r)
	for _, rt := range s.routes() {
		switch rule := authority.Of(rt.action); {
		case rule.Right == authority.Nobody:
			panic(fmt.Sprintf("route %s %s names %q, which only a seat's own tools take: name the action the route takes", rt.method, rt.pattern, rule.Name))
		case rule.Right != authority.Public && rule.Scope == authority.ScopeNone:
			panic(fmt.Sprintf("route %s %s names no action with a scope: decide what a member may do with it", rt.method, rt.pattern))
		}
		if rt.heavy {
			rt.handler = s.heavy(rt.handler)
		}
		r.Method(rt.method, rt.pattern, s.guard(rt))
	}
	// The console: its files carry no data (every read it makes is an API
	// call with the person's token), so they are served to anyone the door
	// lets in.
	r.Get("/ui", func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/ui/", http.StatusMovedPermanently) })
	r.Get("/ui/*", http.StripPrefix("/ui", ui.Handler()).ServeHTTP)
	return s.Tracing.Handler(r)
}

// metrics serves the process's registry, or says it keeps none.
func (s *Server) metrics(w http.ResponseWriter, r *http.Request) {
	if s.Metrics == nil {
		writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "this process keeps no metrics: metrics.enabled is false in its org file"))
		return
	}
	s.Metrics.Handler().ServeHTTP(w, r)
}

type errorBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail"`
}

// statusOf maps domain error codes to HTTP statuses, once for the whole API.
var statusOf = map[string]int{
	crewlet.ECONFLICT:     http.StatusConflict,
	crewlet.EFENCED:       http.StatusConflict,
	crewlet.EINVALID:      http.StatusBadRequest,
	crewlet.ETOOLARGE:     http.StatusRequestEntityTooLarge,
	crewlet.EUNAUTHORIZED: http.StatusUnauthorized,
	crewlet.EFORBIDDEN:    http.StatusForbidden,
	crewlet.EUNSUPPORTED:  http.StatusUnsupportedMediaType,
	crewlet.ERATELIMITED:  http.StatusTooManyRequests,
	crewlet.ENOTFOUND:     http.StatusNotFound,
	crewlet.EUNAVAILABLE:  http.StatusServiceUnavailable,
	crewlet.EFULL:         http.StatusInsufficientStorage,
	crewlet.EINTERNAL:     http.StatusInternalServerError,
}

func writeError(w http.ResponseWriter, err error) {
	code := crewlet.ErrorCode(err)
	if d := crewlet.ErrorRetryAfter(err); d > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((d+time.Second-1)/time.Second)))
	}
	writeJSON(w, statusOf[code], errorBody{Error: code, Detail: crewlet.ErrorMessage(err)})
}

// logError writes err to the response and, when it is not the client's
// fault, to the log with its full text.
func (s *Server) logError(w http.ResponseWriter, r *http.Request, err error) {
	if code := crewlet.ErrorCode(err); code == crewlet.EINTERNAL || code == crewlet.EUNAVAILABLE {
		s.Log.ErrorContext(r.Context(), "api_error", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeError(w, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// readJSON decodes a request body into v. An empty body leaves v as it is;
// unknown fields, duplicate keys, trailing data and malformed JSON are
// EINVALID, a body over maxBody ETOOLARGE.
func readJSON(r *http.Request, v any) error {
	body, err := readBody(r)
	if err != nil || len(body) == 0 {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return crewlet.Errorf(crewlet.EINVALID, "request body is not valid JSON for this call: %v", err)
	}
	if dec.More() {
		return crewlet.Errorf(crewlet.EINVALID, "request body has data after the JSON object")
	}
	return nil
}

// readBody reads a request's JSON body as the door takes it: at most
// maxBody bytes (ETOOLARGE past it), valid UTF-8, no object naming a key
// twice (EINVALID); empty when it is only white space.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, crewlet.Errorf(crewlet.ETOOLARGE, "request body is over %d bytes", maxBody)
	case err != nil:
		return nil, crewlet.Errorf(crewlet.EINVALID, "request body could not be read: %v", err)
	case len(bytes.TrimSpace(body)) == 0:
		return nil, nil
	}
	if !utf8.Valid(body) {
		// The JSON decoder would quietly turn the bad bytes into U+FFFD.
		return nil, crewlet.Errorf(crewlet.EINVALID, "request body is not valid UTF-8; send UTF-8 JSON")
	}
	if key, dup := duplicateKey(body); dup {
		return nil, crewlet.Errorf(crewlet.EINVALID, "request body names %q twice; name each field once", key)
	}
	return body, nil
}

// duplicateKey reports the first key an object in the JSON document names
// twice. A document that is not JSON has none; decoding reports it.
func duplicateKey(doc []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	var walk func() (string, bool)
	walk = func() (string, bool) {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch tok {
		case json.Delim('{'):
			seen := map[string]bool{}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return "", false
				}
				key, _ := k.(string)
				if seen[key] {
					return key, true
				}
				seen[key] = true
				if key, dup := walk(); dup {
					return key, true
				}
			}
			_, _ = dec.Token()
		case json.Delim('['):
			for dec.More() {
				if key, dup := walk(); dup {
					return key, true
				}
			}
			_, _ = dec.Token()
		}
		return "", false
	}
	return walk()
}

// pathID returns the path parameter name, or writes a 400 and false when it
// is not an id: checked before anything reads the store with it.
func pathID(w http.ResponseWriter, r *http.Request, name string) (string, bool) {
	id := chi.URLParam(r, name)
	if err := crewlet.CheckID(name, id); err != nil {
		writeError(w, err)
		return "", false
	}
	return id, true
}
