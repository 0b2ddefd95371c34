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
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/watchdog"
)

// Host is a node's side of seat tenure: the seats it hosts, at which epoch,
// and the MCP servers each tenure runs here. Its activities run on the
// node's own host queue, so reaching them at all proves the node is alive;
// and a node refuses work for a seat it does not host (a restarted node
// hosts nothing, so its successor's seats re-establish). Nothing runs per
// seat to keep a tenure: the node's presence loop checks, every beat, that
// each tenure here is still the seat's (Reconcile), and fences itself when
// it cannot reach Postgres (FenceSelf).
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
	// Metrics counts the tenures that moved on; nil counts none.
	Metrics *metrics.Metrics
	// Knows reports whether this node's org file has the agent seat; a node
	// takes no seat its org does not know, whose turns it could only fail.
	// nil knows every seat.
	Knows func(handle string) bool

	// toolSlots bounds the tool calls this node runs at once
	// (nodes.max_tool_calls); nil means no bound.
	toolSlots chan struct{}

	mu       sync.Mutex
	hosted   map[string]int64
	sessions map[string]ToolSession
	unproven map[string]time.Time
	// alarmed is when each unproven teardown was last alarmed about.
	alarmed  map[string]time.Time
	draining bool
	// selfFenced is set while the node cannot reach Postgres for longer
	// than it may act for its seats: it hosts nothing and takes no seat.
	selfFenced bool
	// tenuresRead is the database's time at Reconcile's last read of the
	// tenures begun elsewhere, and sweptAt when it last checked every tenure
	// here; only the presence loop touches them.
	tenuresRead time.Time
	sweptAt     time.Time
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
	h.mu.Lock()
	defer h.mu.Unlock()
	e, ok := h.hosted[handle]
	return ok && e == epoch
}

// Hosted returns the seats this node hosts, with their epochs.
func (h *Host) Hosted() map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]int64, len(h.hosted))
	for k, v := range h.hosted {
		out[k] = v
	}
	return out
}

// HostedCount returns how many seats this node hosts.
func (h *Host) HostedCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.hosted)
}

// Unproven returns, per seat whose teardown keeps failing, how long it has.
func (h *Host) Unproven(now time.Time) map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := map[string]int64{}
	for k, since := range h.unproven {
		out[k] = int64(now.Sub(since).Seconds())
	}
	return out
}

// SetDraining stops the node taking new seats.
func (h *Host) SetDraining() {
	h.mu.Lock()
	h.draining = true
	h.mu.Unlock()
}

// Attach starts a tenure on this node: the epoch is bumped in one statement,
// and the node records that it hosts the seat at the new epoch.
func (h *Host) Attach(ctx context.Context, in crewlet.AttachInput) (crewlet.AttachOutput, error) {
	h.mu.Lock()
	draining, fenced := h.draining, h.selfFenced
	h.mu.Unlock()
	switch {
	case draining:
		return crewlet.AttachOutput{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("node %s is draining and takes no new seat", h.Incarnation), crewlet.ErrorTypeRefused, nil)
	case fenced:
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
	if err := h.teardown(in.Handle); err != nil {
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
	h.mu.Lock()
	if h.hosted == nil {
		h.hosted = map[string]int64{}
	}
	h.hosted[in.Handle] = row.Epoch
	h.mu.Unlock()
	h.Log.Info("seat_attached", "seat", in.Handle, "epoch", row.Epoch, "node", h.Incarnation)
	return crewlet.AttachOutput{Epoch: row.Epoch, Node: row.Node, AcquiredAt: *row.AcquiredAt}, nil
}

// Hold heartbeats for as long as this node hosts the seat at the epoch. Only
// a seat run begun before node-level liveness runs it, for its whole
// tenure: when the node dies or wedges the heartbeat stops and the seat
// fails over within the heartbeat timeout.
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
	for !h.endTenure(in.Handle, in.Epoch, "detached: "+in.Reason) {
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(h.Beat):
		}
	}
	return nil
}

// endTenure stops the tenure's MCP servers and stops hosting the seat at
// epoch. A teardown that fails keeps the seat hosted here and unproven (the
// next call retries it), because a seat let go while this node may still
// act for it would be half-owned; it reports whether the tenure ended.
func (h *Host) endTenure(handle string, epoch int64, reason string) bool {
	if err := h.teardown(handle); err != nil {
		h.mu.Lock()
		if h.unproven == nil {
			h.unproven = map[string]time.Time{}
		}
		if _, ok := h.unproven[handle]; !ok {
			h.unproven[handle] = time.Now()
			h.Log.Warn("seat_release_unproven", "seat", handle, "epoch", epoch, "reason", reason, "error", err)
		}
		h.mu.Unlock()
		return false
	}
	h.mu.Lock()
	if e, ok := h.hosted[handle]; ok && e == epoch {
		delete(h.hosted, handle)
	}
	if _, ok := h.unproven[handle]; ok {
		delete(h.unproven, handle)
		delete(h.alarmed, handle)
		h.Log.Info("seat_release_recovered", "seat", handle, "epoch", epoch)
	}
	h.mu.Unlock()
	h.Log.Info("seat_detached", "seat", handle, "epoch", epoch, "reason", reason)
	return true
}

