// Package control drives seats from outside their workflows: it delivers mail
// (publish + wake), starts seat workflows, sends pause/resume/drain signals and
// asks seats for their state. The API, the CLI's server commands and the
// activities that deliver replies all go through it.
package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tracing"
	"github.com/crewlet/crewlet/workflows"
)

// Control is the outside handle on every seat of one org.
type Control struct {
	temporal client.Client
	mailbox  *mailbox.Mailbox
	org      *config.Config
	log      *slog.Logger
	// Now is the clock usage windows are read on; tests set it.
	Now func() time.Time
	// Metrics counts mail published and wakes that failed; nil counts none.
	Metrics *metrics.Metrics
	// ownRuns holds, per seat workflow id, the run last seen on our task
	// queue (deployment.go).
	ownRuns sync.Map
}

// metricsOf is where a service over c counts its events: c's metrics, none
// without a Control (a service a test builds over a store alone).
func metricsOf(c *Control) *metrics.Metrics {
	if c == nil {
		return nil
	}
	return c.Metrics
}

// New returns a Control for org.
func New(tc client.Client, mb *mailbox.Mailbox, org *config.Config, log *slog.Logger) *Control {
	return &Control{temporal: tc, mailbox: mb, org: org, log: log, Now: time.Now}
}

// queryTimeout bounds a state query: it needs a live worker to answer.
const queryTimeout = 5 * time.Second

// seat returns the org's seat with handle, or ENOTFOUND.
func (c *Control) seat(handle string) (config.Seat, error) {
	s, ok := c.org.Seat(handle)
	if !ok {
		return config.Seat{}, crewlet.Errorf(crewlet.ENOTFOUND, "no seat %q in company %s; `crewlet seats ls` lists them", handle, c.org.Company.Name)
	}
	return s, nil
}

func (c *Control) startOptions(s config.Seat) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{
		ID:                       crewlet.SeatWorkflowID(s.Handle),
		TaskQueue:                c.org.Temporal.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes:    workflows.SeatSearchAttributes(s.Handle, s.Role),
		// A workflow task caught on a worker that died is retried elsewhere
		// after this long; it is part of failover time, like the heartbeat
		// timeout. Local activities longer than this heartbeat the task.
		WorkflowTaskTimeout: c.org.Nodes.HeartbeatTimeout,
	}
}

func (c *Control) seatInput(s config.Seat) workflows.SeatInput {
	return workflows.SeatInput{
		Handle: s.Handle, Role: s.Role, ReadBatch: c.org.Mailbox.ReadBatch,
		HeartbeatTimeout: c.org.Nodes.HeartbeatTimeout, ReleaseWait: c.org.Nodes.ReleaseWait,
		RetryBackoff: c.org.Mailbox.RetryBackoff, Backstop: c.org.Mailbox.Backstop,
	}
}

// StartSeat starts the seat's workflow unless one is already open. An open
// one on another task queue is another deployment's: ECONFLICT.
//
// The start fails, rather than hands back, a run already open, so a run it
// started is known ours without asking Temporal about it: at boot a node
// starts every seat, and a describe per seat would double the calls. The
// first workflow task of a run it started goes straight to this process's
// worker when it has a free slot (eager start), not through matching.
func (c *Control) StartSeat(ctx context.Context, s config.Seat) error {
	opts := c.startOptions(s)
	opts.WorkflowIDConflictPolicy = enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL
	opts.WorkflowExecutionErrorWhenAlreadyStarted = true
	opts.EnableEagerStart = true
	run, err := c.temporal.ExecuteWorkflow(ctx, opts, crewlet.WorkflowSeat, c.seatInput(s))
	var open *serviceerror.WorkflowExecutionAlreadyStarted
	switch {
	case errors.As(err, &open):
		return c.checkSeatRun(ctx, s.Handle, open.RunId)
	case err != nil:
		return fmt.Errorf("start seat %s: %w", s.Handle, err)
	}
	c.ownRuns.Store(crewlet.SeatWorkflowID(s.Handle), run.GetRunID())
	return nil
}

// SendRequest is mail to deliver to a seat.
type SendRequest struct {
	To   string
	From string
	Text string
	// Conversation continues an existing conversation; empty starts one.
	Conversation string
	// ChatID is the message's identity on the chat system it came from.
	ChatID string
}

