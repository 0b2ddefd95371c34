package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// The A2A task states RemoteTicket acts on (internal/a2a names them; the
// workflows never import it).
const (
	remoteCompleted = "TASK_STATE_COMPLETED"
	remoteFailed    = "TASK_STATE_FAILED"
	remoteCanceled  = "TASK_STATE_CANCELED"
	remoteRejected  = "TASK_STATE_REJECTED"
)

// How RemoteTicket waits on its remote task: a stream of at most
// RemoteStreamFor after each message sent (the activity's own bound,
// activities.Remote.StreamFor, stays below it), then GetTask polls whose
// gaps double from RemotePollFirst up to RemotePollMax, each gap a timer,
// so a wait survives any node. A question put to the delegator is looked
// at again every RemoteAskRecheck besides each signal, which finds a
// ticket cancelled or expired meanwhile.
const (
	RemoteStreamFor  = 2 * time.Minute
	RemotePollFirst  = 2 * time.Second
	RemotePollMax    = 30 * time.Second
	RemoteAskRecheck = time.Minute
	// remoteHeartbeat: a wait whose worker died is taken up by another
	// within this (the activity beats every few seconds).
	remoteHeartbeat = 15 * time.Second
)

// RemoteTicket serves one ticket to a remote A2A agent (a2a:NAME): it
// sends the ticket's task (its message id the ticket's, so a send retried
// is one message to a remote that dedupes on it, and one that recorded
// the remote task sends nothing again), then waits for the remote task
// to move. Completed settles the ticket with the remote's artifacts;
// failed, rejected or canceled ends it failed with the remote's message;
// input-required puts the remote's question to the delegator as the
// ticket's question, this workflow waiting for the answer, which goes
// back as the next message on the remote task. A ticket that ends on
// crewlet's side (cancelled, expired) cancels the remote task. A remote
// that refuses (its card, its token) or stays unreachable after bounded
// retries ends the ticket failed, saying why.
func RemoteTicket(ctx workflow.Context, in crewlet.RemoteTicketInput) error {
	r := remoteRun{in: in}
	return r.run(ctx)
}

type remoteRun struct {
	in crewlet.RemoteTicketInput
}

// remoteCalls retries a call of the remote a bounded number of times (a
// few minutes in all); one it refused is not retried.
var remoteCalls = &temporal.RetryPolicy{
	InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 8,
	NonRetryableErrorTypes: []string{crewlet.ErrorTypeRemoteRefused},
}

func (r *remoteRun) sendCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute, RetryPolicy: remoteCalls})
}

func (r *remoteRun) awaitCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: RemoteStreamFor + time.Minute, HeartbeatTimeout: remoteHeartbeat, RetryPolicy: remoteCalls,
	})
}

// localCtx runs the steps on crewlet's own side (Postgres, the ticket
// service), retried as long as they fail: they cannot be refused.
func (r *remoteRun) localCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: time.Minute},
	})
}

func (r *remoteRun) run(ctx workflow.Context) error {
	var st crewlet.RemoteState
	if r.in.Task == "" {
		if err := r.send(ctx, "", &st); err != nil {
			return r.fail(ctx, err)
		}
	} else {
		st = crewlet.RemoteState{Task: r.in.Task, Context: r.in.Context}
	}
	stream, gap := true, RemotePollFirst
	for {
		if st.TicketEnded {
			return r.cancel(ctx)
		}
		switch st.State {
		case remoteCompleted:
			return r.end(ctx, crewlet.RemoteEndInput{Ticket: r.in.Ticket, Completed: true, Text: st.Text})
		case remoteFailed, remoteCanceled, remoteRejected:
			reason := fmt.Sprintf("the remote agent's task %s ended %s", st.Task, st.State)
			if st.Text != "" {
				reason += ": " + st.Text
			}
			return r.end(ctx, crewlet.RemoteEndInput{Ticket: r.in.Ticket, Reason: reason})
		}
		if st.Asks(r.in.Answered) {
			answer, ended, err := r.ask(ctx, st.Text)
			if err != nil {
				return err
			}
			if ended {
				return r.cancel(ctx)
			}
			// Until the remote takes the answer it may show the
			// question still: that is no new one.
			r.in.Answered = st.Question()
			if err := r.send(ctx, answer, &st); err != nil {
				return r.fail(ctx, err)
			}
			stream, gap = true, RemotePollFirst
			continue
		}
		if st.Task == "" {
			return r.end(ctx, crewlet.RemoteEndInput{Ticket: r.in.Ticket, Reason: fmt.Sprintf("the remote agent answered in state %q without a task to wait on", st.State)})
		}
		if !stream {
			if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
				return workflow.NewContinueAsNewError(ctx, crewlet.WorkflowRemoteTicket, r.in)
			}
			if err := workflow.Sleep(ctx, gap); err != nil {
				return err
			}
			gap = min(2*gap, RemotePollMax)
		}
		in := crewlet.RemoteAwaitInput{Ticket: r.in.Ticket, Task: st.Task, Stream: stream, Answered: r.in.Answered}
		if err := workflow.ExecuteActivity(r.awaitCtx(ctx), crewlet.ActivityRemoteAwait, in).Get(ctx, &st); err != nil {
			return r.fail(ctx, err)
		}
		stream = false
	}
}

