package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/mailbox"
)

// The live stream as Server-Sent Events: a seat's or a conversation's
// events as they are written, from the Last-Event-ID a client resumes from
// (docs/operations.md, "Live stream").

// streamRetry is the reconnect delay the stream advises a client (the SSE
// retry field).
const streamRetry = time.Second

// LastEventQuery is the query parameter that stands in for the
// Last-Event-ID header, for clients that cannot set it.
const LastEventQuery = "last_event_id"

func (s *Server) seatStream(w http.ResponseWriter, r *http.Request) {
	seat, ok := s.orgSeat(w, r)
	if !ok {
		return
	}
	s.stream(w, r, s.eventsStream(seat.Handle, ""))
}

func (s *Server) conversationStream(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r, "id")
	if !ok {
		return
	}
	if err := s.conversationRefusal(r.Context(), principalOf(r), id); err != nil {
		s.logError(w, r, err)
		return
	}
	s.stream(w, r, s.eventsStream("", id))
}

// eventsStream is the Redis stream of a seat's events, or of a
// conversation's; "" when this process reads none.
func (s *Server) eventsStream(handle, conversation string) string {
	switch {
	case s.Events == nil:
		return ""
	case handle != "":
		return s.Events.SeatStream(handle)
	}
	return s.Events.ConversationStream(conversation)
}

// stream serves one Redis event stream as Server-Sent Events, until the
// client goes or stops reading for stream.write_timeout: each event as it
// is written (flushed one by one), a keepalive comment when nothing came
// for stream.heartbeat. It starts
// after the Last-Event-ID header (or ?last_event_id), else at the newest
// event, so a client that reconnects with the last id it saw misses
// nothing and gets nothing twice.
func (s *Server) stream(w http.ResponseWriter, r *http.Request, key string) {
	if key == "" {
		writeError(w, crewlet.Errorf(crewlet.EUNAVAILABLE, "this process serves no live streams (it has no Redis reader); use a process started by crewlet serve or crewlet api"))
		return
	}
	after := r.Header.Get("Last-Event-ID")
	if after == "" {
		after = r.URL.Query().Get(LastEventQuery)
	}
	if after != "" && !mailbox.ValidStreamID(after) {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "Last-Event-ID %q is not an event id; send the id: of the last event you received (like 1700000000000-0)", crewlet.OneLine(after, 64)))
		return
	}
	release, ok := s.holdStream(w, r)
	if !ok {
		return
	}
	defer release()
	ctx := r.Context()
	p := principalOf(r)
	if after == "" {
		tail, err := s.Events.Tail(ctx, key)
		if err != nil {
			s.Log.WarnContext(ctx, "stream_unreadable", "stream", key, "error", err)
			writeError(w, crewlet.Errorf(crewlet.EUNAVAILABLE, "the live stream cannot be read now: Redis did not answer; try again"))
			return
		}
		after = tail
	}
	sse, ok := s.startSSE(w, r, key)
	if !ok {
		return
	}
	send, heartbeat := sse.send, sse.heartbeat
	for ctx.Err() == nil {
		evs, err := s.Events.Read(ctx, key, after, heartbeat)
		if err != nil {
			if ctx.Err() == nil {
				s.Log.WarnContext(ctx, "stream_unreadable", "stream", key, "error", err)
			}
			return // the client reconnects with the last id it got
		}
		if len(evs) == 0 {
			if !send(": keepalive\n\n") {
				return
			}
			continue
		}
		for _, ev := range evs {
			after = ev.ID
			if !MayReadTranscript(p, ev.Seat) {
				ev = events.Redact(ev)
			}
			data, err := json.Marshal(ev)
			if err != nil {
				continue
			}
			if !send("id: %s\nevent: %s\ndata: %s\n\n", ev.ID, ev.Kind, data) {
				return
			}
		}
	}
}

// holdStream counts one more live stream of the request's principal on
// this process, or writes 429 and false when it holds
// stream.max_per_principal already. A client gone frees its place at
// once, not when the read it left behind returns; release frees it too.
func (s *Server) holdStream(w http.ResponseWriter, r *http.Request) (release func(), ok bool) {
	p, max := principalOf(r), s.Org.Now().Stream.MaxPerPrincipal
	free, ok := s.openStreams.take(p.Name, max)
	if !ok {
		writeError(w, crewlet.Errorf(crewlet.ERATELIMITED, "%s has %d live streams open on this API process, the most stream.max_per_principal allows; close one (or wait for a dropped one to be noticed) and try again",
			p.Name, max))
		return nil, false
	}
	stop := context.AfterFunc(r.Context(), free)
	return func() { stop(); free() }, true
}

// sseWriter writes one Server-Sent Events response: a live stream, an A2A
// task's stream.
type sseWriter struct {
	ctx context.Context
	log *slog.Logger
	w   http.ResponseWriter
	rc  *http.ResponseController
	// what names the stream in the log; principal who reads it.
	what, principal string
	writeTimeout    time.Duration
	// heartbeat is how long the stream may be silent before a keepalive
	// comment (stream.heartbeat).
	heartbeat time.Duration
}

// startSSE answers the request with an event stream, the reconnect delay
// its first line; false when the client is gone already.
func (s *Server) startSSE(w http.ResponseWriter, r *http.Request, what string) (*sseWriter, bool) {
	settings := s.Org.Now().Stream
	sse := &sseWriter{ctx: r.Context(), log: s.Log, w: w, rc: http.NewResponseController(w), what: what, principal: principalOf(r).Name,
		writeTimeout: settings.WriteTimeout, heartbeat: settings.Heartbeat}
	if sse.writeTimeout <= 0 {
		sse.writeTimeout = config.DefaultStream.WriteTimeout
	}
	if sse.heartbeat <= 0 {
		sse.heartbeat = config.DefaultStream.Heartbeat
	}
	// A stream outlives the server's read timeout and its write timeout,
	// which are for requests that end; each write gets a deadline of its
	// own instead (send).
	_ = sse.rc.SetReadDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return sse, sse.send("retry: %d\n\n", streamRetry.Milliseconds())
}

// send writes one event or comment and flushes it. A client that has
// stopped reading fills the connection's buffers until a write blocks;
// past the deadline the write fails and the stream ends, so it frees its
// place instead of holding it for as long as the client is stalled.
func (e *sseWriter) send(format string, args ...any) bool {
	if err := e.rc.SetWriteDeadline(time.Now().Add(e.writeTimeout)); err != nil {
		return false
	}
	_, err := fmt.Fprintf(e.w, format, args...)
	if err == nil {
		err = e.rc.Flush()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		e.log.WarnContext(e.ctx, "stream_dropped", "reason", "write_timeout", "stream", e.what, "principal", e.principal, "write_timeout", e.writeTimeout)
	}
	return err == nil
}

// streamCounts counts what each principal holds open on this process: its
// live streams (openStreams), its heavy reads in flight (heavyByPrincipal).
type streamCounts struct {
	mu   sync.Mutex
	open map[string]int
}

// take counts one more stream of principal, unless it has max open; the
// release it returns uncounts it, once.
func (c *streamCounts) take(principal string, max int) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open == nil {
		c.open = map[string]int{}
	}
	if c.open[principal] >= max {
		return nil, false
	}
	c.open[principal]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.open[principal]--; c.open[principal] <= 0 {
				delete(c.open, principal)
			}
		})
	}, true
}
