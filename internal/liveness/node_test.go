package liveness

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/mailbox"
)

// presence is the presence store as the rules see it: its writes succeed
// unless it is down, and its detector claims whatever the test marks dead.
type presence struct {
	mu       sync.Mutex
	down     bool
	draining bool
	writes   int
	written  chan struct{}
	// dead is what the next ClaimDeadNodes claims; seats what SeatsOn finds.
	dead      []string
	seats     map[string][]string
	seatsErr  error
	claims    int
	unclaimed []string
}

func (p *presence) NodeHeartbeat(context.Context, string, int, map[string]int64) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false, errors.New("connection refused")
	}
	p.writes++
	if p.written != nil {
		p.written <- struct{}{}
	}
	return p.draining, nil
}

func (p *presence) ClaimDeadNodes(context.Context, string, time.Duration) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.claims++
	dead := p.dead
	p.dead = nil
	return dead, nil
}

func (p *presence) SeatsOn(_ context.Context, incarnation string) ([]string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seats[incarnation], p.seatsErr
}

func (p *presence) UnclaimNode(_ context.Context, incarnation string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unclaimed = append(p.unclaimed, incarnation)
	return nil
}

func (p *presence) TenuresBegunElsewhere(context.Context, string, *time.Time) (map[string]int64, time.Time, error) {
	return nil, time.Time{}, nil
}

func (p *presence) MovedOn(context.Context, string, map[string]int64) ([]string, error) {
	return nil, nil
}

func (p *presence) set(f func(p *presence)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(p)
}

// peerWitness is the witness of a node with one peer that always reaches
// Postgres: whatever the node's own store does, it is cut off alone.
// down makes the witness unreachable too.
type peerWitness struct {
	mu   sync.Mutex
	down bool
}

func (w *peerWitness) ReportStore(context.Context, string, bool, time.Duration, time.Duration, time.Duration) ([]mailbox.StoreReport, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.down {
		return nil, errors.New("redis: connection refused")
	}
	return []mailbox.StoreReport{{Incarnation: "n2:bbbb", Reached: true}}, nil
}

type noWatchdog struct{}

func (noWatchdog) Beat(string)   {}
func (noWatchdog) Forget(string) {}

// told is one TellHostLost call.
type told struct {
	incarnation string
	seats       []string
}

const timeout = 3 * time.Second

type bundle struct {
	clock   *FakeClock
	store   *presence
	witness *peerWitness
	node    *Node
	td      *teardowns
	// told receives every TellHostLost call; tellFails makes them fail.
	told      chan told
	tellFails bool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{clock: NewFakeClock(time.Unix(1_000_000, 0)), store: &presence{seats: map[string][]string{}},
		witness: &peerWitness{}, td: newTeardowns(), told: make(chan told, 16)}
	b.node = New(Config{
		Incarnation: "n1:aaaa", Timeout: timeout, Clock: b.clock, Store: b.store, Witness: b.witness, Watchdog: noWatchdog{},
		Teardown: b.td.stop, Log: discard,
		TellHostLost: func(incarnation string, seats []string) bool {
			b.told <- told{incarnation, seats}
			return !b.tellFails
		},
	})
	t.Cleanup(b.node.tells.Wait)
	return b
}

// beat advances the clock by d and beats once, the write failing when down.
func (b *bundle) beat(d time.Duration, down bool) {
	b.clock.Advance(d)
	b.store.set(func(p *presence) { p.down = down })
	b.node.Beat(context.Background())
}

func (b *bundle) nextTold(t *testing.T) told {
	t.Helper()
	select {
	case got := <-b.told:
		return got
	case <-time.After(10 * time.Second):
		t.Fatal("no host_lost sent")
		return told{}
	}
}

// The presence loop beats a third of the heartbeat timeout apart, once
// per period the clock passes.
func TestPresenceLoopBeatsEveryThirdOfTheTimeout(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.store.written = make(chan struct{})
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); b.node.Run(stop) }()
	defer func() { close(stop); <-done }()

	if got := b.clock.WaitForTicker(); got != timeout/3 {
		t.Fatalf("presence loop ticks every %s; want a third of the %s timeout", got, timeout)
	}
	for i := range 3 {
		b.clock.Advance(timeout / 3)
		select {
		case <-b.store.written:
		case <-time.After(10 * time.Second):
			t.Fatalf("no presence write after period %d", i+1)
		}
	}
	if b.store.writes != 3 {
		t.Fatalf("%d presence writes after three periods; want 3", b.store.writes)
	}
}

