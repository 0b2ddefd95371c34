// Package liveness owns a worker node's side of seat tenure: the presence
// beat that keeps the node's row in Postgres fresh, the failure detector
// that claims dead peers and tells their seats, self-fencing when the node
// cannot beat, and the registry of the tenures the node hosts. Liveness is
// the node's, never the seat's: nothing here runs per seat. Its rules read
// an injected Clock; docs/architecture.md ("Tenure: which node runs a
// seat") states them.
package liveness

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
)

// Store is what the presence loop writes and reads in Postgres
// (store.Store, on the loop's own pool).
type Store interface {
	// NodeHeartbeat stamps the presence row and returns whether someone
	// asked the node to drain.
	NodeHeartbeat(ctx context.Context, incarnation string, held int, unproven map[string]int64) (draining bool, err error)
	// ClaimDeadNodes claims, for claimer, every other incarnation silent
	// for longer than timeout (by the database clock) that no node claimed.
	ClaimDeadNodes(ctx context.Context, claimer string, timeout time.Duration) ([]string, error)
	// SeatsOn returns the seats whose current tenure is on the incarnation.
	SeatsOn(ctx context.Context, incarnation string) ([]string, error)
	// UnclaimNode gives a claim back for the next beat's detector.
	UnclaimNode(ctx context.Context, incarnation string) error
	TenureReader
}

// Witness is where nodes tell each other, outside Postgres, whether their
// presence writes reach it (mailbox.Mailbox, in Redis): a node that cannot
// write Postgres reads it to learn whether a peer can, which is the only
// way a peer could claim it.
type Witness interface {
	// ReportStore records whether this node's latest presence write, sent
	// sentAgo before the call, reached Postgres and returns every peer's
	// latest report younger than forgetAfter, each saying how long ago its
	// write was sent and its run of writes that reached Postgres (reports
	// at most runGap apart) began, by the witness's one clock.
	ReportStore(ctx context.Context, incarnation string, reached bool, sentAgo, runGap, forgetAfter time.Duration) ([]mailbox.StoreReport, error)
}

// Watchdog is told each time the presence loop turns (watchdog.Watchdog).
type Watchdog interface {
	Beat(loop string)
	Forget(loop string)
}

// presenceLoop is the presence loop's name to the watchdog.
const presenceLoop = "presence"

// Config is what a node's liveness is built from.
type Config struct {
	Incarnation string
	// Timeout is nodes.heartbeat_timeout: a peer silent this long is
	// claimed, and every other span here is a fraction of it.
	Timeout time.Duration
	Clock   Clock
	Store   Store
	// Witness may be nil: a node without one fences itself whenever it
	// cannot write its presence, as one cut off alone must.
	Witness  Witness
	Watchdog Watchdog
	// Teardown stops what a tenure runs on this node (see NewTenures).
	Teardown func(handle string) error
	// TellHostLost tells each seat that its host, the incarnation, is lost.
	// It reports false when a signal failed, so the claim is given back and
	// tried again.
	TellHostLost func(incarnation string, seats []string) bool
	Log          *slog.Logger
	// Metrics may be nil.
	Metrics *metrics.Metrics
}

// Node is one incarnation's liveness: every beat (a third of the heartbeat
// timeout) it stamps its presence row, tells the witness whether that
// reached Postgres, ends the tenures here that moved on, and, once its own
// writes and reports have succeeded for a whole timeout, runs the failure
// detector over its peers. Past half the timeout without a good beat it
// fences itself, before any peer may claim it, when the witness shows a
// peer reaching Postgres after this node's own first failed write (or
// cannot be read); otherwise the outage is one every node shares, during
// which nobody can claim anybody, and it keeps its seats.
type Node struct {
	// Tenures is the registry of the tenures this node hosts.
	Tenures *Tenures

	cfg Config
	// lastBeat is when the last presence write that succeeded was sent, in
	// Unix nanoseconds: the presence loop writes it, a metrics scrape reads
	// it from another goroutine.
	lastBeat       atomic.Int64
	drainRequested chan struct{}
	drainOnce      sync.Once
	// tells are the host_lost signals in flight, sent off the loop.
	tells sync.WaitGroup
	// goodSince is when the unbroken run of good beats (a presence write
	// and its report to the witness) this node is in began, lastGood when
	// its latest good beat's report was sent; zero before the first. Only
	// the presence loop reads and writes them.
	goodSince, lastGood time.Time
	// firstFailed is when the first failed presence write since the last
	// good one was sent; zero while the last write succeeded. Only the
	// presence loop reads and writes it.
	firstFailed time.Time
	// riding is set while the node keeps its seats through a Postgres
	// outage it shares with every peer; only the presence loop touches it.
	riding bool
}

