// Package seatclient is the one door to the seat, turn and notes workflows,
// and to the workflows serving tickets to remote agents, from outside them. It starts and wakes seats (building their input), sends
// every signal, each payload checked by the same Validate the receiving
// workflow runs, asks seats and turns for their state, lists the seats
// Temporal runs, and refuses a seat workflow that belongs to another
// deployment (deployment.go). Nothing else in crewlet calls ExecuteWorkflow,
// SignalWithStartWorkflow or SignalWorkflow.
//
// Pause, resume and drain stay signals, not Temporal Updates: an Update with
// a validator would tell the caller at once that a seat refused, but it adds
// commands to the seat's history, so it needs a workflow version of its own.
package seatclient

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/workflows"
)

// Client sends to the seats of one org.
type Client struct {
	temporal client.Client
	org      config.Source
	// ownRuns holds, per seat workflow id, the run last seen on our task
	// queue (deployment.go).
	ownRuns sync.Map
}

// New returns the seat client of org.
func New(tc client.Client, org config.Source) *Client {
	return &Client{temporal: tc, org: org}
}

// queryTimeout bounds a state query: it needs a live worker to answer.
const queryTimeout = 5 * time.Second

// Gone reports whether err says the workflow addressed is not running: it
// ended, or never started.
func Gone(err error) bool {
	var notFound *serviceerror.NotFound
	return errors.As(err, &notFound)
}

func (c *Client) startOptions(s config.Seat) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       crewlet.SeatWorkflowID(s.Handle),
		TaskQueue:                c.org.Now().Temporal.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		// The workflow starts knowing these attributes are set
		// (workflows/seat_attributes.go), so they come from there.
		TypedSearchAttributes: workflows.SeatSearchAttributes(s.Handle, s.Role),
		// A workflow task caught on a worker that died is retried elsewhere
		// after this long; it is part of failover time, like the heartbeat
		// timeout. Local activities longer than this heartbeat the task.
		WorkflowTaskTimeout: c.org.Now().Nodes.HeartbeatTimeout,
	}
}

// seatInput is the seat's input as its org sets it.
func (c *Client) seatInput(s config.Seat) crewlet.SeatInput {
	return crewlet.SeatInput{
		Handle: s.Handle, Role: s.Role, ReadBatch: c.org.Now().Mailbox.ReadBatch,
		HeartbeatTimeout: c.org.Now().Nodes.HeartbeatTimeout, ReleaseWait: c.org.Now().Nodes.ReleaseWait,
		RetryBackoff: c.org.Now().Mailbox.RetryBackoff, Backstop: c.org.Now().Mailbox.Backstop,
	}
}

// Start starts the seat's workflow unless one is already open, and says
// whether it started one. An open one on another task queue is another
// deployment's: ECONFLICT.
//
// The start fails, rather than hands back, a run already open, so a run it
// started is known ours without asking Temporal about it: at boot a node
// starts every seat, and a describe per seat would double the calls. The
// first workflow task of a run it started goes straight to this process's
// worker when it has a free slot (eager start), not through matching.
func (c *Client) Start(ctx context.Context, s config.Seat) (started bool, err error) {
	opts := c.startOptions(s)
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	opts.EnableEagerStart = true
	run, err := c.temporal.ExecuteWorkflow(ctx, opts, crewlet.WorkflowSeat, c.seatInput(s))
	var open *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &open):
		return false, c.checkSeatRun(ctx, s.Handle, open.RunId)
	case err != nil:
		return false, fmt.Errorf("start seat %s: %w", s.Handle, err)
	}
	c.ownRuns.Store(crewlet.SeatWorkflowID(s.Handle), run.GetRunID())
	return true, nil
}