// A node fences itself once a failed beat finds it past half the timeout
// without a good write, and takes seats again after its next good one.
func TestSelfFenceAfterHalfTheTimeoutWithoutAGoodBeat(t *testing.T) {
	t.Parallel()
	type step struct {
		advance time.Duration
		down    bool
	}
	cases := []struct {
		name       string
		steps      []step
		wantFenced bool
	}{
		{"every beat good", []step{{time.Second, false}, {time.Second, false}, {time.Second, false}}, false},
		{"one beat failed", []step{{time.Second, true}}, false},
		{"failed at exactly half", []step{{timeout / 2, true}}, false},
		{"failed past half", []step{{time.Second, true}, {time.Second, true}}, true},
		{"failed past half in one late beat", []step{{timeout/2 + time.Millisecond, true}}, true},
		{"a good beat in between", []step{{time.Second, true}, {time.Second / 4, false}, {time.Second, true}}, false},
		{"a good beat after the fence", []step{{time.Second, true}, {time.Second, true}, {time.Second, false}}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			b.node.Start(context.Background())
			b.node.Tenures.Begin("cto", 7)
			for _, s := range tc.steps {
				b.beat(s.advance, s.down)
			}
			if got := b.node.Tenures.SelfFenced(); got != tc.wantFenced {
				t.Fatalf("self-fenced = %v; want %v", got, tc.wantFenced)
			}
			if tc.wantFenced && b.node.Tenures.ActsFor("cto", 7) {
				t.Fatal("a self-fenced node still acts for cto")
			}
		})
	}
}

// Fencing itself lets every seat go (their children stop) and tells each
// its host is lost, once; the next good beat unfences the node.
func TestSelfFenceTellsItsSeatsAndAGoodBeatUnfences(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.node.Start(context.Background())
	b.node.Tenures.Begin("cto", 7)
	b.node.Tenures.Begin("cfo", 2)
	b.beat(time.Second, true)
	b.beat(time.Second, true)
	got := b.nextTold(t)
	slices.Sort(got.seats)
	if got.incarnation != "n1:aaaa" || strings.Join(got.seats, ",") != "cfo,cto" {
		t.Fatalf("told %+v; want host_lost of n1:aaaa to cfo and cto", got)
	}
	if b.td.calls["cto"] != 1 || b.td.calls["cfo"] != 1 || b.node.Tenures.HostedCount() != 0 {
		t.Fatalf("teardowns %v, %d hosted; want each stopped once, none hosted", b.td.calls, b.node.Tenures.HostedCount())
	}
	// A fenced node that still cannot write has nothing left to let go.
	b.beat(time.Second, true)
	b.node.tells.Wait()
	if len(b.told) != 0 {
		t.Fatalf("a second failed beat told the seats again: %+v", <-b.told)
	}
	b.beat(time.Second, false)
	if b.node.Tenures.SelfFenced() {
		t.Fatal("still self-fenced after a good beat")
	}
}

func TestSinceLastBeatCountsFromTheLastGoodWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.node.Start(context.Background())
	b.beat(time.Second, false)
	b.beat(time.Second, true)
	b.clock.Advance(200 * time.Millisecond)
	if got := b.node.SinceLastBeat(); got != 1200*time.Millisecond {
		t.Fatalf("SinceLastBeat = %s; want 1.2s (since the last good write)", got)
	}
}

func TestDetector(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		seats         []string
		seatsErr      error
		tellFails     bool
		wantTold      bool
		wantUnclaimed bool
	}{
		{"tells the dead peer's seats", []string{"cto", "cfo"}, nil, false, true, false},
		{"a dead peer with no seats needs nothing", nil, nil, false, false, false},
		{"a failed signal gives the claim back", []string{"cto"}, nil, true, true, true},
		{"an unreadable peer gives the claim back", nil, errors.New("timeout"), false, false, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			b.tellFails = tc.tellFails
			b.store.set(func(p *presence) {
				p.dead = []string{"n2:bbbb"}
				p.seats["n2:bbbb"] = tc.seats
				p.seatsErr = tc.seatsErr
			})
			b.node.Start(context.Background())
			for range 3 {
				b.beat(timeout/3, false)
			}
			if tc.wantTold {
				if got := b.nextTold(t); got.incarnation != "n2:bbbb" || !slices.Equal(got.seats, tc.seats) {
					t.Fatalf("told %+v; want n2:bbbb's seats %v", got, tc.seats)
				}
			}
			b.node.tells.Wait()
			if !tc.wantTold && len(b.told) != 0 {
				t.Fatalf("told %+v; want nothing", <-b.told)
			}
			if got := slices.Equal(b.store.unclaimed, []string{"n2:bbbb"}); got != tc.wantUnclaimed {
				t.Fatalf("unclaimed %v; want given back: %v", b.store.unclaimed, tc.wantUnclaimed)
			}
		})
	}
}