// New returns the liveness of a node incarnation, hosting nothing yet and
// taking no seat before its first good beat.
func New(cfg Config) *Node {
	n := &Node{
		Tenures: NewTenures(cfg.Incarnation, cfg.Clock, cfg.Teardown, cfg.Log, cfg.Metrics),
		cfg:     cfg, drainRequested: make(chan struct{}),
	}
	n.Tenures.starting = true
	n.lastBeat.Store(cfg.Clock.Now().UnixNano())
	return n
}

// Interval is the presence loop's cadence: a third of the heartbeat
// timeout, so a peer sees two beats fail before it may claim the node.
func (n *Node) Interval() time.Duration { return n.cfg.Timeout / 3 }

// FenceAfter is how long a node goes without writing its presence before
// it stops acting for its seats: half the heartbeat timeout, so it has
// stopped well before a peer may claim it (at the whole timeout).
func (n *Node) FenceAfter() time.Duration { return n.cfg.Timeout / 2 }

// mayClaim reports whether the failure detector may run: only once this
// node's own beats have succeeded, without a gap, for a whole heartbeat
// timeout. Peers claim only through Postgres, so while nobody can write it
// nobody can beat, and a row that went stale then says nothing about its
// node; the detector's own good writes are the evidence that the store was
// writable, and a peer is claimed only after it has had a whole timeout of
// them to beat again. A good beat includes its report to the witness, so a
// node that might claim is always one the witness shows reaching Postgres
// (see mayRide). A node cut off alone changes nothing here: its peers' runs
// stay unbroken and they claim it as before.
func (n *Node) mayClaim() bool {
	return !n.goodSince.IsZero() && n.cfg.Clock.Now().Sub(n.goodSince) >= n.cfg.Timeout
}

// SinceLastBeat is how long ago the last presence write that succeeded
// was sent.
func (n *Node) SinceLastBeat() time.Duration {
	return n.cfg.Clock.Now().Sub(time.Unix(0, n.lastBeat.Load()))
}

// DrainRequested is closed when someone asks this node to drain through
// its presence row (POST /nodes/{id}/drain).
func (n *Node) DrainRequested() <-chan struct{} { return n.drainRequested }

// Start counts the node's presence from now and beats once.
func (n *Node) Start(ctx context.Context) {
	n.lastBeat.Store(n.cfg.Clock.Now().UnixNano())
	n.Beat(ctx)
}

// Run beats every Interval until stop is closed, then waits for the
// host_lost signals still in flight.
func (n *Node) Run(stop <-chan struct{}) {
	defer n.tells.Wait()
	defer n.cfg.Watchdog.Forget(presenceLoop)
	t := n.cfg.Clock.NewTicker(n.Interval())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C():
		}
		n.Beat(context.Background())
	}
}

// Beat is one presence beat. A node that cannot write its presence keeps
// trying; once it has gone FenceAfter without, it fences itself, before any
// peer may claim it, if the witness shows a peer that reached Postgres
// after this node's first failed write.
func (n *Node) Beat(ctx context.Context) {
	n.cfg.Watchdog.Beat(presenceLoop)
	sent := n.cfg.Clock.Now()
	bctx, cancel := context.WithTimeout(ctx, n.Interval())
	defer cancel()
	draining, err := n.writePresence(bctx)
	if err != nil {
		n.cfg.Metrics.PresenceFailed()
		n.goodSince = time.Time{}
		if n.firstFailed.IsZero() {
			n.firstFailed = sent
		}
		since := n.SinceLastBeat()
		n.cfg.Log.Warn("node_heartbeat_failed", "error", err, "since_last", since.Round(time.Millisecond))
		sinceFirstFailed := n.cfg.Clock.Now().Sub(n.firstFailed)
		peers, werr := n.report(ctx, false, sent)
		if since > n.FenceAfter() {
			n.outage(ctx, since, n.judge(peers, werr, sinceFirstFailed))
		}
		return
	}
	n.wrote(sent)
	reportSent := n.cfg.Clock.Now()
	if _, werr := n.report(ctx, true, sent); werr != nil {
		n.cfg.Log.Warn("node_witness_failed", "error", werr)
		n.goodSince = time.Time{}
	} else {
		// The run counts from when this beat's report returned, so a peer
		// that reads the witness sees the run from its first beat on; it
		// is broken by a gap past FenceAfter between the reports' sends.
		done := n.cfg.Clock.Now()
		if n.goodSince.IsZero() || done.Sub(n.lastGood) > n.FenceAfter() {
			n.goodSince = done
		}
		n.lastGood = reportSent
	}
	if n.Tenures.Unfence() {
		n.cfg.Log.Info("node_unfenced", "node", n.cfg.Incarnation)
	}
	if draining {
		n.drainOnce.Do(func() { close(n.drainRequested) })
	}
	if err := n.Tenures.Reconcile(bctx, n.cfg.Store); err != nil {
		n.cfg.Log.Warn("node_reconcile_failed", "error", err)
	}
	n.Tenures.AlarmUnproven()
	if n.mayClaim() {
		n.detect(bctx)
	}
}

