package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/liveness"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/tools/firstparty"
	"github.com/crewlet/crewlet/internal/watchdog"
)

// Host runs a node's tenure activities (Attach, Hold, Detach) and the MCP
// servers each tenure runs here. Its activities run on the node's own host
// queue, so reaching them at all proves the node is alive. Which seats the
// node hosts, at which epoch, is its liveness's registry (Tenures); the
// presence loop that keeps it true lives in internal/liveness.
type Host struct {
	Store       *store.Store
	Incarnation string
	NodeID      string
	// Beat is how often tenure loops heartbeat; a third of the host
	// heartbeat timeout.
	Beat     time.Duration
	Watchdog *watchdog.Watchdog
	Log      *slog.Logger
	// StartTools starts what a tenure runs on this node: the role's MCP
	// servers. nil starts nothing.
	StartTools func(ctx context.Context, handle string) (ToolSession, error)
	// Knows reports whether this node's org file has the agent seat; a node
	// takes no seat its org does not know, whose turns it could only fail.
	// nil knows every seat.
	Knows func(handle string) bool
	// Tenures is the registry of the seats this node hosts; its teardown
	// is this Host's Teardown.
	Tenures *liveness.Tenures

	// toolSlots bounds the tool calls this node runs at once
	// (nodes.max_tool_calls); nil means no bound.
	toolSlots chan struct{}

	mu       sync.Mutex
	sessions map[string]ToolSession
	// teardownMu serializes teardowns: a session's Close is not safe to
	// call from two goroutines at once.
	teardownMu sync.Mutex
}

// SetMaxToolCalls bounds the tool calls this node runs at once.
func (h *Host) SetMaxToolCalls(n int) {
	if n > 0 {
		h.toolSlots = make(chan struct{}, n)
	}
}

// toolSlot waits for a free tool-call slot, heartbeating meanwhile, and
// returns its release.
func (h *Host) toolSlot(ctx context.Context) (func(), error) {
	if h.toolSlots == nil {
		return func() {}, nil
	}
	t := time.NewTicker(max(h.Beat, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case h.toolSlots <- struct{}{}:
			return func() { <-h.toolSlots }, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
			if activity.IsActivity(ctx) {
				activity.RecordHeartbeat(ctx)
			}
		}
	}
}

// ToolSession is the MCP servers one tenure started on this node
// (tools.Session). Close proves them stopped; an error keeps the seat here.
type ToolSession interface {
	Tools() []tools.Tool
	Call(ctx context.Context, name string, args json.RawMessage, idempotencyKey string) (tools.Result, error)
	Close() error
}

// session returns the tool session of the seat's tenure here, or nil.
func (h *Host) session(handle string) ToolSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sessions[handle]
}

// Hosts reports whether this node hosts the seat at epoch.
func (h *Host) Hosts(handle string, epoch int64) bool {
	return h.Tenures.Hosts(handle, epoch)
}

// Attach starts a tenure on this node: the epoch is bumped in one statement,
// and the node records that it hosts the seat at the new epoch.
func (h *Host) Attach(ctx context.Context, in crewlet.AttachInput) (crewlet.AttachOutput, error) {
	switch {
	case h.Tenures.Draining():
		return crewlet.AttachOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %s is draining and takes no new seat", h.Incarnation), crewlet.ErrorTypeRefused, nil)
	case h.Tenures.Starting():
		return crewlet.AttachOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %s is starting and takes no seat before its first presence write", h.Incarnation), crewlet.ErrorTypeRefused, nil)
	case h.Tenures.SelfFenced():
		return crewlet.AttachOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %s cannot reach Postgres and takes no seat", h.Incarnation), crewlet.ErrorTypeRefused, nil)
	case h.Knows != nil && !h.Knows(in.Handle):
		// Config skew: the org file changed and this node runs the old
		// one. Hosting the seat here would fail its mail as "no role".
		return crewlet.AttachOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %s's org file has no agent seat %s; restart it with the current org file", h.Incarnation, in.Handle),
			crewlet.ErrorTypeRefused, nil)
	}
	// A tenure this node held before (a lost host that came back) ends
	// here first: its children must not outlive it.
	if err := h.Teardown(in.Handle); err != nil {
		return crewlet.AttachOutput{}, fmt.Errorf("stop the previous tenure's tools of %s: %w", in.Handle, err)
	}
	row, err := h.Store.Attach(ctx, in.Handle, h.Incarnation, h.NodeID)
	if err != nil {
		return crewlet.AttachOutput{}, err
	}
	session, err := h.startTools(ctx, in.Handle, row.Epoch)
	if err != nil {
		return crewlet.AttachOutput{}, err
	}
	h.keepSession(in.Handle, session)
	h.Tenures.Begin(in.Handle, row.Epoch)
	h.Log.Info("seat_attached", "seat", in.Handle, "epoch", row.Epoch, "node", h.Incarnation)
	return crewlet.AttachOutput{Epoch: row.Epoch, Node: row.Node, AcquiredAt: *row.AcquiredAt}, nil
}

