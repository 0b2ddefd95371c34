package liveness

import (
	"sync"
	"time"
)

// Clock is the time the liveness rules read: the real one in a node, a
// FakeClock in tests, which moves only when told.
type Clock interface {
	Now() time.Time
	NewTicker(every time.Duration) Ticker
}

// Ticker delivers ticks every period, dropping those a slow reader misses,
// as time.Ticker does.
type Ticker interface {
	C() <-chan time.Time
	Stop()
}

// RealClock is the wall clock.
type RealClock struct{}

// Now returns time.Now().
func (RealClock) Now() time.Time { return time.Now() }

// NewTicker returns a time.Ticker.
func (RealClock) NewTicker(every time.Duration) Ticker { return realTicker{time.NewTicker(every)} }

type realTicker struct{ t *time.Ticker }

func (r realTicker) C() <-chan time.Time { return r.t.C }
func (r realTicker) Stop()               { r.t.Stop() }

// FakeClock is a clock for tests: its time moves only by Advance, and its
// tickers tick as Advance passes their deadlines.
type FakeClock struct {
	mu      sync.Mutex
	changed *sync.Cond
	now     time.Time
	tickers []*fakeTicker
}

// NewFakeClock returns a fake clock that reads start.
func NewFakeClock(start time.Time) *FakeClock {
	c := &FakeClock{now: start}
	c.changed = sync.NewCond(&c.mu)
	return c
}

// Now returns the fake time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// NewTicker returns a ticker whose first tick is one period from now.
func (c *FakeClock) NewTicker(every time.Duration) Ticker {
	if every <= 0 {
		panic("liveness: non-positive ticker period")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTicker{clock: c, every: every, next: c.now.Add(every), ch: make(chan time.Time, 1)}
	c.tickers = append(c.tickers, t)
	c.changed.Broadcast()
	return t
}

// Advance moves the time on by d and ticks every ticker whose deadline it
// passed; a tick its reader has not taken yet is dropped, as a real
// ticker drops it.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.tickers {
		for !t.next.After(c.now) {
			select {
			case t.ch <- t.next:
			default:
			}
			t.next = t.next.Add(t.every)
		}
	}
}

// WaitForTicker blocks until a running ticker exists and returns its
// period: a test advances the clock only once the loop under test is
// listening.
func (c *FakeClock) WaitForTicker() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(c.tickers) == 0 {
		c.changed.Wait()
	}
	return c.tickers[0].every
}

type fakeTicker struct {
	clock *FakeClock
	every time.Duration
	next  time.Time
	ch    chan time.Time
}

func (t *fakeTicker) C() <-chan time.Time { return t.ch }

func (t *fakeTicker) Stop() {
	c := t.clock
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, other := range c.tickers {
		if other == t {
			c.tickers = append(c.tickers[:i], c.tickers[i+1:]...)
			break
		}
	}
	c.changed.Broadcast()
}
