// Package workflows holds crewlet's Temporal workflows. Workflow code is
// deterministic and does no I/O; activities are referred to by name.
package workflows

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// SeatInput starts or continues a seat workflow.
type SeatInput struct {
	Handle string `json:"handle"`
	Role   string `json:"role"`
	// ReadBatch is the most mailbox entries one read takes; 0 means 16.
	ReadBatch int `json:"read_batch,omitempty"`
	// Carry is the state handed over by continue-as-new; nil on a first start.
	Carry *SeatCarry `json:"carry,omitempty"`
}

// SeatCarry is what a seat keeps across continue-as-new.
type SeatCarry struct {
	State    crewlet.SeatState `json:"state"`
	Attached bool              `json:"attached"`
	// WakePending is a wake that arrived before the hand-over.
	WakePending bool `json:"wake_pending"`
}

// Tunables of the seat loop.
const (
	// backstop wakes an idle seat even if every wake signal was lost. It is a
	// timer, not a poll: an idle seat costs one timer per period.
	backstop = 5 * time.Minute
	// cyclesPerRun bounds a run's history; the seat continues as new after
	// this many loop cycles even if Temporal does not suggest it yet.
	cyclesPerRun = 200
	// failureBackoff is how long a seat waits after a failed turn before it
	// reads again, so a message that always fails cannot spin the seat.
	failureBackoff   = 10 * time.Second
	defaultReadBatch = 16
)

var (
	saHandle = temporal.NewSearchAttributeKeyKeyword(crewlet.SAHandle)
	saRole   = temporal.NewSearchAttributeKeyKeyword(crewlet.SARole)
	saStatus = temporal.NewSearchAttributeKeyKeyword(crewlet.SAStatus)
	saNode   = temporal.NewSearchAttributeKeyKeyword(crewlet.SANode)
	saEpoch  = temporal.NewSearchAttributeKeyInt64(crewlet.SAEpoch)
	saPaused = temporal.NewSearchAttributeKeyBool(crewlet.SAPaused)
)

// SeatSearchAttributes are the attributes a seat starts with, before its
// workflow first upserts them.
func SeatSearchAttributes(handle, role string) temporal.SearchAttributes {
	return temporal.NewSearchAttributes(
		saHandle.ValueSet(handle),
		saRole.ValueSet(role),
		saStatus.ValueSet(string(crewlet.StatusEstablishing)),
		saPaused.ValueSet(false),
	)
}

// seat is the running state of one seat workflow.
type seat struct {
	in          SeatInput
	state       crewlet.SeatState
	attached    bool
	wakePending bool
	// upserted is the last search-attribute snapshot written, so unchanged
	// state writes nothing to history.
	upserted crewlet.SeatState
	logger   interface {
		Info(string, ...interface{})
		Warn(string, ...interface{})
	}
}

// Seat is the long-running workflow of one agent seat (DESIGN §3): it holds
// the seat's tenure, reads its mailbox and runs its turns, one at a time.
func Seat(ctx workflow.Context, in SeatInput) error {
	if in.ReadBatch <= 0 {
		in.ReadBatch = defaultReadBatch
	}
	s := &seat{in: in, logger: workflow.GetLogger(ctx)}
	if in.Carry != nil {
		s.state = in.Carry.State
		s.attached = in.Carry.Attached
		s.wakePending = in.Carry.WakePending
		s.state.Counters.ContinuedRuns++
	} else {
		s.state = crewlet.SeatState{Handle: in.Handle, Role: in.Role, Status: crewlet.StatusEstablishing}
		s.wakePending = true
	}
	s.state.Role = in.Role

	if err := workflow.SetQueryHandler(ctx, crewlet.QueryState, func() (crewlet.SeatState, error) {
		return s.state, nil
	}); err != nil {
		return fmt.Errorf("register state query: %w", err)
	}
	signals := newSeatSignals(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) { signals.run(ctx, s) })

	for cycle := 0; ; cycle++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.upsert(ctx)
		if cycle >= cyclesPerRun || workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
			return s.continueAsNew(ctx, signals)
		}
		if s.state.Drain != nil {
			if err := s.drain(ctx); err != nil {
				return err
			}
			continue
		}
		if !s.attached {
			if err := s.establish(ctx); err != nil {
				s.noteError(err.Error())
				_ = workflow.Sleep(ctx, failureBackoff)
			}
			continue
		}
		if s.state.Pause != nil {
			s.setStatus(ctx, crewlet.StatusPaused)
			s.recordStatus(ctx, "paused")
			if err := workflow.Await(ctx, func() bool { return s.state.Pause == nil || s.state.Drain != nil }); err != nil {
				return err
			}
			if s.state.Pause == nil {
				s.recordStatus(ctx, "active")
			}
			continue
		}
		s.setStatus(ctx, crewlet.StatusIdle)
		s.wakePending = false
		mail, err := s.readMail(ctx)
		if err != nil {
			if s.fenced(err) {
				continue
			}
			s.noteError(fmt.Sprintf("read mail: %v", err))
			_ = workflow.Sleep(ctx, failureBackoff)
			continue
		}
		if len(mail) == 0 {
			s.upsert(ctx)
			if _, err := workflow.AwaitWithTimeout(ctx, backstop, func() bool {
				return s.wakePending || s.state.Pause != nil || s.state.Drain != nil
			}); err != nil {
				return err
			}
			continue
		}
		s.runTurns(ctx, mail)
	}
}

