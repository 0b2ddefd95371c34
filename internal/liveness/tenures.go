package liveness

import (
	"context"
	"log/slog"
	"maps"
	"sync"
	"time"

	"github.com/crewlet/crewlet/internal/metrics"
)

// Tenures is the registry of the tenures this node hosts: which seat at
// which epoch, which of them it could not tear down (unproven), and whether
// it takes seats at all (draining, self-fenced). A node refuses work for a
// seat it does not host, and a restarted node hosts nothing, so its
// predecessor's seats re-establish.
type Tenures struct {
	incarnation string
	clock       Clock
	// teardown stops what a tenure runs on this node (its MCP servers); an
	// error keeps the tenure here, unproven, until a later one succeeds.
	teardown func(handle string) error
	log      *slog.Logger
	metrics  *metrics.Metrics

	mu       sync.Mutex
	hosted   map[string]int64
	unproven map[string]time.Time
	// alarmed is when each unproven teardown was last alarmed about.
	alarmed  map[string]time.Time
	draining bool
	// selfFenced is set while the node cannot reach Postgres for longer
	// than it may act for its seats: it hosts nothing and takes no seat.
	selfFenced bool
	// starting is set, for a node's registry, until its first good
	// presence beat: peers count its presence from its registration, and
	// it takes no seat before it has shown it can keep that presence.
	starting bool
	// tenuresRead is the database's time at Reconcile's last read of the
	// tenures begun elsewhere, and sweptAt when it last checked every tenure
	// here; only the presence loop touches them.
	tenuresRead time.Time
	sweptAt     time.Time
}

// NewTenures returns an empty registry for the incarnation. teardown stops
// what a tenure runs here (nil: nothing); metrics may be nil.
func NewTenures(incarnation string, clock Clock, teardown func(handle string) error, log *slog.Logger, m *metrics.Metrics) *Tenures {
	if teardown == nil {
		teardown = func(string) error { return nil }
	}
	return &Tenures{
		incarnation: incarnation, clock: clock, teardown: teardown, log: log, metrics: m,
		hosted: map[string]int64{}, unproven: map[string]time.Time{}, alarmed: map[string]time.Time{},
	}
}

// Begin records that this node hosts the seat at epoch (its Attach bumped
// the epoch to it).
func (t *Tenures) Begin(handle string, epoch int64) {
	t.mu.Lock()
	t.hosted[handle] = epoch
	t.mu.Unlock()
}

// Hosts reports whether this node hosts the seat at epoch.
func (t *Tenures) Hosts(handle string, epoch int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.hosted[handle]
	return ok && e == epoch
}

// ActsFor reports whether this node may act for the seat at epoch: it
// hosts it and has not fenced itself. A self-fenced node acts for no seat,
// even one whose teardown it could not prove.
func (t *Tenures) ActsFor(handle string, epoch int64) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.hosted[handle]
	return !t.selfFenced && ok && e == epoch
}

// Hosted returns the seats this node hosts, with their epochs.
func (t *Tenures) Hosted() map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return maps.Clone(t.hosted)
}

// HostedCount returns how many seats this node hosts.
func (t *Tenures) HostedCount() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.hosted)
}

// Unproven returns, per seat whose teardown keeps failing, for how many
// seconds it has.
func (t *Tenures) Unproven() map[string]int64 {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	out := map[string]int64{}
	for handle, since := range t.unproven {
		out[handle] = int64(now.Sub(since).Seconds())
	}
	return out
}

// SetDraining stops the node taking new seats.
func (t *Tenures) SetDraining() {
	t.mu.Lock()
	t.draining = true
	t.mu.Unlock()
}

// Draining reports whether the node is draining and so takes no new seat.
func (t *Tenures) Draining() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.draining
}

// Starting reports whether the node has not yet had a good presence beat
// and so takes no seat.
func (t *Tenures) Starting() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.starting
}

// SelfFenced reports whether the node fenced itself and so takes no seat.
func (t *Tenures) SelfFenced() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.selfFenced
}

// End stops what the tenure runs here and stops hosting the seat at epoch.
// A teardown that fails keeps the seat hosted here and unproven (the next
// call retries it), because a seat let go while this node may still act
// for it would be half-owned; it reports whether the tenure ended.
func (t *Tenures) End(handle string, epoch int64, reason string) bool {
	if err := t.teardown(handle); err != nil {
		now := t.clock.Now()
		t.mu.Lock()
		if _, ok := t.unproven[handle]; !ok {
			t.unproven[handle] = now
			t.log.Warn("seat_release_unproven", "seat", handle, "epoch", epoch, "reason", reason, "error", err)
		}
		t.mu.Unlock()
		return false
	}
	t.mu.Lock()
	if e, ok := t.hosted[handle]; ok && e == epoch {
		delete(t.hosted, handle)
	}
	if _, ok := t.unproven[handle]; ok {
		delete(t.unproven, handle)
		delete(t.alarmed, handle)
		t.log.Info("seat_release_recovered", "seat", handle, "epoch", epoch)
	}
	t.mu.Unlock()
	t.log.Info("seat_detached", "seat", handle, "epoch", epoch, "reason", reason)
	return true
}

