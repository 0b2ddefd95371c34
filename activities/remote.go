package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/a2a"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
)

// Remote serves tickets to remote A2A agents: the steps of the
// RemoteTicket workflow (docs/operations.md, "Delegate to a remote agent").
type Remote struct {
	Org     config.Source
	Store   *store.Store
	Tickets *tickets.Service
	// Allowed is this node's allow-list (config.MCPAllowed of its own
	// file): an agent's token is read and sent only where it allows, so a
	// revision cannot point the token at another host.
	Allowed []config.MCPAllow
	HTTP    *http.Client
	// StreamFor bounds one RemoteAwait's stream; Beat is how often a wait
	// heartbeats and looks at the ticket. Zero: the defaults.
	StreamFor, Beat time.Duration
	Log             *slog.Logger

	// cards holds each agent's card as last read, for cardTTL: a wait that
	// polls every few seconds reads the card once, not once a poll.
	cards sync.Map // cardKey -> cachedCard
}

// cardTTL is how long a card read stays in use; a call that fails drops it
// at once, so an agent that moved its interface is found on the retry.
const cardTTL = 5 * time.Minute

type cardKey struct{ url, token string }

type cachedCard struct {
	client *a2a.Client
	read   time.Time
}

// remoteAgent is a ticket's remote agent, dialed.
type remoteAgent struct {
	name   string
	client *a2a.Client
	key    cardKey
	// cached is true when the card was read by an earlier call.
	cached bool
}

// failed is a call to the agent that failed, as the workflow takes it; its
// card is read again on the next call.
func (a *Remote) failed(r remoteAgent, err error) error {
	a.cards.Delete(r.key)
	var re *a2a.RemoteError
	if r.cached && errors.As(err, &re) && re.Refused {
		// Refused at an interface read from an older card: the agent may
		// have moved it, so the retry reads the card before giving up.
		return temporal.NewApplicationError(fmt.Sprintf("the remote agent %s%s: %s (its card is read again)", config.A2APrefix, r.name, re.Msg),
			crewlet.ErrorTypeRemoteUnreachable)
	}
	return remoteError(r.name, err)
}

// remoteCallTimeout bounds one call of a remote agent that is no stream.
const remoteCallTimeout = 30 * time.Second

// remoteError is a failure of the remote as the workflow takes it: a
// refusal is not retried; the rest are, a bounded number of times. The
// text names the agent and what to do, never the token.
func remoteError(agent string, err error) error {
	var re *a2a.RemoteError
	if !errors.As(err, &re) {
		return err
	}
	msg := fmt.Sprintf("the remote agent %s%s: %s", config.A2APrefix, agent, re.Msg)
	if re.Refused {
		return temporal.NewNonRetryableApplicationError(msg, crewlet.ErrorTypeRemoteRefused, nil)
	}
	return temporal.NewApplicationError(msg, crewlet.ErrorTypeRemoteUnreachable)
}

// dial reads the ticket and returns a client of its remote agent, as the
// org names it and this node allows it.
func (a *Remote) dial(ctx context.Context, id string) (crewlet.Ticket, remoteAgent, error) {
	t, err := a.Store.Ticket(ctx, id)
	if err != nil {
		return t, remoteAgent{}, err
	}
	agent, _, known := a.Org.Now().RemoteAgent(t.To)
	if !known {
		return t, remoteAgent{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("no agents: entry names %s any more; add it back to the org file to serve this ticket", t.To), crewlet.ErrorTypeRemoteRefused, nil)
	}
	token := ""
	if agent.TokenEnv != "" {
		if refused := config.MCPNotAllowed(a.Allowed, &config.Config{Agents: []config.Agent{agent}}); len(refused) > 0 {
			return t, remoteAgent{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("%s's token_env %s is not allowed for card_url %s on this node (its own file or nodes.mcp_allow must name them together); ask an operator to add {url: %s, env: [%s]} to nodes.mcp_allow",
					t.To, agent.TokenEnv, agent.CardURL, agent.CardURL, agent.TokenEnv), crewlet.ErrorTypeRemoteRefused, nil)
		}
		if token = os.Getenv(agent.TokenEnv); token == "" {
			return t, remoteAgent{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("%s's token_env %s is not set on this node; export the token there", t.To, agent.TokenEnv), crewlet.ErrorTypeRemoteRefused, nil)
		}
	}
	key := cardKey{agent.CardURL, token}
	if hit, ok := a.cards.Load(key); ok && time.Since(hit.(cachedCard).read) < cardTTL {
		return t, remoteAgent{agent.Name, hit.(cachedCard).client, key, true}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, remoteCallTimeout)
	defer cancel()
	c, err := a2a.Dial(cctx, a.HTTP, agent.CardURL, token)
	if err != nil {
		return t, remoteAgent{}, remoteError(agent.Name, err)
	}
	a.cards.Store(key, cachedCard{c, time.Now()})
	return t, remoteAgent{agent.Name, c, key, false}, nil
}

