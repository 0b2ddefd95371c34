package workflows

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// remoteWorld is what a RemoteTicket's activities see: a remote agent
// whose task moves through states as the test scripts them, and the
// ticket on crewlet's side.
type remoteWorld struct {
	env *testsuite.TestWorkflowEnvironment
	// states are what the remote task says at each look after the send
	// (the last one repeats); sendState what a send answers.
	states    []crewlet.RemoteState
	sendState func(in crewlet.RemoteSendInput) crewlet.RemoteState
	// sendErr fails every send with it.
	sendErr error
	// answers are what each look at the delegator's side of a question
	// finds.
	answers []crewlet.RemoteAnswer

	sends     []crewlet.RemoteSendInput
	awaits    []crewlet.RemoteAwaitInput
	awaitedAt []time.Time
	asks      []crewlet.RemoteAskInput
	ends      []crewlet.RemoteEndInput
	cancels   []crewlet.RemoteCancelInput
}

func (w *remoteWorld) send(_ context.Context, in crewlet.RemoteSendInput) (crewlet.RemoteState, error) {
	w.sends = append(w.sends, in)
	if w.sendErr != nil {
		return crewlet.RemoteState{}, w.sendErr
	}
	if w.sendState != nil {
		return w.sendState(in), nil
	}
	return crewlet.RemoteState{Task: "rt-1", Context: "rc-1", State: "TASK_STATE_SUBMITTED"}, nil
}

func (w *remoteWorld) await(_ context.Context, in crewlet.RemoteAwaitInput) (crewlet.RemoteState, error) {
	w.awaits = append(w.awaits, in)
	w.awaitedAt = append(w.awaitedAt, w.env.Now())
	st := w.states[0]
	if len(w.states) > 1 {
		w.states = w.states[1:]
	}
	return st, nil
}

func (w *remoteWorld) ask(_ context.Context, in crewlet.RemoteAskInput) (crewlet.RemoteAnswer, error) {
	w.asks = append(w.asks, in)
	if len(w.asks) > 10 {
		return crewlet.RemoteAnswer{}, temporal.NewNonRetryableApplicationError("asked again and again", "test", nil)
	}
	a := w.answers[0]
	if len(w.answers) > 1 {
		w.answers = w.answers[1:]
	}
	return a, nil
}

func (w *remoteWorld) end(_ context.Context, in crewlet.RemoteEndInput) error {
	w.ends = append(w.ends, in)
	return nil
}

func (w *remoteWorld) cancel(_ context.Context, in crewlet.RemoteCancelInput) error {
	w.cancels = append(w.cancels, in)
	return nil
}

func working(text string) crewlet.RemoteState {
	return crewlet.RemoteState{Task: "rt-1", Context: "rc-1", State: "TASK_STATE_WORKING", Text: text}
}

// runRemote runs a RemoteTicket for ticket t-1 in w; during lets the
// test act while it runs.
func runRemote(t *testing.T, w *remoteWorld, during func(env *testsuite.TestWorkflowEnvironment)) {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	w.env = env
	env.RegisterWorkflowWithOptions(RemoteTicket, workflow.RegisterOptions{Name: crewlet.WorkflowRemoteTicket})
	env.RegisterActivityWithOptions(w.send, activity.RegisterOptions{Name: crewlet.ActivityRemoteSend})
	env.RegisterActivityWithOptions(w.await, activity.RegisterOptions{Name: crewlet.ActivityRemoteAwait})
	env.RegisterActivityWithOptions(w.ask, activity.RegisterOptions{Name: crewlet.ActivityRemoteAsk})
	env.RegisterActivityWithOptions(w.end, activity.RegisterOptions{Name: crewlet.ActivityRemoteEnd})
	env.RegisterActivityWithOptions(w.cancel, activity.RegisterOptions{Name: crewlet.ActivityRemoteCancel})
	if during != nil {
		during(env)
	}
	env.ExecuteWorkflow(crewlet.WorkflowRemoteTicket, crewlet.RemoteTicketInput{Ticket: "t-1"})
	if !env.IsWorkflowCompleted() {
		t.Fatalf("the workflow did not complete")
	}
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("the workflow failed: %v", err)
	}
}

