package workflows

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/metrics"
)

// fakeSeatWorld stands in for everything the seat's activities touch: node
// placement, the seat row in Postgres (epoch, node, status), the hosts that
// hold tenures, and the seat's Redis mailbox. Its methods are registered
// under the real activity names. The activities run on their own goroutines
// while test callbacks read the fake, hence the mutex.
type fakeSeatWorld struct {
	mu  sync.Mutex
	env *testsuite.TestWorkflowEnvironment

	// Placement: the fake places on the first node of nodes that the request
	// does not exclude (a real placement prefers the previous node too, so
	// without Exclude a seat comes back to the node it just lost).
	nodes      []string
	placed     crewlet.PlaceSeatOutput // the last placement
	placements []crewlet.PlaceSeatInput
	// placeHook may refuse a placement (e.g. unplaceable); nil never does.
	placeHook func(w *fakeSeatWorld, in crewlet.PlaceSeatInput) error

	// Tenure.
	node     string
	epoch    int64 // the seat's current epoch; the last one Attach handed out
	attaches int
	// holds are the tenures: a run before node-level liveness (legacy)
	// holds each with a Hold activity; a run since, with nothing, and the
	// fake records each tenure Attach starts.
	holds    []*fakeHold
	legacy   bool
	detaches []crewlet.DetachInput

	// Mailbox: pending entries were handed out and not acked, fresh ones were
	// never handed out. Both are in stream order.
	seq        int
	pending    []crewlet.MailRef
	fresh      []crewlet.MailRef
	deliveries map[string]int // by event id
	reads      int

	// Completion ledger: event ids a successful turn recorded. PrepareTurn
	// skips them; a test may pre-seed it (a turn that finished before a crash).
	ledger map[string]bool

	// What the seat did.
	ran       []string // event ids of turns that succeeded, in order
	acked     []string // event ids acked, in order
	acks      []string // "m1,m2": the event ids of each AckMail, in order
	prepares  []string // "m1,m2": the event ids of each PrepareTurn, in order
	turns     []fakeTurn
	attempts  map[string]int
	cancelled []string // "m1,m2@e1": turns that saw their context cancelled
	statuses  []crewlet.SeatStatusInput
	// readErrs and readAt are each read's ReadMailInput.LastError and the
	// workflow (mock) time it ran at.
	readErrs []string
	readAt   []time.Time
	readMax  []int // ReadMailInput.Max of each read
	// events is the order of the tenure steps and turns (not reads or holds,
	// which run concurrently with them).
	events []string

	// placedHere lists the nodes that run the seat's placement: a seat
	// placed on one of them attaches in the placement, as on a real node
	// that chose itself. attachHereErr fails such an attach.
	placedHere    []string
	attachHereErr string

	// Fault injection, called with mu held. A nil hook never fails.
	readHook func(w *fakeSeatWorld) error
	ackHook  func(w *fakeSeatWorld, in crewlet.AckMailInput) error
	turnHook func(w *fakeSeatWorld, ref crewlet.MailRef) error
	// failedTurns ends the turn of these event ids recorded failed (and
	// acked) with the note given, as a turn whose model answered nothing.
	failedTurns map[string]string
	// duringTurn runs without mu held while the turn for an event id is in
	// flight (e.g. to signal the workflow from "inside" the turn).
	duringTurn func(eventID string)
	// slowTurn makes a turn block, heartbeating, until its context is
	// cancelled or, when slowTurnFor > 0, until that much wall time passed;
	// nil means every turn is quick.
	slowTurn    func(in crewlet.TurnInput) bool
	slowTurnFor time.Duration
	// heldTurns is how many turns a budget cap holds, each until holdFor
	// after it started; heldChecks is how many of the seat's budget checks
	// after that still find it held.
	heldTurns  int
	holdFor    time.Duration
	heldChecks int
	checks     int
	// heldBy is the hold BeginTurn answers (its ResetsAt set to holdFor
	// from the turn's start); nil is a seat's day cap of 100 tokens.
	heldBy *crewlet.BudgetHold
	// profileHolds is how many turns BeginTurn finds no profile free for,
	// when it is asked to take one: the turn asks AcquireProfile after the
	// hold (a minute).
	profileHolds int
	// stoppedBy lists who stopped each turn a stop_turn signal ended.
	stoppedBy []string

	// Busy policy: onBusy is what PrepareTurn reports; BusyMail answers a
	// reject by ledgering the mail (rejected lists it), and an interrupt by
	// interrupting while the input allows it, else keeps the mail.
	// newOnlyReads counts the reads of a running turn's mail; interrupts
	// lists the mail of each interrupt_turn signal a turn received.
	onBusy       string
	rejected     []string
	newOnlyReads int
	interrupts   []string
	mayInterrupt []bool
	// waitOn makes every tool call wait an hour on this ticket; waitsEnded
	// says how each wait ended, and when (since start).
	waitOn     string
	waitsEnded []string
	start      time.Time
	// running is each turn begun, by work key; queues the task queue each
	// tool call ran on.
	running map[string]crewlet.TurnInput
	queues  []string
}