// remoteMessageID is the id of message seq on a ticket's remote task:
// the ticket's own id for its task, so the remote can tell a send
// retried from a new one.
func remoteMessageID(ticket string, seq int) string {
	if seq == 0 {
		return ticket
	}
	return fmt.Sprintf("%s-answer-%d", ticket, seq)
}

func stateOf(t a2a.Task) crewlet.RemoteState {
	return crewlet.RemoteState{Task: t.ID, Context: t.ContextID, State: t.Status.State, Text: a2a.TextOf(t), Since: t.Status.Timestamp}
}

// RemoteSend sends message Seq on the ticket's remote task and records the
// task the first message made. A first message whose task is recorded
// already (a retry after the remote answered) is not sent again.
func (a *Remote) RemoteSend(ctx context.Context, in crewlet.RemoteSendInput) (crewlet.RemoteState, error) {
	t, r, err := a.dial(ctx, in.Ticket)
	if err != nil {
		return crewlet.RemoteState{}, err
	}
	if !t.Phase.Open() {
		return crewlet.RemoteState{Task: t.RemoteTask, TicketEnded: true}, nil
	}
	cctx, cancel := context.WithTimeout(ctx, remoteCallTimeout)
	defer cancel()
	if in.Seq == 0 && t.RemoteTask != "" {
		task, err := r.client.GetTask(cctx, t.RemoteTask)
		if err != nil {
			return crewlet.RemoteState{}, a.failed(r, err)
		}
		return stateOf(task), nil
	}
	m := a2a.Message{MessageID: remoteMessageID(t.ID, in.Seq), Role: a2a.RoleUser, Parts: []a2a.Part{a2a.TextPart(t.Task)}}
	if in.Seq > 0 {
		m.TaskID, m.ContextID, m.Parts = in.Task, in.Context, []a2a.Part{a2a.TextPart(in.Answer)}
	}
	task, err := r.client.SendMessage(cctx, m)
	if err != nil {
		return crewlet.RemoteState{}, a.failed(r, err)
	}
	if in.Seq == 0 && task.ID != "" {
		if _, err := a.Store.SetRemoteTask(ctx, t.ID, task.ID, task.ContextID); err != nil {
			return crewlet.RemoteState{}, err
		}
		a.Log.InfoContext(ctx, "remote_task_started", "ticket", t.ID, "agent", r.name, "task", task.ID)
	}
	return stateOf(task), nil
}