// The detector runs only once the node's own writes have succeeded for a
// whole timeout without a gap: a node that cannot reach the store claims
// nobody, and one that just reached it again first gives its peers a whole
// timeout to beat.
func TestDetectorWaitsForAWholeTimeoutOfGoodWrites(t *testing.T) {
	t.Parallel()
	type step struct {
		advance time.Duration
		down    bool
	}
	third := timeout / 3
	cases := []struct {
		name       string
		steps      []step
		wantClaims int
	}{
		{"started, not yet a timeout", []step{{third, false}, {third, false}}, 0},
		{"a timeout of good writes", []step{{third, false}, {third, false}, {third, false}}, 1},
		{"every beat after it", []step{{third, false}, {third, false}, {third, false}, {third, false}}, 2},
		{"a failed write starts the run again", []step{{third, false}, {third, false}, {third, true}, {third, false}, {third, false}}, 0},
		{"a timeout after the failed write", []step{{third, false}, {third, true}, {third, false}, {third, false}, {third, false}, {third, false}}, 1},
		{"a stalled loop starts the run again", []step{{third, false}, {timeout, false}, {third, false}}, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := setup(t)
			b.node.Start(context.Background())
			for _, s := range tc.steps {
				b.beat(s.advance, s.down)
			}
			if b.store.claims != tc.wantClaims {
				t.Fatalf("%d detector runs; want %d", b.store.claims, tc.wantClaims)
			}
		})
	}
}

func TestDrainRequestedClosesOnceTheRowAsks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.node.Start(context.Background())
	select {
	case <-b.node.DrainRequested():
		t.Fatal("drain requested before anyone asked")
	default:
	}
	b.store.set(func(p *presence) { p.draining = true })
	b.beat(time.Second, false)
	b.beat(time.Second, false)
	select {
	case <-b.node.DrainRequested():
	default:
		t.Fatal("drain not requested after the row asked")
	}
}

// company is one presence table two nodes share, as Postgres holds it:
// a write stamps the row with the store's time (here the one fake clock)
// and unclaims it, and the detector claims every other unclaimed row
// silent for longer than the timeout. down cuts the store off for every
// node, cut for one. Beside it is the witness the nodes share, as Redis
// holds it, stamped by the same clock; witnessCut cuts a node off it.
type company struct {
	mu         sync.Mutex
	clock      *FakeClock
	down       bool
	cut        map[string]bool
	witnessCut map[string]bool
	// failOnce fails a node's next store call only, as a write that timed
	// out the moment the store came back.
	failOnce map[string]bool
	// frozen holds every node's presence writes (a SIGSTOPped Postgres),
	// frozenFor one node's (a network black hole), until their deadline or
	// the thaw; hung is where a held write is handed to the driver.
	frozen    bool
	frozenFor map[string]bool
	hung      map[string]chan hungWrite
	// slowUntil keeps holding a node's writes after a thaw until then, as
	// a store that just thawed serves its backlog of connections first.
	slowUntil map[string]time.Time
	reports   map[string]report
	beat      map[string]time.Time
	claimed   map[string]string
	// claims is every claim made, "claimer>claimed@seconds since start".
	claims []string
	start  time.Time
}

// report is one node's latest word in the witness: whether its write
// reached the store, when that write was sent, and when its run of writes
// that reached the store began.
type report struct {
	reached bool
	at, run time.Time
}

// member is one node's connection to the company's store.
type member struct {
	c   *company
	inc string
}

// hungWrite is a presence write waiting on a frozen store: it fails at
// its deadline, or lands when the store thaws first.
type hungWrite struct {
	deadline time.Time
	release  chan error
}

// hang holds a presence write while the store is frozen for the node, as
// a stopped Postgres holds every query, until the driver (phased.run)
// releases it: with an error at the write's deadline, or with none when
// the store thaws first. Without a driver nothing hangs.
func (m member) hang(ctx context.Context) error {
	m.c.mu.Lock()
	ch := m.c.hung[m.inc]
	if ch == nil || !m.c.holds(m.inc) {
		m.c.mu.Unlock()
		return nil
	}
	dl, _ := ctx.Deadline()
	w := hungWrite{deadline: m.c.clock.Now().Add(time.Until(dl).Round(phaseStep)), release: make(chan error, 1)}
	m.c.mu.Unlock()
	ch <- w
	return <-w.release
}

// holds reports whether the store holds the node's writes now.
func (c *company) holds(inc string) bool {
	return c.frozen || c.frozenFor[inc] || c.clock.Now().Before(c.slowUntil[inc])
}

func (m member) reach() error {
	if m.c.down || m.c.cut[m.inc] {
		return errors.New("connection refused")
	}
	if m.c.failOnce[m.inc] {
		delete(m.c.failOnce, m.inc)
		return errors.New("timeout: context deadline exceeded")
	}
	return nil
}