// FenceSelf stops acting for every seat this node hosts: the node could not
// write its presence for long enough that a peer may soon take its seats.
// Every tenure's MCP servers stop and the node hosts nothing, so a tool
// call for one of them is refused as fenced and the seat re-establishes;
// no seat attaches here until Unfence. It returns the seats it let go.
func (t *Tenures) FenceSelf() []string {
	t.mu.Lock()
	t.selfFenced = true
	t.mu.Unlock()
	hosted := t.Hosted()
	out := make([]string, 0, len(hosted))
	for handle, epoch := range hosted {
		t.End(handle, epoch, "node fenced itself")
		out = append(out, handle)
	}
	return out
}

// Unfence records a good presence beat: the node takes seats from its
// first on, and again once it reaches Postgres after it fenced itself. It
// reports whether the node was fenced.
func (t *Tenures) Unfence() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	was := t.selfFenced
	t.selfFenced = false
	t.starting = false
	return was
}

// TenureReader reads, from Postgres, where the tenures of this node's seats
// stand (store.Store).
type TenureReader interface {
	// TenuresBegunElsewhere returns the tenures begun at or after since on
	// any incarnation but the given one (handle → epoch), and the
	// database's time as it read them; a nil since reads only the time.
	TenuresBegunElsewhere(ctx context.Context, incarnation string, since *time.Time) (map[string]int64, time.Time, error)
	// MovedOn returns the seats of hosted (handle → epoch here) whose
	// tenure moved on to another incarnation.
	MovedOn(ctx context.Context, incarnation string, hosted map[string]int64) ([]string, error)
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
// another node now runs. A beat reads only the tenures begun elsewhere
// since the last one, so an idle node's beat costs nothing per seat; once
// every movedOnSweep it checks every seat hosted here too.
//
// Only the presence loop calls it, with the node's presence store, so the
// check never waits behind the seats' own work for a connection.
func (t *Tenures) Reconcile(ctx context.Context, st TenureReader) error {
	var since *time.Time
	if !t.tenuresRead.IsZero() {
		from := t.tenuresRead.Add(-tenureOverlap)
		since = &from
	}
	begun, read, err := st.TenuresBegunElsewhere(ctx, t.incarnation, since)
	if err != nil {
		return err
	}
	t.tenuresRead = read
	moved := t.overtaken(begun)
	if t.clock.Now().Sub(t.sweptAt) >= movedOnSweep {
		hosted := t.Hosted()
		handles, err := st.MovedOn(ctx, t.incarnation, hosted)
		if err != nil {
			t.endMovedOn(moved)
			return err
		}
		for _, handle := range handles {
			moved[handle] = hosted[handle]
		}
		t.sweptAt = t.clock.Now()
	}
	t.endMovedOn(moved)
	return nil
}

// overtaken returns the tenures here (handle → the epoch hosted here) that
// a tenure of begun, at a later epoch, overtook.
func (t *Tenures) overtaken(begun map[string]int64) map[string]int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	moved := map[string]int64{}
	for handle, epoch := range begun {
		if here, ok := t.hosted[handle]; ok && here < epoch {
			moved[handle] = here
		}
	}
	return moved
}

// endMovedOn ends the tenures here that moved on (handle → epoch).
func (t *Tenures) endMovedOn(moved map[string]int64) {
	for handle, epoch := range moved {
		t.log.Warn("seat_fenced", "seat", handle, "epoch", epoch, "node", t.incarnation, "reason", "its tenure moved on")
		t.metrics.TenureMovedOn()
		t.End(handle, epoch, "tenure moved on")
	}
}

// unprovenAlarm is how often a seat whose teardown keeps failing is alarmed
// about again.
const unprovenAlarm = time.Minute

// AlarmUnproven repeats, every unprovenAlarm, the alarm about each seat
// whose teardown here keeps failing: it stays on this node until the
// process restarts, and someone should look.
func (t *Tenures) AlarmUnproven() {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for handle, since := range t.unproven {
		if last, ok := t.alarmed[handle]; ok && now.Sub(last) < unprovenAlarm {
			continue
		}
		t.alarmed[handle] = now
		t.log.Error("seat_still_unproven", "seat", handle, "node", t.incarnation, "for", now.Sub(since).Round(time.Second),
			"action", "its MCP servers would not stop; the seat stays on this node until the process restarts")
	}
}