// fakeTurn is one turn that succeeded.
type fakeTurn struct {
	names   string // "m1,m2": its event ids in order
	turnID  string
	workKey string
	epoch   int64
	queue   string
}

// names joins the event ids of refs: "m1,m2".
func names(refs []crewlet.MailRef) string {
	out := make([]string, len(refs))
	for i, ref := range refs {
		out[i] = ref.EventID
	}
	return strings.Join(out, ",")
}

// fakeHold is one Hold activity. The fake completes it asynchronously: it
// stays pending (as a real Hold does, heartbeating) until the seat cancels it
// or the test fails it with loseHost. A Go activity that blocked instead
// would stop the test environment's clock from skipping ahead.
type fakeHold struct {
	activityID string
	token      []byte
	epoch      int64
	node       string
	queue      string
	// ended is "cancelled" (by the seat) or "lost" (by the test); "" while held.
	ended string
}

func newFakeSeatWorld(env *testsuite.TestWorkflowEnvironment) *fakeSeatWorld {
	return &fakeSeatWorld{
		env:        env,
		nodes:      []string{"node-a", "node-b", "node-c"},
		deliveries: map[string]int{},
		attempts:   map[string]int{},
		ledger:     map[string]bool{},
		start:      env.Now(),
	}
}

func hostQueue(node string) string { return "crewlet-host-" + node }

func fencedErr(what string, got, want int64) error {
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("%s: epoch %d is not the seat's epoch %d", what, got, want), crewlet.ErrorTypeFenced, nil)
}

func unplaceableErr() error {
	return temporal.NewNonRetryableApplicationError("no live node matches the role", crewlet.ErrorTypeUnplaceable, nil)
}

func (w *fakeSeatWorld) eventf(format string, args ...any) {
	w.events = append(w.events, fmt.Sprintf(format, args...))
}

// publish appends entries to the mailbox, as the publisher's XADD would.
func (w *fakeSeatWorld) publish(eventIDs ...string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range eventIDs {
		w.seq++
		w.fresh = append(w.fresh, crewlet.MailRef{StreamID: fmt.Sprintf("%d-0", w.seq), EventID: id})
	}
}

func (w *fakeSeatWorld) PlaceSeat(_ context.Context, in crewlet.PlaceSeatInput) (crewlet.PlaceSeatOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.placements = append(w.placements, crewlet.PlaceSeatInput{Handle: in.Handle, Exclude: slices.Clone(in.Exclude)})
	w.eventf("place exclude=%v", in.Exclude)
	if w.placeHook != nil {
		if err := w.placeHook(w, in); err != nil {
			return crewlet.PlaceSeatOutput{}, err
		}
	}
	for _, n := range w.nodes {
		if slices.Contains(in.Exclude, n) {
			continue
		}
		w.placed = crewlet.PlaceSeatOutput{Node: n, HostQueue: hostQueue(n)}
		if slices.Contains(w.placedHere, n) {
			if w.attachHereErr != "" {
				w.eventf("attach here failed %s", n)
				w.placed.AttachError = w.attachHereErr
			} else {
				out := w.attachLocked("in place")
				w.placed.Attached = &out
			}
		}
		return w.placed, nil
	}
	return crewlet.PlaceSeatOutput{}, unplaceableErr()
}

// Attach runs on the node the last placement reserved.
func (w *fakeSeatWorld) Attach(ctx context.Context, in crewlet.AttachInput) (crewlet.AttachOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.attachLocked("queue=" + activity.GetInfo(ctx).TaskQueue), nil
}

// attachLocked starts a tenure on the placed node; via says how it got there.
func (w *fakeSeatWorld) attachLocked(via string) crewlet.AttachOutput {
	w.epoch++
	w.attaches++
	w.node = w.placed.Node
	w.eventf("attach e%d %s %s", w.epoch, w.node, via)
	if !w.legacy {
		// A new tenure ends whatever tenure the seat let go of (fenced).
		for _, h := range w.holds {
			if h.ended == "" {
				h.ended = "cancelled"
			}
		}
		w.holds = append(w.holds, &fakeHold{epoch: w.epoch, node: w.node, queue: hostQueue(w.node)})
	}
	return crewlet.AttachOutput{Epoch: w.epoch, Node: w.node}
}