func (m member) NodeHeartbeat(ctx context.Context, _ string, _ int, _ map[string]int64) (bool, error) {
	if err := m.hang(ctx); err != nil {
		return false, err
	}
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if err := m.reach(); err != nil {
		return false, err
	}
	m.c.beat[m.inc] = m.c.clock.Now()
	delete(m.c.claimed, m.inc)
	return false, nil
}

func (m member) ClaimDeadNodes(_ context.Context, claimer string, timeout time.Duration) ([]string, error) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if err := m.reach(); err != nil {
		return nil, err
	}
	now := m.c.clock.Now()
	var dead []string
	for inc, at := range m.c.beat {
		if inc == claimer || m.c.claimed[inc] != "" || !at.Before(now.Add(-timeout)) {
			continue
		}
		m.c.claimed[inc] = claimer
		m.c.claims = append(m.c.claims, fmt.Sprintf("%s>%s@%s", claimer, inc, now.Sub(m.c.start)))
		dead = append(dead, inc)
	}
	return dead, nil
}

func (m member) SeatsOn(_ context.Context, incarnation string) ([]string, error) {
	return []string{"seat-on-" + incarnation}, m.reach()
}

func (m member) UnclaimNode(context.Context, string) error { return nil }

func (m member) ReportStore(_ context.Context, incarnation string, reached bool, sentAgo, runGap, _ time.Duration) ([]mailbox.StoreReport, error) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	if m.c.witnessCut[incarnation] {
		return nil, errors.New("redis: connection refused")
	}
	now := m.c.clock.Now()
	sent := now.Add(-sentAgo)
	r := report{reached: reached, at: sent, run: sent}
	if prev, ok := m.c.reports[incarnation]; ok && reached && prev.reached && sent.Sub(prev.at) <= runGap {
		r.run = prev.run
	}
	m.c.reports[incarnation] = r
	var peers []mailbox.StoreReport
	for inc, r := range m.c.reports {
		if inc != incarnation {
			peers = append(peers, mailbox.StoreReport{Incarnation: inc, Reached: r.reached, SentAgo: now.Sub(r.at),
				RunAgo: now.Sub(r.run), RunKnown: r.reached})
		}
	}
	return peers, nil
}

func (m member) TenuresBegunElsewhere(context.Context, string, *time.Time) (map[string]int64, time.Time, error) {
	return nil, time.Time{}, m.reach()
}

func (m member) MovedOn(context.Context, string, map[string]int64) ([]string, error) {
	return nil, m.reach()
}

// twoNodes starts n1 and n2 on one company, each hosting a seat, and beats
// both for a whole timeout so that either may claim the other.
func twoNodes(t *testing.T) (*company, *Node, *Node, func()) {
	t.Helper()
	clock := NewFakeClock(time.Unix(1_000_000, 0))
	c := newCompany(clock)
	n1, n2 := c.node(t, "n1:aaaa", "cto"), c.node(t, "n2:bbbb", "cfo")
	// step is one beat of each, a third of the timeout on; n1 beats first,
	// so a claim it makes at a step lands before n2's beat at that step.
	step := func() {
		clock.Advance(timeout / 3)
		n1.Beat(context.Background())
		n2.Beat(context.Background())
	}
	for range 3 {
		step()
	}
	if !n1.mayClaim() || !n2.mayClaim() {
		t.Fatal("after a timeout of good beats a node may not claim")
	}
	return c, n1, n2, step
}

func newCompany(clock *FakeClock) *company {
	return &company{clock: clock, cut: map[string]bool{}, witnessCut: map[string]bool{}, failOnce: map[string]bool{},
		frozenFor: map[string]bool{}, hung: map[string]chan hungWrite{}, slowUntil: map[string]time.Time{},
		reports: map[string]report{}, beat: map[string]time.Time{}, claimed: map[string]string{}, start: clock.Now()}
}

// node starts an incarnation on the company, hosting seat.
func (c *company) node(t *testing.T, inc, seat string) *Node {
	t.Helper()
	n := New(Config{
		Incarnation: inc, Timeout: timeout, Clock: c.clock, Store: member{c, inc}, Witness: member{c, inc}, Watchdog: noWatchdog{},
		Teardown: func(string) error { return nil }, Log: discard,
		TellHostLost: func(string, []string) bool { return true },
	})
	t.Cleanup(n.tells.Wait)
	n.Start(context.Background())
	n.Tenures.Begin(seat, 1)
	return n
}

func (c *company) set(f func(c *company)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// stepsUntilFenced steps the company n times and returns the step at which
// node fenced itself (-1: never), failing the test if a claim came first.
func stepsUntilFenced(t *testing.T, c *company, node *Node, n int, step func()) int {
	t.Helper()
	fencedAt := -1
	for i := range n {
		step()
		if fencedAt < 0 && node.Tenures.SelfFenced() {
			fencedAt = i
			if got := c.claimsSoFar(); len(got) != 0 {
				t.Fatalf("claims %v before %s fenced itself", got, node.cfg.Incarnation)
			}
		}
	}
	return fencedAt
}

func (c *company) claimsSoFar() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.claims)
}