// Wake signals the seat that mail arrived, starting its workflow if none is
// open. The open one may turn out another deployment's (ECONFLICT); that
// seat then got a stray wake, which only makes it read its own mailbox.
func (c *Client) Wake(ctx context.Context, s config.Seat) error {
	run, err := c.temporal.SignalWithStartWorkflow(ctx, crewlet.SeatWorkflowID(s.Handle), crewlet.SignalWake, nil,
		c.startOptions(s), crewlet.WorkflowSeat, c.seatInput(s))
	if err != nil {
		return err
	}
	return c.checkSeatRun(ctx, s.Handle, run.GetRunID())
}

// Unplaceable returns the handles of the running seats that no node took
// and that wait, backing off, for the next try: those whose CrewletStatus
// is unplaceable. One visibility query, however many seats run.
func (c *Client) Unplaceable(ctx context.Context) ([]string, error) {
	var out []string
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s' AND %s = '%s'",
		crewlet.WorkflowSeat, c.org.Now().Temporal.TaskQueue, crewlet.SAStatus, crewlet.StatusUnplaceable)
	err := c.listWorkflows(ctx, query, func(ex *workflowpb.WorkflowExecutionInfo) {
		if handle, ok := crewlet.HandleFromWorkflowID(ex.GetExecution().GetWorkflowId()); ok {
			out = append(out, handle)
		}
	})
	return out, err
}

// Nudge signals wake to the seat's running workflow and starts none: a
// seat that waits tries again now. A seat that is gone fails with an
// error Gone recognises.
func (c *Client) Nudge(ctx context.Context, handle string) error {
	return c.signal(ctx, crewlet.SeatWorkflowID(handle), crewlet.SignalWake, nil, nil)
}

// HandOver asks the seat's running workflow to continue as new between
// turns (crewlet.SignalHandOver) and starts none. A seat that is gone fails
// with an error Gone recognises.
func (c *Client) HandOver(ctx context.Context, handle string) error {
	return c.signal(ctx, crewlet.SeatWorkflowID(handle), crewlet.SignalHandOver, nil, nil)
}

// State asks the seat's workflow what it is doing.
func (c *Client) State(ctx context.Context, handle string) (crewlet.SeatState, error) {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	val, err := c.temporal.QueryWorkflow(ctx, crewlet.SeatWorkflowID(handle), "", crewlet.QueryState)
	if err != nil {
		return crewlet.SeatState{}, seatError(handle, err)
	}
	var st crewlet.SeatState
	if err := val.Get(&st); err != nil {
		return crewlet.SeatState{}, fmt.Errorf("decode state of %s: %w", handle, err)
	}
	return st, nil
}

// TurnProgress asks a running turn how far it got. It only reports: a turn
// that does not answer (it just ended, its worker is busy) gives nil.
func (c *Client) TurnProgress(ctx context.Context, turnID string) *crewlet.TurnProgress {
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	val, err := c.temporal.QueryWorkflow(ctx, turnID, "", crewlet.QueryState)
	if err != nil {
		return nil
	}
	var p crewlet.TurnProgress
	if err := val.Get(&p); err != nil {
		return nil
	}
	return &p
}

// seatError says what a failed call to a seat's workflow means to a caller.
func seatError(handle string, err error) error {
	switch {
	case Gone(err):
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "seat %s has no running workflow; start `crewlet serve` or `crewlet worker`", handle)
	case errors.Is(err, context.DeadlineExceeded):
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "seat %s did not answer within %s; is a worker running?", handle, queryTimeout)
	default:
		return crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "seat %s cannot be reached through Temporal now; see the server log", handle)
	}
}

// Pause holds the seat. Pausing a paused seat is a conflict.
func (c *Client) Pause(ctx context.Context, handle string, req crewlet.PauseRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	st, err := c.State(ctx, handle)
	if err != nil {
		return err
	}
	if st.Pause != nil {
		return crewlet.Errorf(crewlet.ECONFLICT, "seat %s is already paused (by %s since %s); resume it first",
			handle, orUnknown(st.Pause.By), st.Pause.Since.Format(time.RFC3339))
	}
	return c.steer(ctx, handle, crewlet.SignalPause, req)
}