func (w *fakeSeatWorld) Hold(ctx context.Context, in crewlet.HoldInput) error {
	info := activity.GetInfo(ctx)
	w.mu.Lock()
	defer w.mu.Unlock()
	node := strings.TrimPrefix(info.TaskQueue, hostQueue(""))
	w.holds = append(w.holds, &fakeHold{activityID: info.ActivityID, token: info.TaskToken, epoch: in.Epoch, node: node, queue: info.TaskQueue})
	return activity.ErrResultPending
}

// holdCancelled is the test environment's activity-cancelled listener.
func (w *fakeSeatWorld) holdCancelled(info *activity.Info) {
	if info.ActivityType.Name != crewlet.ActivityHold {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, h := range w.holds {
		if h.activityID == info.ActivityID && h.ended == "" {
			h.ended = "cancelled"
		}
	}
}

// loseHost makes the seat lose its host on node, as a dead node does: for a
// legacy run, every Hold still running there ends with a heartbeat timeout;
// for a run since node-level liveness, the failure detector signals
// host_lost. Call it from a delayed callback.
func (w *fakeSeatWorld) loseHost(node string) {
	if !w.legacy {
		w.mu.Lock()
		for _, h := range w.holds {
			if h.node == node && h.ended == "" {
				h.ended = "lost"
			}
		}
		w.mu.Unlock()
		w.env.SignalWorkflow(crewlet.SignalHostLost, crewlet.HostLostRequest{Node: node, By: "detector"})
		return
	}
	w.mu.Lock()
	var lost []*fakeHold
	for _, h := range w.holds {
		if h.node == node && h.ended == "" {
			h.ended = "lost"
			lost = append(lost, h)
		}
	}
	w.mu.Unlock()
	for _, h := range lost {
		if err := w.env.CompleteActivity(h.token, nil, temporal.NewHeartbeatTimeoutError()); err != nil {
			panic(fmt.Sprintf("fail hold on %s: %v", node, err))
		}
	}
}

func (w *fakeSeatWorld) Detach(ctx context.Context, in crewlet.DetachInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.detaches = append(w.detaches, in)
	w.eventf("detach e%d %q queue=%s", in.Epoch, in.Reason, activity.GetInfo(ctx).TaskQueue)
	if !w.legacy {
		for _, h := range w.holds {
			if h.epoch == in.Epoch && h.ended == "" {
				h.ended = "cancelled"
			}
		}
	}
	return nil
}

// ReadMail mirrors mailbox.Read: entries handed out earlier and never acked
// come first, then new ones, at most Max in all.
func (w *fakeSeatWorld) ReadMail(_ context.Context, in crewlet.ReadMailInput) (crewlet.ReadMailOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.reads++
	w.readErrs = append(w.readErrs, in.LastError)
	w.readAt = append(w.readAt, w.env.Now())
	w.readMax = append(w.readMax, in.Max)
	if in.Epoch != w.epoch {
		return crewlet.ReadMailOutput{}, fencedErr("read mail", in.Epoch, w.epoch)
	}
	if w.readHook != nil {
		if err := w.readHook(w); err != nil {
			return crewlet.ReadMailOutput{}, err
		}
	}
	var out []crewlet.MailRef
	for _, ref := range w.pending {
		if len(out) == in.Max || in.NewOnly {
			break
		}
		out = append(out, ref)
	}
	if in.NewOnly {
		w.newOnlyReads++
	}
	for len(out) < in.Max && len(w.fresh) > 0 {
		ref := w.fresh[0]
		w.fresh = w.fresh[1:]
		w.pending = append(w.pending, ref)
		out = append(out, ref)
	}
	for _, ref := range out {
		w.deliveries[ref.EventID]++
	}
	read := crewlet.ReadMailOutput{Mail: out, Lag: int64(len(w.fresh))}
	if in.Prepare && len(out) > 0 {
		prep := w.prepareLocked(out)
		read.Prepared = &prep
	}
	return read, nil
}

func (w *fakeSeatWorld) AckMail(_ context.Context, in crewlet.AckMailInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return fencedErr("ack mail", in.Epoch, w.epoch)
	}
	if w.ackHook != nil {
		if err := w.ackHook(w, in); err != nil {
			return err
		}
	}
	w.ackLocked(in)
	return nil
}

