package events

import (
	"strings"
	"sync"
	"time"
)

// How a round's streamed text is cut into model_delta events: a piece at
// most every DeltaEvery, or sooner once DeltaBytes are held. Providers
// send about a token a chunk; an event a token would cost Redis three
// writes a token and push a seat's older events out of its capped stream.
const (
	DeltaEvery = 100 * time.Millisecond
	DeltaBytes = 1024
)

// Deltas coalesces a model's text as it streams into pieces for emit: the
// first piece goes at once, later text is held until DeltaEvery has passed
// since the last piece (a timer sends what is held when no more comes) or
// DeltaBytes are held. emit is called with one piece at a time, in order.
type Deltas struct {
	emit  func(text string)
	mu    sync.Mutex
	held  strings.Builder
	last  time.Time
	timer *time.Timer
}

// NewDeltas coalesces text for emit.
func NewDeltas(emit func(text string)) *Deltas {
	return &Deltas{emit: emit}
}

// Add takes the next text of the answer.
func (d *Deltas) Add(text string) {
	if text == "" {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held.WriteString(text)
	wait := DeltaEvery - time.Since(d.last)
	switch {
	case wait <= 0 || d.held.Len() >= DeltaBytes:
		d.send()
	case d.timer == nil:
		d.timer = time.AfterFunc(wait, d.Flush)
	}
}

// Flush sends what is held now. A round flushes once its model call has
// returned, before it tells the whole answer.
func (d *Deltas) Flush() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.send()
}

// send emits the held text, if any; d.mu is held.
func (d *Deltas) send() {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if d.held.Len() == 0 {
		return
	}
	d.emit(d.held.String())
	d.held.Reset()
	d.last = time.Now()
}