// runTurns answers the entries one turn each, in mailbox order, stopping early
// when the seat is paused or drained; entries left unacked are reclaimed by
// the next read, so nothing is lost and order is kept.
func (s *seat) runTurns(ctx workflow.Context, mail []crewlet.MailRef) {
	for _, ref := range mail {
		if s.state.Pause != nil || s.state.Drain != nil || !s.attached {
			return
		}
		if err := s.runTurn(ctx, []crewlet.MailRef{ref}); err != nil {
			if s.fenced(err) {
				return
			}
			s.state.Counters.Failures++
			s.noteError(fmt.Sprintf("turn failed: %v", err))
			s.setStatus(ctx, crewlet.StatusIdle)
			_ = workflow.Sleep(ctx, failureBackoff)
			return
		}
	}
}

func (s *seat) runTurn(ctx workflow.Context, mail []crewlet.MailRef) error {
	eventIDs := make([]string, len(mail))
	streamIDs := make([]string, len(mail))
	for i, m := range mail {
		eventIDs[i], streamIDs[i] = m.EventID, m.StreamID
	}
	workKey := crewlet.WorkKey(eventIDs)
	turnID := fmt.Sprintf("turn/%s/%s", s.in.Handle, workKey)
	s.state.Turn = &crewlet.CurrentTurn{ID: turnID, WorkKey: workKey, Triggers: len(mail), StartedAt: workflow.Now(ctx)}
	s.setStatus(ctx, crewlet.StatusRunning)
	defer func() { s.state.Turn = nil }()

	var out crewlet.TurnOutput
	err := workflow.ExecuteActivity(turnContext(ctx), crewlet.ActivityRunTurn, crewlet.TurnInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch, TurnID: turnID, WorkKey: workKey, Mail: mail,
	}).Get(ctx, &out)
	if err != nil {
		return err
	}
	// The ledger holds these triggers now, so acking is safe; if the ack is
	// lost the redelivery is skipped by the ledger.
	if err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityAckMail, crewlet.AckMailInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch, StreamIDs: streamIDs,
	}).Get(ctx, nil); err != nil {
		return err
	}
	s.state.Counters.Turns++
	s.state.Counters.Triggers += int64(len(out.Answered))
	s.state.Counters.Skipped += int64(len(out.Skipped))
	s.state.LastError = ""
	return nil
}

func (s *seat) readMail(ctx workflow.Context) ([]crewlet.MailRef, error) {
	var out crewlet.ReadMailOutput
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivityReadMail, crewlet.ReadMailInput{
		Handle:     s.in.Handle,
		Epoch:      s.state.Epoch,
		Consumer:   fmt.Sprintf("%s:e%d", s.state.Node, s.state.Epoch),
		Max:        s.in.ReadBatch,
		ClearAwake: true,
	}).Get(ctx, &out)
	if err != nil {
		return nil, err
	}
	s.state.QueuedMail = out.Lag
	return out.Mail, nil
}

// establish starts a tenure: Attach bumps the epoch in Postgres and names the node.
func (s *seat) establish(ctx workflow.Context) error {
	s.setStatus(ctx, crewlet.StatusEstablishing)
	var out crewlet.AttachOutput
	if err := workflow.ExecuteActivity(attachContext(ctx), crewlet.ActivityAttach, crewlet.AttachInput{Handle: s.in.Handle}).Get(ctx, &out); err != nil {
		return fmt.Errorf("attach seat %s: %w", s.in.Handle, err)
	}
	s.attached = true
	s.state.Epoch = out.Epoch
	s.state.Node = out.Node
	s.state.Counters.Establishes++
	s.logger.Info("seat_attached", "seat", s.in.Handle, "epoch", out.Epoch, "node", out.Node)
	s.setStatus(ctx, crewlet.StatusIdle)
	return nil
}

