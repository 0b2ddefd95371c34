package liveness

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
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
	clock *FakeClock
	store *presence
	node  *Node
	td    *teardowns
	// told receives every TellHostLost call; tellFails makes them fail.
	told      chan told
	tellFails bool
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{clock: NewFakeClock(time.Unix(1_000_000, 0)), store: &presence{seats: map[string][]string{}},
		td: newTeardowns(), told: make(chan told, 16)}
	b.node = New(Config{
		Incarnation: "n1:aaaa", Timeout: timeout, Clock: b.clock, Store: b.store, Watchdog: noWatchdog{},
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

// The detector runs only on a beat whose own write succeeded: a node that
// cannot reach the store claims nobody.
func TestDetectorRunsOnlyAfterAGoodWrite(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.node.Start(context.Background())
	b.beat(time.Second, true)
	if b.store.claims != 1 {
		t.Fatalf("%d detector runs after a good and a failed beat; want 1", b.store.claims)
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
