// Package watchdog ends a node whose own loops stop turning. A wedged node is
// worse than a dead one: its seats fail over, but it still holds what it
// fetched and may act on seats it no longer owns. Exiting removes the actor
// and lets a supervisor restart it (exit code 75 says why).
package watchdog

import (
	"fmt"
	"io"
	"sync"
	"time"
)

// ExitCode is the process exit status of a node the watchdog ended.
const ExitCode = 75

// Watchdog compares each registered loop's last beat with a threshold.
type Watchdog struct {
	threshold time.Duration
	stderr    io.Writer
	exit      func(int)
	now       func() time.Time

	mu    sync.Mutex
	beats map[string]time.Time
	armed bool
	fired bool
}

// New returns a watchdog that calls exit(ExitCode) after writing one line to
// stderr when a loop has not beaten for longer than threshold. The threshold
// is the host heartbeat timeout: past it the node is provably no longer
// trusted with its seats, so it must not keep holding them either.
func New(threshold time.Duration, stderr io.Writer, exit func(int)) *Watchdog {
	return &Watchdog{threshold: threshold, stderr: stderr, exit: exit, now: time.Now, beats: map[string]time.Time{}, armed: true}
}

// Beat records that loop turned just now; the first beat registers it.
func (w *Watchdog) Beat(loop string) {
	w.mu.Lock()
	w.beats[loop] = w.now()
	w.mu.Unlock()
}

// Forget unregisters a loop that finished: a loop that is gone is not wedged.
func (w *Watchdog) Forget(loop string) {
	w.mu.Lock()
	delete(w.beats, loop)
	w.mu.Unlock()
}

// Disarm stops the watchdog for good; a normal shutdown legitimately blocks
// loops while it releases seats.
func (w *Watchdog) Disarm() {
	w.mu.Lock()
	w.armed = false
	w.mu.Unlock()
}

// Interval is how often Check should run: well inside the threshold, so a
// healthy node is never judged on a stale reading.
func (w *Watchdog) Interval() time.Duration { return w.threshold / 4 }

// Check exits the process if an armed watchdog finds a loop older than the
// threshold. It reports the stalest loop and its lag.
func (w *Watchdog) Check() (stalest string, lag time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := w.now()
	for loop, t := range w.beats {
		if l := now.Sub(t); l > lag {
			stalest, lag = loop, l
		}
	}
	if w.armed && !w.fired && lag > w.threshold {
		w.fired = true
		// Straight to stderr, no logger: the machinery a wedged process has
		// left is not to be trusted with its last word.
		fmt.Fprintf(w.stderr, "crewlet: watchdog: loop %q has not turned for %s (limit %s); exiting with code %d\n",
			stalest, lag.Round(time.Millisecond), w.threshold, ExitCode)
		w.exit(ExitCode)
	}
	return stalest, lag
}

// Run checks every Interval until stop is closed.
func (w *Watchdog) Run(stop <-chan struct{}) {
	t := time.NewTicker(w.Interval())
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			w.Check()
		}
	}
}