// Send validates a message from a person or a seat and delivers it.
func (c *Control) Send(ctx context.Context, req SendRequest) (crewlet.Message, error) {
	if _, err := c.seat(req.To); err != nil {
		return crewlet.Message{}, err
	}
	if strings.TrimSpace(req.Text) == "" {
		return crewlet.Message{}, crewlet.Errorf(crewlet.EINVALID, "text is empty; say something")
	}
	if err := errors.Join(crewlet.CheckText("text", req.Text, crewlet.MaxMessageBytes),
		crewlet.CheckText("chat_id", req.ChatID, crewlet.MaxChatIDBytes), checkConversation(req.Conversation)); err != nil {
		// The API and a tool read the first problem's code and message.
		return crewlet.Message{}, err
	}
	from := req.From
	switch {
	case from == "":
		from = crewlet.ExternalSender
	case from == crewlet.ExternalSender:
	default:
		if _, ok := c.org.Seat(from); !ok {
			return crewlet.Message{}, crewlet.Errorf(crewlet.EINVALID, "from: no seat %q; leave it empty to send as %s", from, crewlet.ExternalSender)
		}
	}
	conv := req.Conversation
	if conv == "" {
		conv = uuid.NewString()
	}
	msg := crewlet.Message{
		EventID: uuid.NewString(), Type: crewlet.MessageChat, From: from, To: req.To,
		Conversation: conv, Body: req.Text, SentAt: time.Now().UTC(), ChatID: req.ChatID,
	}
	return c.Deliver(ctx, msg)
}

// Deliver puts msg in its recipient's mailbox and wakes the seat if it was
// asleep. Delivering an event id twice adds it once. The mail is durable once
// Deliver returns; a failed wake is logged, not returned, because the seat's
// backstop timer and the reconciler at boot reach the mail anyway.
func (c *Control) Deliver(ctx context.Context, msg crewlet.Message) (crewlet.Message, error) {
	s, err := c.seat(msg.To)
	if err != nil {
		return crewlet.Message{}, err
	}
	ctx, span := tracing.Start(ctx, "publish "+msg.To, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(msg.To), semconv.MessagingMessageID(msg.EventID)))
	defer span.End()
	msg.Trace = tracing.Traceparent(ctx)
	streamID, wake, err := c.mailbox.Publish(ctx, msg)
	if err != nil {
		span.SetStatus(codes.Error, "publish failed")
		return crewlet.Message{}, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the mailbox of %s does not take mail now (Redis is unreachable or full); see the server log", msg.To)
	}
	msg.StreamID = streamID
	c.Metrics.MailPublished()
	if wake && s.Kind == string(crewlet.SeatAgent) {
		if err := c.wake(ctx, s); err != nil {
			c.Metrics.WakeFailed()
			// Lower the flag again so the next publish retries the wake
			// instead of trusting a seat that never heard this one.
			c.log.WarnContext(ctx, "wake_failed", "seat", s.Handle, "event_id", msg.EventID, "error", err)
			if err := c.mailbox.ClearAwake(ctx, s.Handle); err != nil {
				c.log.WarnContext(ctx, "wake_failed", "seat", s.Handle, "event_id", msg.EventID, "error", err)
			}
		}
	}
	return msg, nil
}

// wake signals the seat, starting its workflow if none is open. The open
// one may turn out another deployment's (ECONFLICT); that seat then got a
// stray wake, which only makes it read its own mailbox.
func (c *Control) wake(ctx context.Context, s config.Seat) error {
	run, err := c.temporal.SignalWithStartWorkflow(ctx, crewlet.SeatWorkflowID(s.Handle), crewlet.SignalWake, nil,
		c.startOptions(s), crewlet.WorkflowSeat, c.seatInput(s))
	if err != nil {
		return err
	}
	return c.checkSeatRun(ctx, s.Handle, run.GetRunID())
}

// State asks the seat's workflow what it is doing.
func (c *Control) State(ctx context.Context, handle string) (crewlet.SeatState, error) {
	s, err := c.seat(handle)
	if err != nil {
		return crewlet.SeatState{}, err
	}
	if s.Kind != string(crewlet.SeatAgent) {
		return crewlet.SeatState{}, crewlet.Errorf(crewlet.EINVALID, "%s is a human seat; it has a mailbox but no workflow", handle)
	}
	ctx, cancel := context.WithTimeout(ctx, queryTimeout)
	defer cancel()
	val, err := c.temporal.QueryWorkflow(ctx, crewlet.SeatWorkflowID(handle), "", crewlet.QueryState)
	if err != nil {
		return crewlet.SeatState{}, c.workflowError(handle, err)
	}
	var st crewlet.SeatState
	if err := val.Get(&st); err != nil {
		return crewlet.SeatState{}, fmt.Errorf("decode state of %s: %w", handle, err)
	}
	if st.Turn != nil {
		st.Turn.Progress = c.turnProgress(ctx, st.Turn.ID)
	}
	return st, nil
}