// writePresence stamps the node's presence row with what it hosts; it
// returns whether someone asked the node to drain.
func (n *Node) writePresence(ctx context.Context) (draining bool, err error) {
	return n.cfg.Store.NodeHeartbeat(ctx, n.cfg.Incarnation, n.Tenures.HostedCount(), n.Tenures.Unproven())
}

// wrote records a presence write, sent at sent, that reached Postgres.
// It counts from when the write was sent, not when it returned: the row
// may have been stamped that early, and peers count from the stamp.
func (n *Node) wrote(sent time.Time) {
	n.lastBeat.Store(sent.UnixNano())
	n.firstFailed = time.Time{}
	if n.riding {
		n.riding = false
		n.cfg.Log.Info("node_store_back", "node", n.cfg.Incarnation, "seats", n.Tenures.HostedCount())
	}
}

// report tells the witness whether this beat's presence write, sent at
// sent, reached Postgres and returns the peers' reports. It has its own
// deadline, so a presence write that used up the beat's still leaves time
// to ask.
func (n *Node) report(ctx context.Context, reached bool, sent time.Time) ([]mailbox.StoreReport, error) {
	if n.cfg.Witness == nil {
		return nil, errors.New("no witness configured")
	}
	wctx, cancel := context.WithTimeout(ctx, n.Interval()/2)
	defer cancel()
	// The witness judges a peer's run by its writes' sends, the detector
	// by its reports' sends (mayClaim); a write takes at most a beat, so
	// with a beat more of gap the witness never sees a run begin later
	// than the detector counts it.
	runGap := n.FenceAfter() + n.Interval()
	return n.cfg.Witness.ReportStore(wctx, n.cfg.Incarnation, reached, n.cfg.Clock.Now().Sub(sent), runGap, witnessMemory*n.cfg.Timeout)
}

// witnessMemory is how many heartbeat timeouts a silent node's report is
// kept: far past the span any rule reads (FenceAfter).
const witnessMemory = 20

// outage acts, past FenceAfter without presence, on the verdict of
// judge: the node keeps its seats (every peer is as cut off from Postgres
// as it is, so none can claim it), or fences itself. Before it fences on
// a peer's word it tries its own presence write once more, for as long as
// the earliest claim allows: a write that lands means the outage just
// ended for this node too (its last write was still waiting as Postgres
// came back, while a peer's went through), not that it is cut off alone.
func (n *Node) outage(ctx context.Context, since time.Duration, v verdict) {
	if v.why != nil && v.recheck > 0 && n.Tenures.HostedCount() > 0 {
		sent := n.cfg.Clock.Now()
		cctx, cancel := context.WithTimeout(ctx, v.recheck)
		_, err := n.writePresence(cctx)
		cancel()
		if err == nil {
			n.wrote(sent)
			n.cfg.Log.Info("node_store_reached_on_recheck", "node", n.cfg.Incarnation, "without_presence", since.Round(time.Millisecond),
				"had_cause_to_fence", v.why.Error())
			return
		}
	}
	if v.why != nil {
		n.fenceSelf(since, v.why)
		return
	}
	if !n.riding && n.Tenures.HostedCount() > 0 {
		n.riding = true
		n.cfg.Metrics.OutageRidden()
		n.cfg.Log.Warn("node_riding_out_store_outage", "node", n.cfg.Incarnation, "seats", n.Tenures.HostedCount(),
			"without_presence", since.Round(time.Millisecond))
	}
}

// verdict is judge's answer: why the node may not keep its seats (nil: it
// may), and how long it may still try its own write before it must have
// fenced (0: no time left).
type verdict struct {
	why     error
	recheck time.Duration
}

// fenceMargin is how long before the earliest moment a peer could claim
// it a node has fenced itself: its teardown and the clocks' skew.
func (n *Node) fenceMargin() time.Duration { return n.Interval() / 2 }