// drain releases the seat's tenure and holds it drained until resumed.
func (s *seat) drain(ctx workflow.Context) error {
	if s.attached {
		s.setStatus(ctx, crewlet.StatusDraining)
		s.recordStatus(ctx, "drained")
		s.attached = false
		s.logger.Info("seat_detached", "seat", s.in.Handle, "epoch", s.state.Epoch, "reason", "drain")
	}
	s.state.Node = ""
	s.setStatus(ctx, crewlet.StatusDrained)
	return workflow.Await(ctx, func() bool { return s.state.Drain == nil })
}

// recordStatus writes the seat's lifecycle status to Postgres. It only
// reports, so a failure is noted and never stops the seat.
func (s *seat) recordStatus(ctx workflow.Context, status string) {
	err := workflow.ExecuteLocalActivity(localContext(ctx), crewlet.ActivitySetSeatStatus, crewlet.SeatStatusInput{
		Handle: s.in.Handle, Epoch: s.state.Epoch, Status: status,
	}).Get(ctx, nil)
	if err != nil && !s.fenced(err) {
		s.noteError(fmt.Sprintf("record status %s: %v", status, err))
	}
}

// fenced reports whether err means the seat's epoch moved on. The tenure is
// then lost: the seat re-establishes before it touches anything again.
func (s *seat) fenced(err error) bool {
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != crewlet.FencedErrorType {
		return false
	}
	s.logger.Warn("seat_fenced", "seat", s.in.Handle, "epoch", s.state.Epoch)
	s.attached = false
	return true
}

func (s *seat) noteError(msg string) {
	s.state.LastError = msg
	s.logger.Warn("seat_error", "seat", s.in.Handle, "error", msg)
}

func (s *seat) setStatus(ctx workflow.Context, status crewlet.SeatStatus) {
	s.state.Status = status
	s.upsert(ctx)
}

// upsert writes the search attributes when they changed since the last write.
func (s *seat) upsert(ctx workflow.Context) {
	cur := s.state
	prev := s.upserted
	var updates []temporal.SearchAttributeUpdate
	if cur.Handle != prev.Handle {
		updates = append(updates, saHandle.ValueSet(cur.Handle))
	}
	if cur.Role != prev.Role {
		updates = append(updates, saRole.ValueSet(cur.Role))
	}
	if cur.Status != prev.Status {
		updates = append(updates, saStatus.ValueSet(string(cur.Status)))
	}
	if cur.Node != prev.Node {
		updates = append(updates, saNode.ValueSet(cur.Node))
	}
	if cur.Epoch != prev.Epoch {
		updates = append(updates, saEpoch.ValueSet(cur.Epoch))
	}
	if (cur.Pause != nil) != (prev.Pause != nil) || prev.Handle == "" {
		updates = append(updates, saPaused.ValueSet(cur.Pause != nil))
	}
	if len(updates) == 0 {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		s.logger.Warn("upsert search attributes failed", "seat", s.in.Handle, "error", err)
		return
	}
	s.upserted = cur
}

// continueAsNew hands the seat's state to a fresh run, between turns, after
// every signal received so far is applied.
func (s *seat) continueAsNew(ctx workflow.Context, signals *seatSignals) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	if err := signals.stop(ctx); err != nil {
		return err
	}
	next := s.in
	next.Carry = &SeatCarry{State: s.state, Attached: s.attached, WakePending: s.wakePending}
	return workflow.NewContinueAsNewError(ctx, Seat, next)
}

func attachContext(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumInterval:        30 * time.Second,
			NonRetryableErrorTypes: []string{crewlet.FencedErrorType},
		},
	})
}

func turnContext(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        time.Second,
			MaximumInterval:        10 * time.Second,
			MaximumAttempts:        3,
			NonRetryableErrorTypes: []string{crewlet.FencedErrorType},
		},
	})
}

func localContext(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        100 * time.Millisecond,
			MaximumInterval:        10 * time.Second,
			NonRetryableErrorTypes: []string{crewlet.FencedErrorType},
		},
	})
}