// Resume lifts a pause or a drain. Resuming a seat that is neither is a conflict.
func (c *Client) Resume(ctx context.Context, handle string, req crewlet.ResumeRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	st, err := c.State(ctx, handle)
	if err != nil {
		return err
	}
	if st.Pause == nil && st.Drain == nil {
		return crewlet.Errorf(crewlet.ECONFLICT, "seat %s is neither paused nor drained; nothing to resume", handle)
	}
	return c.steer(ctx, handle, crewlet.SignalResume, req)
}

// Drain asks the seat to finish its turn and release its host until resumed.
func (c *Client) Drain(ctx context.Context, handle string, req crewlet.DrainRequest) error {
	if err := req.Validate(); err != nil {
		return err
	}
	st, err := c.State(ctx, handle)
	if err != nil {
		return err
	}
	if st.Drain != nil {
		return crewlet.Errorf(crewlet.ECONFLICT, "seat %s is already %s; resume it first", handle, st.Status)
	}
	return c.steer(ctx, handle, crewlet.SignalDrain, req)
}

// steer sends a person's signal to a seat, the error said for the person.
func (c *Client) steer(ctx context.Context, handle, name string, arg any) error {
	if err := c.temporal.SignalWorkflow(ctx, crewlet.SeatWorkflowID(handle), "", name, arg); err != nil {
		return seatError(handle, err)
	}
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "someone"
	}
	return s
}

// Stop tells a seat removed from the org to stop. A seat whose workflow is
// gone fails with an error Gone recognises.
func (c *Client) Stop(ctx context.Context, handle string, req crewlet.StopRequest) error {
	return c.signal(ctx, crewlet.SeatWorkflowID(handle), crewlet.SignalStop, req, req.Validate)
}

// Move asks a seat to release its host voluntarily and establish elsewhere.
func (c *Client) Move(ctx context.Context, handle string, req crewlet.MoveRequest) error {
	return c.signal(ctx, crewlet.SeatWorkflowID(handle), crewlet.SignalMove, req, req.Validate)
}

// HostLost tells a seat that the node hosting it is gone. A seat whose
// workflow is gone fails with an error Gone recognises.
func (c *Client) HostLost(ctx context.Context, handle string, req crewlet.HostLostRequest) error {
	return c.signal(ctx, crewlet.SeatWorkflowID(handle), crewlet.SignalHostLost, req, req.Validate)
}

// TicketChanged tells the turn turnID, waiting on a ticket, that it
// changed. A turn that is gone fails with an error Gone recognises. The
// waiter may be a RemoteTicket workflow instead, waiting for the answer to
// its remote agent's question: it gets the signal itself.
func (c *Client) TicketChanged(ctx context.Context, turnID, ticketID string) error {
	if crewlet.IsRemoteTicketWorkflowID(turnID) {
		sig := crewlet.TicketSignal{Ticket: ticketID}
		return c.signal(ctx, turnID, crewlet.SignalTicket, sig, sig.Validate)
	}
	return c.nudge(ctx, crewlet.TurnNudge{Turn: turnID, Ticket: ticketID}, crewlet.SignalTicket, crewlet.TicketSignal{Ticket: ticketID})
}

// ApprovalDecided tells the turn turnID, waiting on an approval, that it
// was decided. A turn that is gone fails with an error Gone recognises.
func (c *Client) ApprovalDecided(ctx context.Context, turnID, approvalID string) error {
	return c.nudge(ctx, crewlet.TurnNudge{Turn: turnID, Approval: approvalID}, crewlet.SignalApproval, crewlet.ApprovalSignal{Approval: approvalID})
}