func TestRemoteTicketWaitsByStreamThenPollsWithBackoffAndSettlesOnce(t *testing.T) {
	t.Parallel()
	w := &remoteWorld{states: []crewlet.RemoteState{
		working(""), working(""), working(""), working(""), working(""), working(""), working(""),
		{Task: "rt-1", Context: "rc-1", State: "TASK_STATE_COMPLETED", Text: "the report"},
	}}
	runRemote(t, w, nil)
	if len(w.sends) != 1 || w.sends[0].Seq != 0 || w.sends[0].Ticket != "t-1" {
		t.Fatalf("sends %+v; want the ticket's task sent once, as message 0", w.sends)
	}
	if len(w.ends) != 1 || !w.ends[0].Completed || w.ends[0].Text != "the report" {
		t.Fatalf("ends %+v; want the ticket settled once with the remote's artifact", w.ends)
	}
	if !w.awaits[0].Stream || w.awaits[1].Stream {
		t.Fatalf("awaits %+v; want the first to stream and the rest to poll", w.awaits)
	}
	var gaps []time.Duration
	for i := 1; i < len(w.awaitedAt); i++ {
		gaps = append(gaps, w.awaitedAt[i].Sub(w.awaitedAt[i-1]))
	}
	want := []time.Duration{2 * time.Second, 4 * time.Second, 8 * time.Second, 16 * time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second}
	if len(gaps) != len(want) {
		t.Fatalf("poll gaps %v; want %v", gaps, want)
	}
	for i := range want {
		if gaps[i] != want[i] {
			t.Fatalf("poll gaps %v; want %v (doubling up to %s)", gaps, want, RemotePollMax)
		}
	}
	if len(w.cancels) != 0 {
		t.Fatalf("cancelled %+v a task that completed", w.cancels)
	}
}

func TestRemoteTicketFailsWithTheRemotesMessageWhenTheRemoteTaskFails(t *testing.T) {
	t.Parallel()
	for _, state := range []string{"TASK_STATE_FAILED", "TASK_STATE_REJECTED", "TASK_STATE_CANCELED"} {
		t.Run(state, func(t *testing.T) {
			w := &remoteWorld{states: []crewlet.RemoteState{{Task: "rt-1", State: state, Text: "no such repository"}}}
			runRemote(t, w, nil)
			if len(w.ends) != 1 || w.ends[0].Completed || !strings.Contains(w.ends[0].Reason, state) || !strings.Contains(w.ends[0].Reason, "no such repository") {
				t.Fatalf("ends %+v; want the ticket failed once, naming the state and the remote's message", w.ends)
			}
		})
	}
}

func TestRemoteTicketAsksTheDelegatorAndSendsTheAnswerOnTheSameRemoteTask(t *testing.T) {
	t.Parallel()
	question := crewlet.RemoteState{Task: "rt-1", Context: "rc-1", State: "TASK_STATE_INPUT_REQUIRED", Text: "which branch?", Since: "09:00"}
	w := &remoteWorld{
		// The remote shows the question answered until it takes the
		// answer: the send's answer and the first look still say it.
		states: []crewlet.RemoteState{question, question, {Task: "rt-1", Context: "rc-1", State: "TASK_STATE_COMPLETED", Text: "merged main"}},
		sendState: func(in crewlet.RemoteSendInput) crewlet.RemoteState {
			if in.Seq == 0 {
				return working("")
			}
			return question
		},
		// Asked, still asking at the first signal, answered at the second.
		answers: []crewlet.RemoteAnswer{{}, {}, {Answered: true, Answer: "main"}},
	}
	runRemote(t, w, func(env *testsuite.TestWorkflowEnvironment) {
		for _, at := range []time.Duration{10 * time.Second, 20 * time.Second} {
			env.RegisterDelayedCallback(func() {
				env.SignalWorkflow(crewlet.SignalTicket, crewlet.TicketSignal{Ticket: "t-1"})
			}, at)
		}
	})
	if len(w.asks) != 3 || w.asks[0].Question != "which branch?" || w.asks[0].Key != w.asks[2].Key {
		t.Fatalf("asks %+v; want the remote's question put once under one key and looked at after each signal, and not again while the remote still shows it", w.asks)
	}
	if a := w.awaits[len(w.awaits)-1]; a.Answered != question.Question() {
		t.Fatalf("the wait after the answer was %+v; want it told which question was answered", a)
	}
	if len(w.sends) != 2 {
		t.Fatalf("sends %+v; want the task, then the answer", w.sends)
	}
	if a := w.sends[1]; a.Seq != 1 || a.Task != "rt-1" || a.Context != "rc-1" || a.Answer != "main" {
		t.Fatalf("the answer was sent as %+v; want message 1 on task rt-1, context rc-1, saying main", a)
	}
	if len(w.ends) != 1 || !w.ends[0].Completed || w.ends[0].Text != "merged main" {
		t.Fatalf("ends %+v; want the ticket settled once with the remote's artifact", w.ends)
	}
}