// RemoteAwait waits, bounded, for the remote task to end or ask: it reads
// the task, and when it still works and in.Stream, follows the remote's
// stream until the task moves or StreamFor passes. It heartbeats as it
// waits and stops early when the ticket ended on crewlet's side.
func (a *Remote) RemoteAwait(ctx context.Context, in crewlet.RemoteAwaitInput) (crewlet.RemoteState, error) {
	t, r, err := a.dial(ctx, in.Ticket)
	if err != nil {
		return crewlet.RemoteState{}, err
	}
	if !t.Phase.Open() {
		return crewlet.RemoteState{Task: in.Task, TicketEnded: true}, nil
	}
	get := func() (crewlet.RemoteState, error) {
		cctx, cancel := context.WithTimeout(ctx, remoteCallTimeout)
		defer cancel()
		task, err := r.client.GetTask(cctx, in.Task)
		if err != nil {
			return crewlet.RemoteState{}, a.failed(r, err)
		}
		return stateOf(task), nil
	}
	// The task moved when it ended or asks a question not yet answered.
	moved := func(st crewlet.RemoteState) bool { return a2a.Ended(st.State) || st.Asks(in.Answered) }
	st, err := get()
	if err != nil || !in.Stream || !r.client.Streaming || moved(st) {
		return st, err
	}
	streamFor, beat := a.StreamFor, a.Beat
	if streamFor <= 0 {
		streamFor = 90 * time.Second
	}
	if beat <= 0 {
		beat = 3 * time.Second
	}
	sctx, stop := context.WithTimeout(ctx, streamFor)
	defer stop()
	ended := make(chan bool, 1)
	go func() {
		// Beat while the stream is quiet, and look at the ticket: one
		// cancelled here ends the wait.
		tick := time.NewTicker(beat)
		defer tick.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-tick.C:
				activity.RecordHeartbeat(ctx)
				if now, err := a.Store.Ticket(sctx, in.Ticket); err == nil && !now.Phase.Open() {
					ended <- true
					stop()
					return
				}
			}
		}
	}()
	serr := r.client.Subscribe(sctx, in.Task, func(ev a2a.StreamResponse) bool {
		activity.RecordHeartbeat(ctx)
		status, ok := a2a.StatusOfUpdate(ev)
		return !ok || !moved(crewlet.RemoteState{State: status.State, Text: a2a.StatusText(status), Since: status.Timestamp})
	})
	stop()
	select {
	case <-ended:
		return crewlet.RemoteState{Task: in.Task, TicketEnded: true}, nil
	default:
	}
	if serr != nil && ctx.Err() == nil {
		// The stream is a shortcut; the workflow polls when it fails.
		a.Log.WarnContext(ctx, "remote_stream_failed", "ticket", in.Ticket, "agent", r.name, "error", serr)
	}
	if ctx.Err() != nil {
		return crewlet.RemoteState{}, ctx.Err()
	}
	return get()
}

// RemoteAsk puts the remote's question to the ticket's delegator, as
// in.Key, with this workflow waiting for the answer, and says how it
// stands: asking, answered, or the ticket ended.
func (a *Remote) RemoteAsk(ctx context.Context, in crewlet.RemoteAskInput) (crewlet.RemoteAnswer, error) {
	question := in.Question
	if len(question) > crewlet.MaxMessageBytes {
		// A remote's question longer than a ticket takes is cut, not
		// refused: the delegator can still answer what it reads.
		question = strings.ToValidUTF8(question[:crewlet.MaxMessageBytes], "")
	}
	t, mine, err := a.Tickets.Ask(ctx, in.Ticket, question, in.Key, activity.GetInfo(ctx).WorkflowExecution.ID)
	if err != nil {
		return crewlet.RemoteAnswer{}, err
	}
	switch {
	case !t.Phase.Open():
		return crewlet.RemoteAnswer{TicketEnded: true}, nil
	case !mine || t.Phase == crewlet.TicketAsking:
		return crewlet.RemoteAnswer{}, nil
	}
	answer := t.Answer
	if answer == "" {
		answer = "No answer came from the one who gave this task; decide yourself and go on."
	}
	return crewlet.RemoteAnswer{Answered: true, Answer: answer}, nil
}

// RemoteEnd ends the ticket as its remote task ended: settled with the
// remote's text, or failed saying why.
func (a *Remote) RemoteEnd(ctx context.Context, in crewlet.RemoteEndInput) error {
	if in.Completed {
		_, _, err := a.Tickets.Settle(ctx, in.Ticket, in.Text)
		return err
	}
	_, _, err := a.Tickets.End(ctx, in.Ticket, crewlet.TicketFailed, in.Reason)
	return err
}

// RemoteCancel cancels the remote task of a ticket that ended on
// crewlet's side. A task the remote will not cancel (it ended) is done.
func (a *Remote) RemoteCancel(ctx context.Context, in crewlet.RemoteCancelInput) error {
	_, r, err := a.dial(ctx, in.Ticket)
	if err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, remoteCallTimeout)
	defer cancel()
	if _, err := r.client.CancelTask(cctx, in.Task); err != nil {
		var re *a2a.RemoteError
		if errors.As(err, &re) && re.Refused {
			a.Log.InfoContext(ctx, "remote_task_not_cancelled", "ticket", in.Ticket, "agent", r.name, "reason", re.Msg)
			return nil
		}
		return a.failed(r, err)
	}
	a.Log.InfoContext(ctx, "remote_task_cancelled", "ticket", in.Ticket, "agent", r.name, "task", in.Task)
	return nil
}