// tenureOverlap is how far before its previous read each beat's read of
// the tenures begun elsewhere reaches back: a tenure is stamped when its
// Attach statement began, and may commit after a read that ran meanwhile.
const tenureOverlap = 10 * time.Second

// movedOnSweep is how often Reconcile checks every tenure here, not only
// against the tenures begun since its last read: the backstop for an
// Attach that took longer than tenureOverlap to commit.
const movedOnSweep = time.Minute

// Reconcile ends the tenures here that moved on: a seat whose epoch in
// Postgres is no longer the one this node hosts it at was established
// elsewhere (fenced, or its host given up for lost while this node lived).
// Its MCP servers stop within a beat of it, before they can act for a seat
// another node now runs. The presence loop calls it every beat. A beat
// reads only the tenures begun elsewhere since the last one, so an idle
// node's beat costs nothing per seat; once every movedOnSweep it checks
// every seat hosted here too.
//
// It asks st, the node's presence store, so the check never waits behind
// the seats' own work for a connection. Only the presence loop calls it.
func (h *Host) Reconcile(ctx context.Context, st *store.Store) error {
	var since *time.Time
	if !h.tenuresRead.IsZero() {
		from := h.tenuresRead.Add(-tenureOverlap)
		since = &from
	}
	begun, read, err := st.TenuresBegunElsewhere(ctx, h.Incarnation, since)
	if err != nil {
		return err
	}
	h.tenuresRead = read
	moved := h.overtaken(begun)
	if time.Since(h.sweptAt) >= movedOnSweep {
		hosted := h.Hosted()
		handles, err := st.MovedOn(ctx, h.Incarnation, hosted)
		if err != nil {
			h.endMovedOn(moved)
			return err
		}
		for _, handle := range handles {
			moved[handle] = hosted[handle]
		}
		h.sweptAt = time.Now()
	}
	h.endMovedOn(moved)
	return nil
}

// overtaken returns the tenures here (handle → the epoch hosted here) that
// a tenure of begun, at a later epoch, overtook.
func (h *Host) overtaken(begun map[string]int64) map[string]int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	moved := map[string]int64{}
	for handle, epoch := range begun {
		if here, ok := h.hosted[handle]; ok && here < epoch {
			moved[handle] = here
		}
	}
	return moved
}

// endMovedOn ends the tenures here that moved on (handle → epoch).
func (h *Host) endMovedOn(moved map[string]int64) {
	for handle, epoch := range moved {
		h.Log.Warn("seat_fenced", "seat", handle, "epoch", epoch, "node", h.Incarnation, "reason", "its tenure moved on")
		h.Metrics.TenureMovedOn()
		h.endTenure(handle, epoch, "tenure moved on")
	}
}

// FenceSelf stops acting for every seat this node hosts: the node could not
// write its presence for long enough that a peer may soon take its seats.
// Every tenure's MCP servers stop and the node hosts nothing, so a tool
// call for one of them is refused as fenced and the seat re-establishes;
// no seat attaches here until Unfence. It returns the seats it let go.
func (h *Host) FenceSelf() []string {
	h.mu.Lock()
	h.selfFenced = true
	h.mu.Unlock()
	hosted := h.Hosted()
	out := make([]string, 0, len(hosted))
	for handle, epoch := range hosted {
		h.endTenure(handle, epoch, "node fenced itself")
		out = append(out, handle)
	}
	return out
}

// Unfence lets the node take seats again once it reaches Postgres.
func (h *Host) Unfence() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	was := h.selfFenced
	h.selfFenced = false
	return was
}

// unprovenAlarm is how often a seat whose teardown keeps failing is alarmed
// about again.
const unprovenAlarm = time.Minute

// AlarmUnproven repeats, every unprovenAlarm, the alarm about each seat
// whose teardown here keeps failing: it stays on this node until the
// process restarts, and someone should look.
func (h *Host) AlarmUnproven(now time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for handle, since := range h.unproven {
		if last, ok := h.alarmed[handle]; ok && now.Sub(last) < unprovenAlarm {
			continue
		}
		if h.alarmed == nil {
			h.alarmed = map[string]time.Time{}
		}
		h.alarmed[handle] = now
		h.Log.Error("seat_still_unproven", "seat", handle, "node", h.Incarnation, "for", now.Sub(since).Round(time.Second),
			"action", "its MCP servers would not stop; the seat stays on this node until the process restarts")
	}
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
	catalog := firstPartyTools()
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
		if terr := h.teardown(handle); terr != nil {
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

// teardown stops the seat's MCP servers on this node, if it runs any. A
// session whose Close fails stays, so the next teardown retries it.
func (h *Host) teardown(handle string) error {
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
	h.mu.Lock()
	fenced := h.selfFenced
	h.mu.Unlock()
	if !fenced && h.Hosts(handle, epoch) {
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