// When the store is down for every node, nobody claims anybody during the
// outage; when it returns, a node that is slower to beat again than its
// peer is not claimed for it, and one that does not beat again is claimed
// a whole timeout after the store returned, not at the peer's first beat.
func TestGlobalOutageClaimsNobodyAndGivesEveryPeerATimeoutAfter(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		// n2Back is how many steps after the store returns n2 reaches it.
		n2Back     int
		wantClaims []string
	}{
		// The store returns 14 s in (4 s of beats, 10 s down); n1's own
		// writes vouch for it from then, a timeout later it may claim.
		{"the peer beats two steps after", 2, nil},
		{"the peer never beats again", 100, []string{"n1:aaaa>n2:bbbb@17s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, n1, n2, step := twoNodes(t)
			c.set(func(c *company) { c.down = true })
			for range 10 {
				step()
			}
			if got := c.claimsSoFar(); len(got) != 0 {
				t.Fatalf("claims while the store was down for everyone: %v", got)
			}
			for _, n := range []*Node{n1, n2} {
				if n.Tenures.SelfFenced() || !n.riding || n.Tenures.HostedCount() != 1 {
					t.Fatalf("%s: fenced %v, riding %v, hosting %d after 10 s of an outage every node shares; want it riding it out with its seat",
						n.cfg.Incarnation, n.Tenures.SelfFenced(), n.riding, n.Tenures.HostedCount())
				}
			}
			c.set(func(c *company) { c.down = false; c.cut["n2:bbbb"] = true })
			for i := range 6 {
				if i == tc.n2Back {
					c.set(func(c *company) { c.cut["n2:bbbb"] = false })
				}
				step()
			}
			if got := c.claimsSoFar(); !slices.Equal(got, tc.wantClaims) {
				t.Fatalf("claims %v; want %v", got, tc.wantClaims)
			}
		})
	}
}

// A node cut off alone (its peer still beats) fences itself before its
// peer claims it: the peer's run of good writes never broke.
func TestNodeCutOffAloneFencesBeforeItsPeerClaimsIt(t *testing.T) {
	t.Parallel()
	c, _, n2, step := twoNodes(t)
	c.set(func(c *company) { c.cut["n2:bbbb"] = true })
	fencedAt := stepsUntilFenced(t, c, n2, 6, step)
	// Cut 3 s in: n2 fences at its beat past half the timeout (5 s), n1
	// claims at its first beat past the whole timeout (7 s).
	if fencedAt != 1 {
		t.Fatalf("n2 fenced itself at step %d after the cut; want 1", fencedAt)
	}
	if got := c.claimsSoFar(); !slices.Equal(got, []string{"n1:aaaa>n2:bbbb@7s"}) {
		t.Fatalf("claims %v; want n1 to claim n2 7s in", got)
	}
}

// In an outage every node shares, a node that cannot read the witness
// either proves nothing and fences itself; its peer, which reads the
// witness, rides it out.
func TestGlobalOutageANodeCutOffTheWitnessFencesItself(t *testing.T) {
	t.Parallel()
	c, n1, n2, step := twoNodes(t)
	c.set(func(c *company) { c.down = true; c.witnessCut["n2:bbbb"] = true })
	for range 4 {
		step()
	}
	if !n2.Tenures.SelfFenced() {
		t.Fatal("n2 kept its seat without the store or the witness")
	}
	if n1.Tenures.SelfFenced() || n1.Tenures.HostedCount() != 1 {
		t.Fatal("n1 let its seat go though the witness showed nobody reaching the store")
	}
}

// When a shared outage ends for one node only, the other is now cut off
// alone: it learns so from the witness and fences itself before the node
// that is back may claim it.
func TestOutageThatEndsForOneNodeOnlyFencesTheOtherBeforeAClaim(t *testing.T) {
	t.Parallel()
	c, n1, n2, step := twoNodes(t)
	c.set(func(c *company) { c.down = true })
	for range 6 {
		step()
	}
	if n2.Tenures.SelfFenced() {
		t.Fatal("n2 fenced itself during an outage every node shared")
	}
	// 9 s in, the store is back for n1 only.
	c.set(func(c *company) { c.down = false; c.cut["n2:bbbb"] = true })
	fencedAt := stepsUntilFenced(t, c, n2, 6, step)
	if fencedAt != 0 {
		t.Fatalf("n2 fenced itself at step %d after the store came back for n1; want at once (0)", fencedAt)
	}
	// n1's first good beat is at 10 s; a timeout of them later it claims.
	if got := c.claimsSoFar(); !slices.Equal(got, []string{"n1:aaaa>n2:bbbb@13s"}) {
		t.Fatalf("claims %v; want n1 to claim n2 13s in", got)
	}
	if n1.Tenures.SelfFenced() || n1.Tenures.HostedCount() != 1 {
		t.Fatal("n1 lost its own seat")
	}
}