// Hold heartbeats for as long as this node hosts the seat at the epoch. Only
// a seat run begun before node-level liveness runs it, for its whole
// tenure: when the node dies or wedges the heartbeat stops and the seat
// fails over within the heartbeat timeout.
//
// COMPAT(node-liveness@1): Hold serves seat runs below version 1 only.
func (h *Host) Hold(ctx context.Context, in crewlet.HoldInput) error {
	loop := "hold/" + in.Handle
	defer h.Watchdog.Forget(loop)
	t := time.NewTicker(h.Beat)
	defer t.Stop()
	for {
		if !h.Hosts(in.Handle, in.Epoch) {
			return h.fenced(in.Handle, in.Epoch)
		}
		h.Watchdog.Beat(loop)
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Detach ends a tenure voluntarily. The node stops hosting the seat only
// once its teardown is proven; a teardown that fails keeps the seat here,
// is retried every beat and is reported as unproven, because a seat released
// while this node may still act for it would be half-owned.
//
// The wait has no end but the node's: a seat whose teardown here cannot be
// proven stays on this node until the process restarts
// (docs/architecture.md, "Tenure: which node runs a seat"), and the presence
// loop alarms about it every minute (seat_still_unproven).
func (h *Host) Detach(ctx context.Context, in crewlet.DetachInput) error {
	if !h.Hosts(in.Handle, in.Epoch) {
		return nil
	}
	for !h.Tenures.End(in.Handle, in.Epoch, "detached: "+in.Reason) {
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.Beat):
		}
	}
	return nil
}

// startTools starts the tenure's MCP servers and records the tool catalog
// its turns offer the model: the first-party tools and the servers' tools.
func (h *Host) startTools(ctx context.Context, handle string, epoch int64) (ToolSession, error) {
	var session ToolSession
	if h.StartTools != nil {
		var err error
		if session, err = h.StartTools(ctx, handle); err != nil {
			if session != nil {
				// A child that would not stop: the next Attach or Detach
				// of this seat here retries its teardown.
				h.keepSession(handle, session)
			}
			return nil, fmt.Errorf("start the MCP servers of %s: %w", handle, err)
		}
	}
	catalog := firstparty.Specs()
	if session != nil {
		for _, t := range session.Tools() {
			catalog = append(catalog, t.Spec)
		}
	}
	raw, err := json.Marshal(catalog)
	if err == nil {
		err = h.Store.SetSeatTools(ctx, handle, epoch, raw)
	}
	if err != nil {
		// The servers started for nothing: stop them the one way, which
		// keeps a session that will not stop for the next teardown.
		h.keepSession(handle, session)
		if terr := h.Teardown(handle); terr != nil {
			h.Log.Warn("seat_release_unproven", "seat", handle, "epoch", epoch, "error", terr)
		}
		return nil, fmt.Errorf("record the tool catalog of %s: %w", handle, err)
	}
	return session, nil
}

func (h *Host) keepSession(handle string, session ToolSession) {
	if session == nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions == nil {
		h.sessions = map[string]ToolSession{}
	}
	h.sessions[handle] = session
}

// Teardown stops the seat's MCP servers on this node, if it runs any. A
// session whose Close fails stays, so the next teardown retries it.
func (h *Host) Teardown(handle string) error {
	h.teardownMu.Lock()
	defer h.teardownMu.Unlock()
	session := h.session(handle)
	if session == nil {
		return nil
	}
	if err := session.Close(); err != nil {
		return err
	}
	h.mu.Lock()
	if h.sessions[handle] == session {
		delete(h.sessions, handle)
	}
	h.mu.Unlock()
	return nil
}

// CheckHosted returns a fenced error unless this node hosts the seat at epoch.
// A self-fenced node acts for no seat, even one whose teardown it could
// not prove.
func (h *Host) CheckHosted(handle string, epoch int64) error {
	if h.Tenures.ActsFor(handle, epoch) {
		return nil
	}
	return h.fenced(handle, epoch)
}

func (h *Host) fenced(handle string, epoch int64) error {
	h.Log.Warn("seat_fenced", "seat", handle, "epoch", epoch, "node", h.Incarnation, "reason", "not hosted here")
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("node %s does not host seat %s at epoch %d", h.Incarnation, handle, epoch), crewlet.ErrorTypeFenced, nil)
}

// heartbeatWhile heartbeats the activity every beat until stop is closed, so
// a long step on the host (a slow model) still proves the host alive.
func heartbeatWhile(ctx context.Context, beat time.Duration, stop <-chan struct{}) {
	if beat <= 0 || !activity.IsActivity(ctx) {
		return
	}
	t := time.NewTicker(beat)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			activity.RecordHeartbeat(ctx)
		}
	}
}