// ackLocked acks the input's entries. Call with mu held.
func (w *fakeSeatWorld) ackLocked(in crewlet.AckMailInput) {
	var acked []crewlet.MailRef
	for _, sid := range in.StreamIDs {
		for i, ref := range w.pending {
			if ref.StreamID == sid {
				acked = append(acked, ref)
				w.pending = append(w.pending[:i:i], w.pending[i+1:]...)
				break
			}
		}
	}
	for _, ref := range acked {
		w.acked = append(w.acked, ref.EventID)
	}
	w.acks = append(w.acks, names(acked))
	w.eventf("ack %s e%d", names(acked), in.Epoch)
}

// PrepareTurn mirrors the real one: fenced by epoch, it splits the entries
// into those the completion ledger does not hold yet (Run) and those it does
// (Skipped), keeping their order.
func (w *fakeSeatWorld) PrepareTurn(_ context.Context, in crewlet.PrepareTurnInput) (crewlet.PrepareTurnOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return crewlet.PrepareTurnOutput{}, fencedErr("prepare turn", in.Epoch, w.epoch)
	}
	return w.prepareLocked(in.Mail), nil
}

// prepareLocked is PrepareTurn's split of mail. Call with mu held.
func (w *fakeSeatWorld) prepareLocked(mail []crewlet.MailRef) crewlet.PrepareTurnOutput {
	w.prepares = append(w.prepares, names(mail))
	out := crewlet.PrepareTurnOutput{OnBusy: w.onBusy}
	for _, ref := range mail {
		if w.ledger[ref.EventID] {
			out.Skipped = append(out.Skipped, ref)
		} else {
			out.Run = append(out.Run, ref)
		}
	}
	return out
}

// BusyMail mirrors the real one's outcomes: under reject every entry is
// answered and ledgered (Done); under interrupt every entry interrupts while
// the input allows it, and is kept otherwise.
func (w *fakeSeatWorld) BusyMail(_ context.Context, in crewlet.BusyMailInput) (crewlet.BusyMailOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return crewlet.BusyMailOutput{}, fencedErr("busy mail", in.Epoch, w.epoch)
	}
	w.mayInterrupt = append(w.mayInterrupt, in.MayInterrupt)
	out := crewlet.BusyMailOutput{Policy: w.onBusy}
	switch {
	case w.onBusy == crewlet.OnBusyReject:
		for _, ref := range in.Mail {
			w.ledger[ref.EventID] = true
			w.rejected = append(w.rejected, ref.EventID)
		}
		out.Done = in.Mail
	case w.onBusy == crewlet.OnBusyInterrupt && in.MayInterrupt:
		out.Interrupt = in.Mail
	default:
		out.Keep = in.Mail
	}
	return out, nil
}

// CheckBudget answers a held seat's check: held while heldChecks lasts, each
// time for another holdFor.
func (w *fakeSeatWorld) CheckBudget(ctx context.Context, in crewlet.CheckBudgetInput) (*crewlet.BudgetHold, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.checks++
	if w.heldChecks == 0 {
		return nil, nil
	}
	w.heldChecks--
	return &crewlet.BudgetHold{Scope: crewlet.ScopeCompany, Window: crewlet.WindowMonth, Cap: 100, Used: 100,
		ResetsAt: w.env.Now().Add(w.holdFor)}, nil
}

// The fake world runs the seat's real turn (turn.run, inline in the seat)
// over fake steps: every thread is one tool call on the seat's host, so a
// lost host or a cancel reaches the turn as it would reach a real tool call,
// then a model round that answers. BeginTurn holds the turn for the budget
// heldTurns times (until holdFor from its start).

// BeginTurn remembers the turn's input for its steps.
func (w *fakeSeatWorld) BeginTurn(ctx context.Context, in crewlet.BeginTurnInput) (crewlet.BeginTurnOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return crewlet.BeginTurnOutput{}, fencedErr("begin turn", in.Epoch, w.epoch)
	}
	if w.heldTurns > 0 {
		w.heldTurns--
		w.eventf("turn %s e%d held", names(in.Mail), in.Epoch)
		hold := crewlet.BudgetHold{Scope: crewlet.ScopeSeat, Window: crewlet.WindowDay, Cap: 100, Used: 100}
		if w.heldBy != nil {
			hold = *w.heldBy
		}
		hold.ResetsAt = w.env.Now().Add(w.holdFor)
		return crewlet.BeginTurnOutput{Hold: &hold}, nil
	}
	if w.running == nil {
		w.running = map[string]crewlet.TurnInput{}
	}
	w.running[in.WorkKey] = crewlet.TurnInput{Tenure: in.Tenure, TurnID: in.TurnID, WorkKey: in.WorkKey, Mail: in.Mail}
	out := crewlet.BeginTurnOutput{Threads: 1, MaxRounds: 4}
	switch {
	case in.Acquire && w.profileHolds > 0:
		w.profileHolds--
		until := w.env.Now().Add(time.Minute)
		out.Profile = &crewlet.AcquireProfileOutput{Hold: &crewlet.ProfileHold{Until: &until}}
	case in.Acquire:
		out.Profile = &crewlet.AcquireProfileOutput{Profile: "fake"}
	}
	return out, nil
}