// A node rides out a Postgres outage only while the witness answers and no
// peer reports a write that reached Postgres sent after this node's own
// first failed write (here 2 s ago); a peer's last good write before that,
// however recent, proves nothing. When it must fence, it may first try its
// own write for as long as the earliest claim allows: a timeout after the
// later of its own last good write and the start of the peer's run, less
// fenceMargin, and at most a beat.
func TestJudge(t *testing.T) {
	t.Parallel()
	clock := NewFakeClock(time.Unix(0, 0))
	n := New(Config{Incarnation: "n1:aaaa", Timeout: timeout, Clock: clock, Log: discard})
	// The node's last good write was sent 2.2 s ago.
	clock.Advance(2200 * time.Millisecond)
	sinceFirstFailed := 2 * time.Second
	reached := func(inc string, sentAgo, runAgo time.Duration) mailbox.StoreReport {
		return mailbox.StoreReport{Incarnation: inc, Reached: true, SentAgo: sentAgo, RunAgo: runAgo, RunKnown: true}
	}
	for _, tc := range []struct {
		name    string
		peers   []mailbox.StoreReport
		err     error
		ride    bool
		recheck time.Duration
	}{
		{"alone", nil, nil, true, 0},
		{"every peer cut off too", []mailbox.StoreReport{{Incarnation: "n2", SentAgo: time.Millisecond}}, nil, true, 0},
		{"a peer's last good write just before this node's failed", []mailbox.StoreReport{reached("n2", sinceFirstFailed+time.Millisecond, time.Minute)}, nil, true, 0},
		// Claimable 0.8 s on (3 s after the node's last write): 0.3 s to try.
		{"a peer never cut off", []mailbox.StoreReport{reached("n2", time.Millisecond, time.Minute)}, nil, false, 300 * time.Millisecond},
		{"a peer reached it as this node's write failed", []mailbox.StoreReport{reached("n2", sinceFirstFailed, time.Minute)}, nil, false, 300 * time.Millisecond},
		{"a peer whose run the witness does not know", []mailbox.StoreReport{{Incarnation: "n2", Reached: true}}, nil, false, 300 * time.Millisecond},
		// Back 0.1 s ago after an outage: claimable 2.9 s on; a beat to try.
		{"a peer just back from an outage", []mailbox.StoreReport{reached("n2", 0, 100*time.Millisecond)}, nil, false, time.Second},
		{"two peers back, one for longer", []mailbox.StoreReport{reached("n2", 0, 100*time.Millisecond), reached("n3", 0, 2*time.Second)}, nil, false, 500 * time.Millisecond},
		{"the witness cannot be read", nil, errors.New("redis: i/o timeout"), false, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := n.judge(tc.peers, tc.err, sinceFirstFailed)
			if got := v.why == nil; got != tc.ride || v.recheck != tc.recheck {
				t.Fatalf("may ride = %v, recheck %v; want %v, %v (%v)", got, v.recheck, tc.ride, tc.recheck, v.why)
			}
		})
	}
}

// A beat whose presence write succeeded but whose report to the witness
// failed does not count towards the run: a peer reading the witness could
// not have seen it.
func TestDetectorWaitsForAWholeTimeoutOfReportedBeats(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.node.Start(context.Background())
	b.beat(timeout/3, false)
	b.witness.mu.Lock()
	b.witness.down = true
	b.witness.mu.Unlock()
	b.beat(timeout/3, false)
	b.witness.mu.Lock()
	b.witness.down = false
	b.witness.mu.Unlock()
	for range 3 {
		b.beat(timeout/3, false)
	}
	if b.store.claims != 0 {
		t.Fatalf("%d detector runs within a timeout of the failed report; want none", b.store.claims)
	}
	b.beat(timeout/3, false)
	if b.store.claims != 1 {
		t.Fatalf("%d detector runs a whole timeout after the failed report; want 1", b.store.claims)
	}
}

// phased is a company whose nodes beat out of phase, as nodes started
// apart do: node i beats at its offset and on every third of the timeout
// after it, each beat on its own goroutine. run moves the clock on in
// small steps, releases the writes a frozen store holds when their
// deadline passes or the store thaws, and starts each node's beat when
// its tick has come and its last beat is done (a ticker keeps one tick
// for a slow reader, so a beat that overran starts the next at once).
type phased struct {
	c     *company
	nodes []*Node
	next  []time.Time
	// done is closed when node i's beat in flight returns; held is its
	// write a frozen store holds.
	done []chan struct{}
	held []*hungWrite
}