func TestRemoteTicketCancelledHereCancelsTheRemoteTask(t *testing.T) {
	t.Parallel()
	t.Run("while it works", func(t *testing.T) {
		w := &remoteWorld{states: []crewlet.RemoteState{working(""), {Task: "rt-1", TicketEnded: true}}}
		runRemote(t, w, nil)
		if len(w.cancels) != 1 || w.cancels[0].Task != "rt-1" || len(w.ends) != 0 {
			t.Fatalf("cancels %+v, ends %+v; want remote task rt-1 cancelled once and the ticket left as it ended", w.cancels, w.ends)
		}
	})
	t.Run("while its question waits", func(t *testing.T) {
		w := &remoteWorld{
			states:  []crewlet.RemoteState{{Task: "rt-1", Context: "rc-1", State: "TASK_STATE_INPUT_REQUIRED", Text: "which branch?"}},
			answers: []crewlet.RemoteAnswer{{}, {TicketEnded: true}},
		}
		// No signal: the recheck timer finds the ticket ended.
		runRemote(t, w, nil)
		if len(w.cancels) != 1 || len(w.sends) != 1 || len(w.ends) != 0 {
			t.Fatalf("cancels %+v, sends %+v, ends %+v; want the remote task cancelled and nothing more sent", w.cancels, w.sends, w.ends)
		}
	})
}

func TestRemoteTicketFailsWithTheReasonWhenTheRemoteRefusesOrStaysUnreachable(t *testing.T) {
	t.Parallel()
	t.Run("refused: not retried", func(t *testing.T) {
		w := &remoteWorld{sendErr: temporal.NewNonRetryableApplicationError(
			"the remote agent a2a:x: its agent card at h refused crewlet's credentials (HTTP 401): check the token in the agent's token_env", crewlet.ErrorTypeRemoteRefused, nil)}
		runRemote(t, w, nil)
		if len(w.sends) != 1 {
			t.Fatalf("sent %d times; want a refusal not retried", len(w.sends))
		}
		if len(w.ends) != 1 || w.ends[0].Completed || !strings.Contains(w.ends[0].Reason, "HTTP 401") {
			t.Fatalf("ends %+v; want the ticket failed saying the remote refused the token", w.ends)
		}
	})
	t.Run("unreachable: a bounded number of tries", func(t *testing.T) {
		w := &remoteWorld{sendErr: temporal.NewApplicationError("the remote agent a2a:x: SendMessage at h could not be reached: connection refused", crewlet.ErrorTypeRemoteUnreachable)}
		runRemote(t, w, nil)
		if len(w.sends) != int(remoteCalls.MaximumAttempts) {
			t.Fatalf("sent %d times; want %d tries", len(w.sends), remoteCalls.MaximumAttempts)
		}
		if len(w.ends) != 1 || !strings.Contains(w.ends[0].Reason, "could not be reached") {
			t.Fatalf("ends %+v; want the ticket failed saying the remote could not be reached", w.ends)
		}
	})
}