// ProfileFree nudges a turn held for want of a profile: one of its pool may
// have freed. A turn that is gone fails with an error Gone recognises.
func (c *Client) ProfileFree(ctx context.Context, turnID string) error {
	return c.nudge(ctx, crewlet.TurnNudge{Turn: turnID, ProfileFree: true}, crewlet.SignalProfileFree, nil)
}

// nudgeTimeout bounds a nudge's wait for the seat's worker: a nudge that
// finds none is reported unreached, and its sender tells another way (the
// ticket's reply as mail; the turn reads the row when it runs again).
const nudgeTimeout = 5 * time.Second

// nudge tells a turn that something it may wait on changed. A seat that
// runs its turns inline takes it as its UpdateNudgeTurn, which it refuses
// for a turn it does not run now; then the turn may be a Turn child
// workflow of a seat run begun before inline turns, and gets the signal
// as it always did (COMPAT(node-liveness@5): while `crewlet versions`
// counts Turn workflows). A turn neither has fails with an error Gone
// recognises.
func (c *Client) nudge(ctx context.Context, n crewlet.TurnNudge, signal string, payload any) error {
	if err := n.Validate(); err != nil {
		return fmt.Errorf("nudge turn %s: %w", n.Turn, err)
	}
	handle, _, _ := crewlet.ParseTurnID(n.Turn)
	uctx, cancel := context.WithTimeout(ctx, nudgeTimeout)
	defer cancel()
	h, err := c.temporal.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{
		WorkflowID:   crewlet.SeatWorkflowID(handle),
		UpdateName:   crewlet.UpdateNudgeTurn,
		Args:         []any{n},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(uctx, nil)
	}
	if err == nil {
		return nil
	}
	if !refusedNudge(err) {
		return fmt.Errorf("nudge turn %s: %w", n.Turn, err)
	}
	var check func() error
	switch v := payload.(type) {
	case crewlet.TicketSignal:
		check = v.Validate
	case crewlet.ApprovalSignal:
		check = v.Validate
	}
	return c.signal(ctx, n.Turn, signal, payload, check)
}

// refusedNudge reports whether a nudge failed because the seat does not run
// the turn inline: its validator refused it, the seat's build has no such
// update, or the seat has no running workflow.
func refusedNudge(err error) bool {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type() == crewlet.ErrorTypeTurnGone || strings.Contains(appErr.Message(), "unknown update")
	}
	return Gone(err)
}

// signal sends one signal to a workflow, its payload checked first.
func (c *Client) signal(ctx context.Context, workflowID, name string, arg any, check func() error) error {
	if check != nil {
		if err := check(); err != nil {
			return fmt.Errorf("signal %s to %s: %w", name, workflowID, err)
		}
	}
	if err := c.temporal.SignalWorkflow(ctx, workflowID, "", name, arg); err != nil {
		return fmt.Errorf("signal %s to %s: %w", name, workflowID, err)
	}
	return nil
}

// StartRemoteTicket starts the RemoteTicket workflow serving a ticket to
// a remote agent, unless it runs or ran: one per ticket, however often
// the ticket is opened again.
func (c *Client) StartRemoteTicket(ctx context.Context, ticketID string) error {
	id := crewlet.RemoteTicketWorkflowID(ticketID)
	_, err := c.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: id, TaskQueue: c.org.Now().Temporal.TaskQueue,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, crewlet.WorkflowRemoteTicket, crewlet.RemoteTicketInput{Ticket: ticketID})
	var started *serviceerror.WorkflowExecutionAlreadyStarted
	if err != nil && !errors.As(err, &started) {
		return fmt.Errorf("start %s: %w", id, err)
	}
	return nil
}