func newPhased(t *testing.T, offsets []time.Duration) *phased {
	t.Helper()
	clock := NewFakeClock(time.Unix(1_000_000, 0))
	p := &phased{c: newCompany(clock)}
	for _, off := range offsets {
		p.nodes = append(p.nodes, nil)
		p.next = append(p.next, clock.Now().Add(off))
		p.done = append(p.done, nil)
		p.held = append(p.held, nil)
	}
	// Every node started and beat for two timeouts, so each may claim.
	p.run(t, 2*timeout+timeout/3)
	return p
}

const phaseStep = 10 * time.Millisecond

func (p *phased) run(t *testing.T, d time.Duration) {
	t.Helper()
	end := p.c.clock.Now().Add(d)
	for p.c.clock.Now().Before(end) {
		p.c.clock.Advance(phaseStep)
		now := p.c.clock.Now()
		held := map[string]bool{}
		p.c.mu.Lock()
		for _, n := range p.nodes {
			if n != nil {
				held[n.cfg.Incarnation] = p.c.holds(n.cfg.Incarnation)
			}
		}
		p.c.mu.Unlock()
		for i, w := range p.held {
			if w == nil {
				continue
			}
			switch {
			case !held[p.nodes[i].cfg.Incarnation]:
				w.release <- nil
			case !now.Before(w.deadline):
				w.release <- context.DeadlineExceeded
			default:
				continue
			}
			p.held[i] = nil
			p.settle(i)
		}
		for i := range p.nodes {
			if p.done[i] != nil || now.Before(p.next[i]) {
				continue
			}
			for !p.next[i].After(now) {
				p.next[i] = p.next[i].Add(timeout / 3)
			}
			if p.nodes[i] == nil {
				inc := fmt.Sprintf("n%d:%04d", i+1, i)
				p.c.set(func(c *company) { c.hung[inc] = make(chan hungWrite) })
				p.nodes[i] = p.c.node(t, inc, fmt.Sprintf("seat-%d", i+1))
				continue
			}
			done := make(chan struct{})
			p.done[i] = done
			go func(n *Node) { defer close(done); n.Beat(context.Background()) }(p.nodes[i])
			p.settle(i)
		}
	}
}

// settle waits until node i's beat returns or a frozen store holds its
// write.
func (p *phased) settle(i int) {
	p.c.mu.Lock()
	ch := p.c.hung[p.nodes[i].cfg.Incarnation]
	p.c.mu.Unlock()
	select {
	case <-p.done[i]:
		p.done[i] = nil
	case w := <-ch:
		p.held[i] = &w
	}
}

func (p *phased) fenced() []string {
	var out []string
	for _, n := range p.nodes {
		if n.Tenures.SelfFenced() || n.Tenures.HostedCount() != 1 {
			out = append(out, n.cfg.Incarnation)
		}
	}
	return out
}

// offsetsGrid is every phase a node can have against the first, a tenth
// of an interval apart.
func offsetsGrid() []time.Duration {
	var out []time.Duration
	for off := time.Duration(0); off < timeout/3; off += timeout / 30 {
		out = append(out, off)
	}
	return out
}

// A Postgres outage every node shares, 8 s long, fences nobody and claims
// nobody, whatever the nodes' beat phases and wherever in an interval the
// outage begins: each node asks whether a peer reached the store after
// its own first failed write, and none did. (The rule before asked whether
// a peer had reached it recently, and a peer whose last good beat fell
// just before the outage looked like one that still did.)
func TestSharedOutageFencesNobodyAtAnyPhase(t *testing.T) {
	t.Parallel()
	atEveryPhase(t, 4, func(t *testing.T, p *phased, lose func(inc string, on bool)) {
		lose("", true)
		p.run(t, 8*time.Second)
		if got := p.fenced(); len(got) != 0 {
			t.Fatalf("nodes %v fenced themselves in an outage every node shared", got)
		}
		lose("", false)
		p.run(t, 3*timeout)
		if got := p.c.claimsSoFar(); len(got) != 0 {
			t.Fatalf("claims %v in or after an outage every node shared", got)
		}
		if got := p.fenced(); len(got) != 0 {
			t.Fatalf("nodes %v let their seats go after an outage every node shared", got)
		}
	})
}