// judge decides, for a node that cannot write its presence, whether it
// keeps its seats. Peers claim only through Postgres, so the question is
// whether any peer reached it after this node's own first failed write
// (sent sinceFirstFailed before the witness was read): a peer's report
// says when its write was sent by the witness's clock, so the answer does
// not depend on when in its interval each node beats. A peer's last good
// write before that proves nothing: the outage had not begun for this
// node then either. A witness that cannot be read proves nothing, and the
// node fences as one cut off alone.
//
// When a peer did reach Postgres since, the earliest it could claim this
// node is a whole timeout after the later of this node's last good write
// (its row must go stale) and the start of that peer's run of good writes
// (the detector waits a timeout of them, mayClaim); the node may try its
// own write until fenceMargin before that.
func (n *Node) judge(peers []mailbox.StoreReport, werr error, sinceFirstFailed time.Duration) verdict {
	if werr != nil {
		return n.claimable(fmt.Errorf("the witness cannot be read: %w", werr), nil)
	}
	var back *mailbox.StoreReport
	for i, p := range peers {
		if !p.Reached || p.SentAgo > sinceFirstFailed {
			continue
		}
		// The peer whose run began earliest may claim first; a run the
		// witness does not know may be as old as any.
		if back == nil || !p.RunKnown || (back.RunKnown && p.RunAgo > back.RunAgo) {
			back = &peers[i]
		}
	}
	if back == nil {
		return verdict{}
	}
	return n.claimable(fmt.Errorf("peer %s reached Postgres %v ago, after this node's first failed write %v ago",
		back.Incarnation, back.SentAgo.Round(time.Millisecond), sinceFirstFailed.Round(time.Millisecond)), back)
}

// claimable is the verdict to fence, for why, with the time left to try
// the node's own write: until fenceMargin before the earliest claim, by
// the peer back on Postgres whose run began earliest (nil: any peer, with
// a run as old as any).
func (n *Node) claimable(why error, back *mailbox.StoreReport) verdict {
	staleFor := n.SinceLastBeat()
	if back != nil && back.RunKnown {
		staleFor = min(staleFor, back.RunAgo)
	}
	claimIn := n.cfg.Timeout - staleFor
	return verdict{
		why:     fmt.Errorf("%w; a peer may claim this node in %v", why, claimIn.Round(time.Millisecond)),
		recheck: min(n.Interval(), max(claimIn-n.fenceMargin(), 0)),
	}
}

// fenceSelf stops the node acting for every seat it hosts (their MCP
// servers stop, their tool calls are refused) and tells each seat its host
// is gone, so it re-establishes on a node that can reach the store.
func (n *Node) fenceSelf(since time.Duration, why error) {
	n.riding = false
	seats := n.Tenures.FenceSelf()
	if len(seats) == 0 {
		return
	}
	n.cfg.Metrics.SelfFenced()
	n.cfg.Log.Error("node_fenced_itself", "node", n.cfg.Incarnation, "seats", len(seats),
		"without_presence", since.Round(time.Millisecond), "fence_after", n.FenceAfter(), "because", why.Error())
	n.tells.Add(1)
	go func() {
		defer n.tells.Done()
		n.cfg.TellHostLost(n.cfg.Incarnation, seats)
	}()
}

// detect is the failure detector, run only when mayClaim: it claims every
// peer incarnation that stopped or stopped beating (one compare-and-set per
// row in Postgres, so exactly one node acts) and tells that incarnation's
// seats their host is gone. Per beat it costs one statement over the nodes; per failure, one
// signal per seat of the dead node, sent off the presence loop.
func (n *Node) detect(ctx context.Context) {
	dead, err := n.cfg.Store.ClaimDeadNodes(ctx, n.cfg.Incarnation, n.cfg.Timeout)
	if err != nil {
		n.cfg.Log.Warn("node_detector_failed", "error", err)
		return
	}
	for _, incarnation := range dead {
		seats, err := n.cfg.Store.SeatsOn(ctx, incarnation)
		if err != nil {
			n.cfg.Log.Warn("node_detector_failed", "dead", incarnation, "error", err)
			n.unclaim(incarnation)
			continue
		}
		n.cfg.Log.Warn("node_claimed", "dead", incarnation, "by", n.cfg.Incarnation, "seats", len(seats))
		n.cfg.Metrics.NodeClaimed()
		if len(seats) == 0 {
			continue
		}
		n.tells.Add(1)
		go func() {
			defer n.tells.Done()
			if !n.cfg.TellHostLost(incarnation, seats) {
				n.unclaim(incarnation)
			}
		}()
	}
}

func (n *Node) unclaim(incarnation string) {
	ctx, cancel := context.WithTimeout(context.Background(), n.cfg.Timeout)
	defer cancel()
	if err := n.cfg.Store.UnclaimNode(ctx, incarnation); err != nil {
		n.cfg.Log.Warn("node_unclaim_failed", "dead", incarnation, "error", err)
	}
}