// NotePerson tells a person's notes workflow, starting it if need be, that
// a ticket they opened changed, or that an approval (its id for ticketID)
// asks for them; changes that come together make one note in their inbox.
func (c *Client) NotePerson(ctx context.Context, person, ticketID string) error {
	change := crewlet.TicketNoteSignal(ticketID)
	if err := change.Validate(); err != nil {
		return err
	}
	id := crewlet.PersonNotesWorkflowID(person)
	_, err := c.temporal.SignalWithStartWorkflow(ctx, id, crewlet.SignalTicketNote, change,
		client.StartWorkflowOptions{ID: id, TaskQueue: c.org.Now().Temporal.TaskQueue},
		crewlet.WorkflowPersonNotes, crewlet.PersonNotesInput{Person: person})
	if err != nil {
		return crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "%s cannot be told that ticket %s changed; Temporal is unreachable", person, ticketID)
	}
	return nil
}

// Live is what Temporal's visibility store says of a running seat: its
// status and the turn it runs, if any.
type Live struct {
	Status crewlet.SeatStatus
	// Turn is the workflow id of the seat's open Turn, "" when none runs;
	// TurnSince is when it started.
	Turn      string
	TurnSince time.Time
}

// decodeAttribute decodes a search attribute's value into v, reporting
// whether there was one to decode.
func decodeAttribute(p *commonpb.Payload, v any) bool {
	return p != nil && converter.GetDefaultDataConverter().FromPayload(p, v) == nil
}

// Statuses returns each running seat workflow's status, keyed by handle
// (Live's statuses).
func (c *Client) Statuses(ctx context.Context) (map[string]crewlet.SeatStatus, error) {
	live, err := c.Live(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]crewlet.SeatStatus, len(live))
	for handle, l := range live {
		out[handle] = l.Status
	}
	return out, nil
}

// Live returns each running seat workflow's status and open turn, keyed
// by handle: the status it last published in its search attributes, or
// running while it names a turn in CrewletTurn (node-liveness 5), or has
// an open Turn workflow, and publishes idle (a seat leaves running out of
// its status attribute; node-liveness 4). Seats with no open workflow are
// absent. It asks Temporal's visibility store, not the seats, in one
// paged query, so it answers even when no worker runs.
func (c *Client) Live(ctx context.Context) (map[string]Live, error) {
	out := map[string]Live{}
	turns := map[string]*workflowpb.WorkflowExecutionInfo{}
	query := fmt.Sprintf("WorkflowType IN ('%s', '%s') AND ExecutionStatus = 'Running' AND TaskQueue = '%s'",
		crewlet.WorkflowSeat, crewlet.WorkflowTurn, c.org.Now().Temporal.TaskQueue)
	err := c.listWorkflows(ctx, query, func(ex *workflowpb.WorkflowExecutionInfo) {
		id := ex.GetExecution().GetWorkflowId()
		if ex.GetType().GetName() == crewlet.WorkflowTurn {
			if handle, _, ok := crewlet.ParseTurnID(id); ok {
				turns[handle] = ex
			}
			return
		}
		handle, ok := crewlet.HandleFromWorkflowID(id)
		if !ok {
			return
		}
		fields := ex.GetSearchAttributes().GetIndexedFields()
		l := Live{Status: crewlet.StatusEstablishing}
		var status string
		if decodeAttribute(fields[crewlet.SAStatus], &status) && status != "" {
			l.Status = crewlet.SeatStatus(status)
		}
		// A seat that runs its turns inline names its turn in CrewletTurn.
		if decodeAttribute(fields[crewlet.SATurn], &l.Turn) && l.Turn != "" {
			decodeAttribute(fields[crewlet.SATurnSince], &l.TurnSince)
			if l.Status == crewlet.StatusIdle {
				l.Status = crewlet.StatusRunning
			}
		}
		out[handle] = l
	})
	if err != nil {
		return nil, err
	}
	for handle, turn := range turns {
		l, ok := out[handle]
		if !ok {
			continue
		}
		if l.Status == crewlet.StatusIdle {
			l.Status = crewlet.StatusRunning
		}
		l.Turn, l.TurnSince = turn.GetExecution().GetWorkflowId(), turn.GetStartTime().AsTime()
		out[handle] = l
	}
	return out, nil
}