// atEveryPhase runs test on a company of n nodes for every kind of outage,
// every spread of the nodes' phases (node i beats i spreads after the
// first, modulo a beat) and every point in a beat where the outage begins;
// lose loses the store (or gives it back) for one node, or with inc empty
// for every node, in the way of the kind.
func atEveryPhase(t *testing.T, n int, test func(t *testing.T, p *phased, lose func(inc string, on bool))) {
	for _, how := range outageKinds {
		for _, spread := range offsetsGrid() {
			for _, begin := range offsetsGrid() {
				t.Run(fmt.Sprintf("%s/spread=%s/begin=%s", how.name, spread, begin), func(t *testing.T) {
					offsets := make([]time.Duration, n)
					for i := range offsets {
						offsets[i] = time.Duration(i) * spread % (timeout / 3)
					}
					p := newPhased(t, offsets)
					p.run(t, begin)
					test(t, p, func(inc string, on bool) { p.c.set(func(c *company) { how.set(c, inc, on) }) })
				})
			}
		}
	}
}

// outageKinds are the two ways a store is lost: its connections refused
// at once (stopped, a reset) or every write held until its deadline
// (frozen, a black hole). set loses it (on) or gives it back (off), for
// node inc only or, with inc empty, for every node.
var outageKinds = []struct {
	name string
	set  func(c *company, inc string, on bool)
}{
	{"refused", func(c *company, inc string, on bool) {
		if inc == "" {
			c.down = on
		} else {
			c.cut[inc] = on
		}
	}},
	{"frozen", func(c *company, inc string, on bool) {
		if inc == "" {
			c.frozen = on
		} else {
			c.frozenFor[inc] = on
		}
	}},
	// A frozen store that, thawed, serves the nodes' waiting writes one
	// after the other, 300 ms apart: the first node back sees its peers'
	// writes still waiting, and they see it reach the store before them.
	{"frozen-slow-thaw", func(c *company, inc string, on bool) {
		if inc != "" {
			c.frozenFor[inc] = on
			return
		}
		c.frozen = on
		if !on {
			for i := range 4 {
				c.slowUntil[fmt.Sprintf("n%d:%04d", i+1, i)] = c.clock.Now().Add(time.Duration(i) * 300 * time.Millisecond)
			}
		}
	}},
}

// A node cut off alone fences itself before any peer claims it, and is
// claimed, whatever the phases and wherever in an interval the cut falls.
func TestNodeCutOffAloneFencesFirstAtAnyPhase(t *testing.T) {
	t.Parallel()
	atEveryPhase(t, 3, func(t *testing.T, p *phased, lose func(inc string, on bool)) {
		cut := p.nodes[1]
		lose(cut.cfg.Incarnation, true)
		for p.c.clock.Now().Sub(p.c.start) < time.Minute && !cut.Tenures.SelfFenced() {
			p.run(t, phaseStep)
			if got := p.c.claimsSoFar(); len(got) != 0 {
				t.Fatalf("claims %v before %s fenced itself", got, cut.cfg.Incarnation)
			}
		}
		p.run(t, 2*timeout)
		if got := p.c.claimsSoFar(); len(got) != 1 || !strings.HasSuffix(strings.Split(got[0], "@")[0], ">"+cut.cfg.Incarnation) {
			t.Fatalf("claims %v; want one claim of %s, after it fenced itself", got, cut.cfg.Incarnation)
		}
	})
}

// A node whose write failed just as a shared outage ended, while a peer's
// already reached the store, tries its own write once more before it
// fences itself on the peer's word: it lands, and the node keeps its seat.
func TestOutageEndingAsAWriteFailsIsRecheckedBeforeAFence(t *testing.T) {
	t.Parallel()
	c, n1, n2, step := twoNodes(t)
	c.set(func(c *company) { c.down = true })
	for range 6 {
		step()
	}
	c.set(func(c *company) { c.down = false; c.failOnce["n2:bbbb"] = true })
	step()
	if n2.Tenures.SelfFenced() || n2.Tenures.HostedCount() != 1 {
		t.Fatal("n2 fenced itself though its own write reached the store on the recheck")
	}
	if n2.riding || n2.SinceLastBeat() != 0 {
		t.Fatalf("n2 riding %v, %s since its last write; want its recheck counted as a good write", n2.riding, n2.SinceLastBeat())
	}
	for range 6 {
		step()
	}
	if got := c.claimsSoFar(); len(got) != 0 || n1.Tenures.SelfFenced() {
		t.Fatalf("claims %v after the outage; want none", got)
	}
}

// A node takes no seat before its first good beat: peers count its
// presence from its registration, and it has not yet shown it keeps it.
func TestANodeTakesNoSeatBeforeItsFirstGoodBeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if !b.node.Tenures.Starting() {
		t.Fatal("a node that never beat takes seats")
	}
	b.store.set(func(p *presence) { p.down = true })
	b.node.Start(context.Background())
	if !b.node.Tenures.Starting() {
		t.Fatal("a node whose first beat failed takes seats")
	}
	b.beat(timeout/3, false)
	if b.node.Tenures.Starting() {
		t.Fatal("a node still takes no seat after a good beat")
	}
}