func (w *fakeSeatWorld) AcquireProfile(context.Context, crewlet.AcquireProfileInput) (crewlet.AcquireProfileOutput, error) {
	return crewlet.AcquireProfileOutput{Profile: "fake"}, nil
}

func (w *fakeSeatWorld) ReleaseProfile(context.Context, crewlet.ReleaseProfileInput) error {
	return nil
}

// ToolCall is the slow part of the turn, on the seat's host: it runs for
// slowTurnFor (forever when zero) if slowTurn says so, heartbeating, and a
// cancel ends it.
func (w *fakeSeatWorld) ToolCall(ctx context.Context, in crewlet.ToolCallInput) (crewlet.ToolCallOutput, error) {
	w.mu.Lock()
	turn := w.running[in.WorkKey]
	w.mu.Unlock()
	batch := names(turn.Mail)
	if w.duringTurn != nil {
		for _, ref := range turn.Mail {
			w.duringTurn(ref.EventID)
		}
	}
	if w.slowTurn != nil && w.slowTurn(turn) {
		var done <-chan time.Time
		if w.slowTurnFor > 0 {
			done = time.After(w.slowTurnFor)
		}
	wait:
		for ctx.Err() == nil {
			activity.RecordHeartbeat(ctx)
			select {
			case <-ctx.Done():
			case <-done:
				break wait
			case <-time.After(10 * time.Millisecond):
			}
		}
		if ctx.Err() != nil {
			w.mu.Lock()
			defer w.mu.Unlock()
			for _, ref := range turn.Mail {
				w.attempts[ref.EventID]++
			}
			w.cancelled = append(w.cancelled, fmt.Sprintf("%s@e%d", batch, in.Epoch))
			w.eventf("turn %s e%d cancelled", batch, in.Epoch)
			return crewlet.ToolCallOutput{}, ctx.Err()
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return crewlet.ToolCallOutput{}, fencedErr("tool call", in.Epoch, w.epoch)
	}
	w.queues = append(w.queues, activity.GetInfo(ctx).TaskQueue)
	if w.waitOn != "" {
		return crewlet.ToolCallOutput{Wait: &crewlet.TicketWait{Ticket: w.waitOn, Kind: crewlet.WaitSettle, For: time.Hour}}, nil
	}
	return crewlet.ToolCallOutput{}, nil
}

// ModelRound asks for the one tool call in round 1, and answers in round 2:
// it fails if any entry's hook fails, and on success records every entry in
// the completion ledger. A hook's error that is not an application error
// reaches the turn as a provider error, which is not retried, as a
// provider that is down would be after its retries.
func (w *fakeSeatWorld) ModelRound(ctx context.Context, in crewlet.ModelRoundInput) (crewlet.ModelRoundOutput, error) {
	if in.Round == 1 {
		return crewlet.ModelRoundOutput{Calls: []crewlet.ToolCallRef{{Call: 1, Name: "work"}}}, nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	turn := w.running[in.WorkKey]
	batch := names(turn.Mail)
	if in.Epoch != w.epoch {
		return crewlet.ModelRoundOutput{}, fencedErr("model round", in.Epoch, w.epoch)
	}
	var ids []string
	for _, ref := range turn.Mail {
		w.attempts[ref.EventID]++
		ids = append(ids, ref.EventID)
	}
	if w.turnHook != nil {
		for _, ref := range turn.Mail {
			if err := w.turnHook(w, ref); err != nil {
				w.eventf("turn %s e%d failed", batch, in.Epoch)
				var appErr *temporal.ApplicationError
				if errors.As(err, &appErr) {
					return crewlet.ModelRoundOutput{}, err
				}
				return crewlet.ModelRoundOutput{}, temporal.NewNonRetryableApplicationError(err.Error(), crewlet.ErrorTypeProvider, err)
			}
		}
	}
	w.eventf("turn %s e%d ok", batch, in.Epoch)
	w.ran = append(w.ran, ids...)
	for _, id := range ids {
		w.ledger[id] = true
	}
	queue := ""
	if len(w.queues) > 0 {
		queue = w.queues[len(w.queues)-1]
	}
	w.turns = append(w.turns, fakeTurn{
		names: batch, turnID: turn.TurnID, workKey: turn.WorkKey,
		epoch: in.Epoch, queue: queue,
	})
	for _, id := range ids {
		if note, ok := w.failedTurns[id]; ok {
			return crewlet.ModelRoundOutput{Failed: note}, nil
		}
	}
	return crewlet.ModelRoundOutput{}, nil
}

// ResolveWait records how a ticket wait ended.
func (w *fakeSeatWorld) ResolveWait(_ context.Context, in crewlet.ResolveWaitInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.waitsEnded = append(w.waitsEnded, fmt.Sprintf("%s timed_out=%v at %s", in.Wait.Ticket, in.TimedOut, w.env.Now().Sub(w.start).Round(time.Second)))
	return nil
}

// InterruptTurn records the mail that interrupted a turn.
func (w *fakeSeatWorld) InterruptTurn(_ context.Context, in crewlet.InterruptTurnInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.interrupts = append(w.interrupts, names(in.Mail))
	return nil
}

// FinishTurn answers the turn's triggers, and records who stopped it.
func (w *fakeSeatWorld) FinishTurn(_ context.Context, in crewlet.FinishTurnInput) (crewlet.FinishTurnOutput, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return crewlet.FinishTurnOutput{}, fencedErr("finish turn", in.Epoch, w.epoch)
	}
	if in.StoppedBy != "" {
		w.stoppedBy = append(w.stoppedBy, in.StoppedBy)
	}
	var ids []string
	for _, ref := range w.running[in.WorkKey].Mail {
		ids = append(ids, ref.EventID)
	}
	out := crewlet.FinishTurnOutput{Answered: ids, Replies: len(ids)}
	if len(in.Ack) > 0 && (w.ackHook == nil || w.ackHook(w, crewlet.AckMailInput{Tenure: in.Tenure, StreamIDs: in.Ack}) == nil) {
		// As the real one: an ack that fails is left to the seat.
		w.ackLocked(crewlet.AckMailInput{Tenure: in.Tenure, StreamIDs: in.Ack})
		out.Acked = true
	}
	return out, nil
}

// turnNames lists the turns that succeeded as "m1,m2". Call with mu held.
func (w *fakeSeatWorld) turnNames() []string {
	var out []string
	for _, t := range w.turns {
		out = append(out, t.names)
	}
	return out
}

// turnEpochs lists the epoch each successful turn ran under.
func (w *fakeSeatWorld) turnEpochs() []int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []int64
	for _, t := range w.turns {
		out = append(out, t.epoch)
	}
	return out
}