// send sends the next message on the remote task: the ticket's task when
// none was sent, else answer.
func (r *remoteRun) send(ctx workflow.Context, answer string, st *crewlet.RemoteState) error {
	in := crewlet.RemoteSendInput{Ticket: r.in.Ticket, Seq: r.in.Sent, Task: r.in.Task, Context: r.in.Context, Answer: answer}
	if err := workflow.ExecuteActivity(r.sendCtx(ctx), crewlet.ActivityRemoteSend, in).Get(ctx, st); err != nil {
		return err
	}
	r.in.Sent++
	if r.in.Task == "" {
		r.in.Task, r.in.Context = st.Task, st.Context
	}
	return nil
}

// ask puts the remote's question to the delegator and waits for the
// answer, or for the ticket to end.
func (r *remoteRun) ask(ctx workflow.Context, question string) (answer string, ended bool, err error) {
	r.in.Asked++
	if question == "" {
		question = "The remote agent needs more input to go on; say what it should know."
	}
	in := crewlet.RemoteAskInput{Ticket: r.in.Ticket, Key: fmt.Sprintf("remote-ask-%d", r.in.Asked), Question: question}
	changed := workflow.GetSignalChannel(ctx, crewlet.SignalTicket)
	for {
		var got crewlet.RemoteAnswer
		if err := workflow.ExecuteActivity(r.localCtx(ctx), crewlet.ActivityRemoteAsk, in).Get(ctx, &got); err != nil {
			return "", false, err
		}
		switch {
		case got.TicketEnded:
			return "", true, nil
		case got.Answered:
			return got.Answer, false, nil
		}
		timerCtx, cancelTimer := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddReceive(changed, func(c workflow.ReceiveChannel, _ bool) { c.Receive(ctx, nil) })
		sel.AddFuture(workflow.NewTimer(timerCtx, RemoteAskRecheck), func(workflow.Future) {})
		sel.Select(ctx)
		cancelTimer()
	}
}

// end ends the ticket as the remote task ended.
func (r *remoteRun) end(ctx workflow.Context, in crewlet.RemoteEndInput) error {
	return workflow.ExecuteActivity(r.localCtx(ctx), crewlet.ActivityRemoteEnd, in).Get(ctx, nil)
}

// fail ends the ticket failed with what a call of the remote failed with:
// the activity's own words (they name no secret), or, for a failure
// without them, that the remote could not be served.
func (r *remoteRun) fail(ctx workflow.Context, err error) error {
	var appErr *temporal.ApplicationError
	reason := "the remote agent could not be served: " + err.Error()
	if errors.As(err, &appErr) {
		reason = appErr.Message()
	}
	if end := r.end(ctx, crewlet.RemoteEndInput{Ticket: r.in.Ticket, Reason: reason}); end != nil {
		return end
	}
	return nil
}

// cancel cancels the remote task of a ticket that ended on crewlet's
// side. A remote that cannot be reached keeps its task: the ticket is
// over either way.
func (r *remoteRun) cancel(ctx workflow.Context) error {
	if r.in.Task == "" {
		return nil
	}
	in := crewlet.RemoteCancelInput{Ticket: r.in.Ticket, Task: r.in.Task}
	if err := workflow.ExecuteActivity(r.sendCtx(ctx), crewlet.ActivityRemoteCancel, in).Get(ctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("remote_task_not_cancelled", "ticket", r.in.Ticket, "task", r.in.Task, "error", err)
	}
	return nil
}