// turnProgress asks a running turn how far it got. It only reports: a turn
// that does not answer (it just ended, its worker is busy) leaves it out.
func (c *Control) turnProgress(ctx context.Context, turnID string) *crewlet.TurnProgress {
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

func (c *Control) workflowError(handle string, err error) error {
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "seat %s has no running workflow; start `crewlet serve` or `crewlet worker`", handle)
	case errors.Is(err, context.DeadlineExceeded):
		return crewlet.Errorf(crewlet.EUNAVAILABLE, "seat %s did not answer within %s; is a worker running?", handle, queryTimeout)
	default:
		return crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "seat %s cannot be reached through Temporal now; see the server log", handle)
	}
}

// checkConversation refuses a conversation id outside the id charset; empty
// starts a new conversation.
func checkConversation(id string) error {
	if id == "" {
		return nil
	}
	return crewlet.CheckID("conversation", id)
}

// checkWho refuses a reason that is not short, valid text, and a "by" that
// is not a name (the seat workflow drops a signal whose by is not one).
func checkWho(reason, by string) error {
	err := crewlet.CheckText("reason", reason, crewlet.MaxReasonBytes)
	if err == nil && by != "" {
		if err = crewlet.CheckText("by", by, crewlet.MaxNameBytes); err == nil {
			err = crewlet.CheckID("by", by)
		}
	}
	return err
}

// Pause holds the seat. Pausing a paused seat is a conflict.
func (c *Control) Pause(ctx context.Context, handle string, req crewlet.PauseRequest) error {
	if err := checkWho(req.Reason, req.By); err != nil {
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
	return c.signal(ctx, handle, crewlet.SignalPause, req)
}

// Resume lifts a pause or a drain. Resuming a seat that is neither is a conflict.
func (c *Control) Resume(ctx context.Context, handle string, req crewlet.ResumeRequest) error {
	if err := checkWho("", req.By); err != nil {
		return err
	}
	st, err := c.State(ctx, handle)
	if err != nil {
		return err
	}
	if st.Pause == nil && st.Drain == nil {
		return crewlet.Errorf(crewlet.ECONFLICT, "seat %s is neither paused nor drained; nothing to resume", handle)
	}
	return c.signal(ctx, handle, crewlet.SignalResume, req)
}

// Drain asks the seat to finish its turn and release its host until resumed.
func (c *Control) Drain(ctx context.Context, handle string, req crewlet.DrainRequest) error {
	if err := checkWho(req.Reason, req.By); err != nil {
		return err
	}
	st, err := c.State(ctx, handle)
	if err != nil {
		return err
	}
	if st.Drain != nil {
		return crewlet.Errorf(crewlet.ECONFLICT, "seat %s is already %s; resume it first", handle, st.Status)
	}
	return c.signal(ctx, handle, crewlet.SignalDrain, req)
}

func (c *Control) signal(ctx context.Context, handle, name string, arg any) error {
	if err := c.temporal.SignalWorkflow(ctx, crewlet.SeatWorkflowID(handle), "", name, arg); err != nil {
		return c.workflowError(handle, err)
	}
	return nil
}

// Requeue puts a dead letter back in its seat's mailbox with a fresh delivery
// budget, records it in the seat's event history and wakes the seat.
func (c *Control) Requeue(ctx context.Context, st *store.Store, id string) (mailbox.DeadLetter, error) {
	dl, err := c.mailbox.Requeue(ctx, id)
	if err != nil {
		return dl, err
	}
	if err := st.RecordSeatEvent(ctx, dl.Seat, "requeued", dl.Message.EventID, map[string]any{"dead_letter": id, "stream_id": dl.Message.StreamID}); err != nil {
		c.log.WarnContext(ctx, "seat_event_unrecorded", "seat", dl.Seat, "kind", "requeued", "error", err)
	}
	if s, ok := c.org.AgentSeat(dl.Seat); ok {
		if err := c.wake(ctx, s); err != nil {
			c.log.WarnContext(ctx, "wake_failed", "seat", s.Handle, "event_id", dl.Message.EventID, "error", err)
		}
	}
	return dl, nil
}

// Statuses returns the status each running seat workflow last published in
// its search attributes, keyed by handle. Seats with no open workflow are
// absent. It asks Temporal's visibility store, not the seats, so it answers
// even when no worker runs.
func (c *Control) Statuses(ctx context.Context) (map[string]crewlet.SeatStatus, error) {
	out := map[string]crewlet.SeatStatus{}
	req := &workflowservice.ListWorkflowExecutionsRequest{
		Query: fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Running' AND TaskQueue = '%s'",
			crewlet.WorkflowSeat, c.org.Temporal.TaskQueue),
	}
	for {
		resp, err := c.temporal.ListWorkflow(ctx, req)
		if err != nil {
			return nil, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the seats' workflows cannot be listed; Temporal is unreachable")
		}
		for _, ex := range resp.GetExecutions() {
			handle, ok := crewlet.HandleFromWorkflowID(ex.GetExecution().GetWorkflowId())
			if !ok {
				continue
			}
			status := crewlet.StatusEstablishing
			if p := ex.GetSearchAttributes().GetIndexedFields()[crewlet.SAStatus]; p != nil {
				var v string
				if err := converter.GetDefaultDataConverter().FromPayload(p, &v); err == nil && v != "" {
					status = crewlet.SeatStatus(v)
				}
			}
			out[handle] = status
		}
		if len(resp.GetNextPageToken()) == 0 {
			return out, nil
		}
		req.NextPageToken = resp.GetNextPageToken()
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "someone"
	}
	return s
}