// turnQueues lists the task queue each successful turn ran on.
func (w *fakeSeatWorld) turnQueues() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, t := range w.turns {
		out = append(out, t.queue)
	}
	return out
}

func (w *fakeSeatWorld) SetSeatStatus(_ context.Context, in crewlet.SeatStatusInput) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if in.Epoch != w.epoch {
		return fencedErr("set seat status", in.Epoch, w.epoch)
	}
	w.statuses = append(w.statuses, in)
	return nil
}

// seatView is what a test sees at one moment: the state query's answer and
// the fake's record up to then.
type seatView struct {
	at         time.Duration
	state      crewlet.SeatState
	ran        []string
	acked      []string
	turns      []string // "m1,m2": the event ids of each turn that succeeded
	acks       []string // "m1,m2": the event ids of each AckMail
	attaches   int
	placements int
	reads      int
	detaches   int
	// holds are "e1@node-a:lost" etc.: every Hold so far and how it ended.
	holds  []string
	paused string // last CrewletPaused value upserted: "true", "false" or "never"
	status string // last CrewletStatus value upserted
}

// seatHarness runs one Seat workflow in the test environment on a timeline
// of delayed callbacks (mock time from the start of the workflow).
type seatHarness struct {
	t     *testing.T
	env   *testsuite.TestWorkflowEnvironment
	world *fakeSeatWorld
	// metrics holds what the seat recorded through the SDK's handler.
	metrics *metrics.Metrics
	views   []*seatView

	saMu     sync.Mutex
	saPaused *bool
	saStatus string
	// saTurnWrites lists each write of CrewletTurn and CrewletWaiting as
	// "Name=value", and each write of unsets only as "(unset)", in order.
	saTurnWrites []string
	// saHandles is the handle each upsert wrote, "" for one that left it.
	saHandles []string
}

// newSeatHarness runs a seat as it runs since node-level liveness.
func newSeatHarness(t *testing.T) *seatHarness {
	t.Helper()
	return newSeatHarnessOf(t, false)
}

// newLegacySeatHarness runs a seat as a run begun before node-level
// liveness does: its tenure is held by a heartbeating Hold activity.
func newLegacySeatHarness(t *testing.T) *seatHarness {
	t.Helper()
	return newSeatHarnessOf(t, true)
}

func newSeatHarnessOf(t *testing.T, legacy bool) *seatHarness {
	t.Helper()
	var suite testsuite.WorkflowTestSuite
	m := metrics.New()
	suite.SetMetricsHandler(m.Temporal())
	env := suite.NewTestWorkflowEnvironment()
	env.SetTestTimeout(10 * time.Second)
	h := &seatHarness{t: t, env: env, world: newFakeSeatWorld(env), metrics: m}
	h.world.legacy = legacy
	env.RegisterWorkflow(Seat)
	// Runs below node-liveness 5 (the legacy harness) run the same turn as
	// a child workflow.
	env.RegisterWorkflowWithOptions(Turn, workflow.RegisterOptions{Name: crewlet.WorkflowTurn})
	for name, fn := range map[string]any{
		crewlet.ActivityPlaceSeat:      h.world.PlaceSeat,
		crewlet.ActivityAttach:         h.world.Attach,
		crewlet.ActivityHold:           h.world.Hold,
		crewlet.ActivityDetach:         h.world.Detach,
		crewlet.ActivityReadMail:       h.world.ReadMail,
		crewlet.ActivityAckMail:        h.world.AckMail,
		crewlet.ActivityPrepareTurn:    h.world.PrepareTurn,
		crewlet.ActivityBeginTurn:      h.world.BeginTurn,
		crewlet.ActivityAcquireProfile: h.world.AcquireProfile,
		crewlet.ActivityReleaseProfile: h.world.ReleaseProfile,
		crewlet.ActivityModelRound:     h.world.ModelRound,
		crewlet.ActivityToolCall:       h.world.ToolCall,
		crewlet.ActivityInterruptTurn:  h.world.InterruptTurn,
		crewlet.ActivityFinishTurn:     h.world.FinishTurn,
		crewlet.ActivityResolveWait:    h.world.ResolveWait,
		crewlet.ActivitySetSeatStatus:  h.world.SetSeatStatus,
		crewlet.ActivityCheckBudget:    h.world.CheckBudget,
		crewlet.ActivityBusyMail:       h.world.BusyMail,
	} {
		env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
	env.SetOnActivityCanceledListener(h.world.holdCancelled)
	// The test environment keeps search attributes to itself; a mock on the
	// upsert is the way to see what the workflow wrote.
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa, ok := args.Get(0).(temporal.SearchAttributes)
		if !ok {
			return
		}
		h.saMu.Lock()
		defer h.saMu.Unlock()
		if v, ok := sa.GetBool(saPaused); ok {
			h.saPaused = &v
		}
		if v, ok := sa.GetKeyword(saStatus); ok {
			h.saStatus = v
		}
		if sa.Size() == 0 {
			// Only unsets (the turn's attributes, as it or its wait ends):
			// the test environment shows no key of them.
			h.saTurnWrites = append(h.saTurnWrites, "(unset)")
		}
		for _, key := range []temporal.SearchAttributeKeyKeyword{saTurn, saWaiting} {
			if sa.ContainsKey(key) {
				v, _ := sa.GetKeyword(key)
				h.saTurnWrites = append(h.saTurnWrites, key.GetName()+"="+v)
			}
		}
		handle, _ := sa.GetKeyword(saHandle)
		h.saHandles = append(h.saHandles, handle)
	}).Return(nil)
	if legacy {
		env.OnGetVersion("node-liveness", workflow.DefaultVersion, nodeLivenessVersion).Return(workflow.DefaultVersion)
	}
	return h
}

func (h *seatHarness) at(d time.Duration, fn func()) { h.env.RegisterDelayedCallback(fn, d) }

// publish appends mail to the mailbox at d and signals wake, as the publisher does.
func (h *seatHarness) publish(d time.Duration, eventIDs ...string) {
	h.at(d, func() {
		h.world.publish(eventIDs...)
		h.env.SignalWorkflow(crewlet.SignalWake, nil)
	})
}