// PrepareSeats makes sure every seat has a Postgres row and a mailbox
// (registered before it is created, so a retirement in progress is waited
// for), so mail sent before a seat attaches waits for it.
func (c *Control) PrepareSeats(ctx context.Context, st *store.Store) error {
	org, mb := c.org, c.mailbox
	return InParallel(len(org.Seats), reconcileAtOnce, func(i int) error {
		s := org.Seats[i]
		if err := st.EnsureSeat(ctx, s.Handle, s.Role, crewlet.SeatKind(s.Kind)); err != nil {
			return err
		}
		if err := st.EnsureMailbox(ctx, s.Handle, mb.Stream(s.Handle), mb.Group(s.Handle)); err != nil {
			return err
		}
		return mb.Ensure(ctx, s.Handle)
	})
}

// Reconcile makes the world match the org, for a worker on node nodeID: the
// seats are prepared, every agent seat gets a running workflow, and the
// workflows of seats no longer agent seats of the org are stopped
// (StopRemovedSeats).
func (c *Control) Reconcile(ctx context.Context, st *store.Store, nodeID string) error {
	errs := []error{c.PrepareSeats(ctx, st)}
	agents := c.org.AgentSeats()
	errs = append(errs, InParallel(len(agents), reconcileAtOnce, func(i int) error { return c.StartSeat(ctx, agents[i]) }))
	_, _, err := c.StopRemovedSeats(ctx, st, nodeID)
	return errors.Join(append(errs, err)...)
}

// StopRemovedSeats stops the running seat workflows of seats that are no
// longer agent seats of the org, and returns them. Stopping fails a seat's
// tickets, so while live nodes other than nodeID run an org file naming
// other seats it stops nothing and returns those nodes: one of the files is
// stale, and a node on the old file must not stop a seat the new one added
// back. The worker restarted last onto the new file, or the next
// maintenance pass once every worker runs it, stops them.
func (c *Control) StopRemovedSeats(ctx context.Context, st *store.Store, nodeID string) (stopped, waitFor []string, err error) {
	running, err := c.Statuses(ctx)
	if err != nil {
		return nil, nil, err
	}
	var removed []string
	for handle := range running {
		if _, ok := c.org.AgentSeat(handle); !ok {
			removed = append(removed, handle)
		}
	}
	if len(removed) == 0 {
		return nil, nil, nil
	}
	slices.Sort(removed)
	if waitFor, err = st.NodesOnAnotherOrg(ctx, c.org.Nodes.HeartbeatTimeout, nodeID, c.org.SeatsDigest()); err != nil || len(waitFor) > 0 {
		if len(waitFor) > 0 {
			c.log.WarnContext(ctx, "seat_stops_deferred", "seats", removed, "nodes_on_another_org", waitFor,
				"reason", "live nodes run an org file naming other seats; these seats are stopped once every worker runs one file")
		}
		return nil, waitFor, err
	}
	var errs []error
	for _, handle := range removed {
		err := c.temporal.SignalWorkflow(ctx, crewlet.SeatWorkflowID(handle), "", crewlet.SignalStop,
			crewlet.StopRequest{Reason: "seat is no longer an agent seat of the org", By: "reconcile"})
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
			// It ended since it was listed: nothing is left to stop.
		case err != nil:
			errs = append(errs, fmt.Errorf("stop removed seat %s: %w", handle, err))
		default:
			c.log.InfoContext(ctx, "seat_stop_requested", "seat", handle, "reason", "not in the org")
			stopped = append(stopped, handle)
		}
	}
	return stopped, nil, errors.Join(errs...)
}

// reconcileAtOnce bounds the seats a reconcile prepares or starts at once:
// at boot a node prepares and starts every seat of the org, and one at a
// time that is minutes for 10,000 seats.
const reconcileAtOnce = 16

// InParallel runs fn for 0..n-1, at most atOnce at a time, and joins what
// failed: the one bounded fan-out of the Temporal and Postgres calls made
// per seat.
func InParallel(n, atOnce int, fn func(i int) error) error {
	var (
		mu   sync.Mutex
		errs []error
		wg   sync.WaitGroup
	)
	sem := make(chan struct{}, atOnce)
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := fn(i); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