func (h *seatHarness) signal(d time.Duration, name string, arg any) {
	h.at(d, func() { h.env.SignalWorkflow(name, arg) })
}

// loseHost fails the Hold on node at d, as a dead host's heartbeat timeout does.
func (h *seatHarness) loseHost(d time.Duration, node string) {
	h.at(d, func() { h.world.loseHost(node) })
}

// view queries the state at d; the returned view is filled when the run ends.
func (h *seatHarness) view(d time.Duration) *seatView {
	v := &seatView{at: d}
	h.views = append(h.views, v)
	h.at(d, func() { h.fill(v) })
	return v
}

// final is the view after the workflow ended (the test environment still
// answers queries then).
func (h *seatHarness) final() *seatView {
	v := &seatView{at: -1}
	h.fill(v)
	return v
}

func (h *seatHarness) fill(v *seatView) {
	enc, err := h.env.QueryWorkflow(crewlet.QueryState)
	if err != nil {
		h.t.Errorf("query state at %v: %v", v.at, err)
		return
	}
	if err := enc.Get(&v.state); err != nil {
		h.t.Errorf("decode state at %v: %v", v.at, err)
		return
	}
	w := h.world
	w.mu.Lock()
	v.ran = slices.Clone(w.ran)
	v.acked = slices.Clone(w.acked)
	v.turns = w.turnNames()
	v.acks = slices.Clone(w.acks)
	v.attaches = w.attaches
	v.placements = len(w.placements)
	v.reads = w.reads
	v.detaches = len(w.detaches)
	v.holds = w.holdNames()
	w.mu.Unlock()
	h.saMu.Lock()
	v.paused = "never"
	if h.saPaused != nil {
		v.paused = fmt.Sprint(*h.saPaused)
	}
	v.status = h.saStatus
	h.saMu.Unlock()
}

// holdNames lists the Holds so far as "e1@node-a" plus ":cancelled" or
// ":lost" once ended. Call with mu held.
func (w *fakeSeatWorld) holdNames() []string {
	var out []string
	for _, h := range w.holds {
		s := fmt.Sprintf("e%d@%s", h.epoch, h.node)
		if h.ended != "" {
			s += ":" + h.ended
		}
		out = append(out, s)
	}
	return out
}

// run executes the seat and returns the error it ended with. With cancelAt
// > 0 the workflow is cancelled then, and a cancel is the expected end.
func (h *seatHarness) run(in crewlet.SeatInput, cancelAt time.Duration) error {
	h.t.Helper()
	if cancelAt > 0 {
		h.at(cancelAt, h.env.CancelWorkflow)
	}
	h.env.ExecuteWorkflow(Seat, in)
	if !h.env.IsWorkflowCompleted() {
		h.t.Fatalf("seat workflow did not complete")
	}
	err := h.env.GetWorkflowError()
	if cancelAt > 0 && !temporal.IsCanceledError(err) {
		h.t.Fatalf("seat ended with %v; want it cancelled at %v", err, cancelAt)
	}
	for _, v := range h.views {
		if v.state.Handle == "" {
			h.t.Fatalf("state query at %v never answered (did the workflow end earlier?)", v.at)
		}
	}
	return err
}

// events returns the fake's record of tenure steps and turns.
func (h *seatHarness) events() []string {
	h.world.mu.Lock()
	defer h.world.mu.Unlock()
	return slices.Clone(h.world.events)
}

func eq[T any](t *testing.T, what string, got, want T) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s: got %#v, want %#v", what, got, want)
	}
}

func ids(s ...string) []string { return s }

func fenceOnce(done *bool, what string) error {
	if *done {
		return nil
	}
	*done = true
	return temporal.NewNonRetryableApplicationError(what+": seat moved on", crewlet.ErrorTypeFenced, nil)
}

func statusNames(w *fakeSeatWorld) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, s := range w.statuses {
		out = append(out, s.Status)
	}
	return out
}

const (
	testHandle = "ana"
	testRole   = "writer"
)

func seatIn() crewlet.SeatInput { return crewlet.SeatInput{Handle: testHandle, Role: testRole} }

// firstPlacement is the placement every seat starts with.
var firstPlacement = crewlet.PlaceSeatInput{Handle: testHandle}

// scrape is the value of the first series whose line begins with name in
// the seat's metrics, "" when there is none.
func (h *seatHarness) scrape(name string) string {
	h.t.Helper()
	rec := httptest.NewRecorder()
	h.metrics.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			return line[strings.LastIndex(line, " ")+1:]
		}
	}
	return ""
}
