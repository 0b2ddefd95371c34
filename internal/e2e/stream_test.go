package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/tools/toolstest"
)

// sseClient is one live stream connection: its events as they come.
type sseClient struct {
	t      testing.TB
	resp   *http.Response
	events chan events.Event
	// keepalives counts the heartbeat comments received.
	mu         sync.Mutex
	keepalives int
	done       chan struct{}
}

// openStream opens GET path as a live stream, after lastID when set.
func (c *company) openStream(path, lastID string) *sseClient {
	c.t.Helper()
	status, s, body := c.tryStream(path, lastID)
	if status != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s; want a stream", path, status, body)
	}
	return s
}

// tryStream opens a stream, or returns the status and body it was refused
// with.
func (c *company) tryStream(path, lastID string) (int, *sseClient, string) {
	req, err := http.NewRequest(http.MethodGet, c.api+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if token := c.bearer(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp.StatusCode, nil, string(data)
	}
	s := &sseClient{t: c.t, resp: resp, events: make(chan events.Event, 100000), done: make(chan struct{})}
	go s.read(resp.Body)
	c.t.Cleanup(s.close)
	return resp.StatusCode, s, ""
}

func (s *sseClient) read(body io.Reader) {
	defer close(s.done)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	var id, kind, data string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == ": keepalive":
			s.mu.Lock()
			s.keepalives++
			s.mu.Unlock()
		case strings.HasPrefix(line, "id: "):
			id = line[len("id: "):]
		case strings.HasPrefix(line, "event: "):
			kind = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			data = line[len("data: "):]
		case line == "" && data != "":
			var ev events.Event
			if err := json.Unmarshal([]byte(data), &ev); err != nil {
				s.t.Errorf("event %s: data %q: %v", id, data, err)
			}
			if ev.ID != id || ev.Kind != kind {
				s.t.Errorf("event id %q kind %q; its data says %q %q", id, kind, ev.ID, ev.Kind)
			}
			s.events <- ev
			id, kind, data = "", "", ""
		}
	}
}

func (s *sseClient) close() { s.resp.Body.Close() }

// until collects events until one satisfies stop (included), or fails
// the test after timeout.
func (s *sseClient) until(timeout time.Duration, what string, stop func(events.Event) bool) []events.Event {
	s.t.Helper()
	var got []events.Event
	deadline := time.After(timeout)
	for {
		select {
		case ev := <-s.events:
			got = append(got, ev)
			if stop(ev) {
				return got
			}
		case <-s.done:
			s.t.Fatalf("the stream ended before %s; got %s", what, kindsOf(got))
		case <-deadline:
			s.t.Fatalf("no %s within %s; got %s", what, timeout, kindsOf(got))
		}
	}
}

func kindsOf(evs []events.Event) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "%s(r%d a%d s%d) ", ev.Kind, ev.Data.Round, ev.Data.Attempt, ev.Data.Seq)
	}
	return b.String()
}

// identity is what makes an event one event: the same step re-run must
// not produce it twice.
func identity(ev events.Event) string {
	d := ev.Data
	return fmt.Sprintf("%s|%s|t%d|r%d|c%d|a%d|s%d|%s", ev.Turn, ev.Kind, d.Thread, d.Round, d.Call, d.Attempt, d.Seq, d.InReplyTo)
}

func kindIs(kind string) func(events.Event) bool {
	return func(ev events.Event) bool { return ev.Kind == kind }
}

// streamOrg is a seat with a stdio MCP server whose turns take two slow
// rounds: a tool call, then an answer streamed in pieces.
func streamOrg(t *testing.T, dir string) string {
	t.Helper()
	bin := toolstest.BuildT(t)
	return writeFile(t, "org.yaml", fmt.Sprintf(`company: { name: streamco }
profiles:
  slow:
    provider: scripted
    delay: 4s
    rules:
      - match: '^count'
        tools: [ { name: ledger__read_counter, args: {} } ]
        reply: 'the counter reads {{index .Results 0}} and that is all there is to say about the counter today, said slowly'
roles:
  clerk:
    charter: keeps the ledger
    profile: slow
    mcp:
      - { name: ledger, command: [ %q ], env: [ "TESTSERVER_COUNT_FILE=%s" ] }
    sandbox: { write: [ %q ] }
seats:
  - { handle: s01, role: clerk }
`, bin, filepath.Join(dir, "count"), dir))
}

// A watcher that drops its connection mid-turn, while the seat's node is
// killed, and reconnects with Last-Event-ID gets every event of the turn
// once and in order: what it saw before and after the reconnect is, event
// for event, what a watcher that never dropped saw, and the conversation's
// stream tells the same turn. No event is there twice, though the round
// the kill cut short ran again on the other node.
func TestStreamResumesAcrossAKilledNode(t *testing.T) {
	c := newCompany(t, streamOrg(t, t.TempDir()))
	c.setenv("CREWLET_STREAM_HEARTBEAT=1s")
	c.apiServer()
	workers := map[string]*proc{"n1": c.worker("n1"), "n2": c.worker("n2")}
	c.waitAttached(60 * time.Second)

	steady := c.openStream("/seats/s01/stream", "")
	dropping := c.openStream("/seats/s01/stream", "")
	msg := c.send("s01", "count please")
	conv := c.openStream("/conversations/"+msg.Conversation+"/stream", "0-0")

	// Mid-turn: the answer's round has begun streaming.
	before := dropping.until(60*time.Second, "round 2's first delta", func(ev events.Event) bool {
		return ev.Kind == events.ModelDelta && ev.Data.Round == 2
	})
	dropping.close()
	var victim string
	for _, s := range c.seats() {
		if s.Handle == "s01" {
			victim = s.Node
		}
	}
	for _, n := range c.nodes().Nodes {
		if n.Incarnation == victim {
			workers[n.NodeID].kill(t)
			t.Logf("killed %s (%s), the seat's node, after %d events", n.NodeID, victim, len(before))
		}
	}
	last := before[len(before)-1].ID
	resumed := c.openStream("/seats/s01/stream", last)
	after := resumed.until(120*time.Second, "turn_finished after the reconnect", kindIs(events.TurnFinished))
	all := steady.until(30*time.Second, "turn_finished", kindIs(events.TurnFinished))
	if reply := c.waitReply(msg, 30*time.Second); !strings.Contains(reply, "the counter reads") {
		t.Errorf("reply %q; want the scripted answer", reply)
	}

	t.Logf("the steady watcher's events: %s", kindsOf(all))
	joined := append(append([]events.Event(nil), before...), after...)
	if len(joined) != len(all) {
		t.Fatalf("before and after the reconnect: %d events (%s); the steady watcher saw %d (%s)", len(joined), kindsOf(joined), len(all), kindsOf(all))
	}
	seen := map[string]bool{}
	for i, ev := range joined {
		if ev.ID != all[i].ID || ev.Kind != all[i].Kind {
			t.Errorf("event %d: %s %s after the reconnect; the steady watcher's is %s %s", i, ev.ID, ev.Kind, all[i].ID, all[i].Kind)
		}
		if i > 0 && !idBefore(joined[i-1].ID, ev.ID) {
			t.Errorf("event %d id %s does not come after %s", i, ev.ID, joined[i-1].ID)
		}
		if seen[identity(ev)] {
			t.Errorf("event %s is there twice: %s", ev.ID, identity(ev))
		}
		seen[identity(ev)] = true
	}
	count := map[string]int{}
	for _, ev := range all {
		count[fmt.Sprintf("%s r%d", ev.Kind, ev.Data.Round)]++
	}
	for _, once := range []string{"turn_started r0", "round_started r1", "model_output r1", "tool_started r1", "tool_finished r1",
		"round_started r2", "model_output r2", "answer_sent r0", "turn_finished r0"} {
		if count[once] != 1 {
			t.Errorf("%s %d times; want once (events: %s)", once, count[once], kindsOf(all))
		}
	}
	if count["model_delta r2"] == 0 {
		t.Errorf("no model_delta in round 2; want the answer streamed (events: %s)", kindsOf(all))
	}
	for _, ev := range all {
		if ev.Kind == events.ModelOutput && ev.Data.Round == 1 && strings.Join(ev.Data.Tools, ",") != "ledger__read_counter" {
			t.Errorf("round 1's output calls %v; want ledger__read_counter", ev.Data.Tools)
		}
		if ev.Kind == events.ToolStarted && string(ev.Data.Args) != "{}" {
			t.Errorf("tool_started args %s; want the call's {}", ev.Data.Args)
		}
	}
	// The conversation's own stream tells the same turn, with its own ids.
	convEvents := conv.until(30*time.Second, "turn_finished on the conversation's stream", kindIs(events.TurnFinished))
	if len(convEvents) != len(all) {
		t.Errorf("the conversation's stream has %d events (%s); the seat's %d", len(convEvents), kindsOf(convEvents), len(all))
	}
	steady.mu.Lock()
	defer steady.mu.Unlock()
	if steady.keepalives == 0 {
		t.Error("no keepalive comment on a stream idle for more than stream.heartbeat (1s)")
	}
}

// idBefore reports whether stream id a comes before b.
func idBefore(a, b string) bool {
	var am, as, bm, bs uint64
	fmt.Sscanf(a, "%d-%d", &am, &as)
	fmt.Sscanf(b, "%d-%d", &bm, &bs)
	return am < bm || am == bm && as < bs
}

// longReply is an answer of about 100 KB, so a few turns' events outgrow
// what a connection's buffers hold.
var longReply = strings.Repeat("lorem ipsum dolor sit amet ", 4000)

// A watcher that reads nothing does not hold the turns back: with it
// connected and stalled, every turn finishes and a watcher that reads gets
// all their events. The turns' events are more bytes than the stalled
// connection's buffers hold, so the server's writes to it were blocked
// meanwhile. Read at last, the stalled watcher gets the same events in the
// same order.
func TestSlowWatcherDoesNotSlowTheTurn(t *testing.T) {
	const messages = 24
	c := newCompany(t, talkerOrg(t))
	c.serve()

	conn := c.stalledStream("/seats/s01/stream")
	fast := c.openStream("/seats/s01/stream", "")
	// The stalled stream is open once the server counts it: a second
	// fast one sees the same events from the same point on.
	for i := range messages {
		c.send("s01", fmt.Sprintf("talk %d", i))
	}
	answered := 0
	got := fast.until(3*time.Minute, fmt.Sprintf("%d answers", messages), func(ev events.Event) bool {
		if ev.Kind == events.AnswerSent {
			answered++
		}
		return answered == messages
	})
	got = append(got, fast.until(time.Minute, "the last turn_finished", kindIs(events.TurnFinished))...)
	var bytes int
	for _, ev := range got {
		data, _ := json.Marshal(ev)
		bytes += len(data)
	}
	// The kernel doubles a buffer size it is given.
	if limit := sendBufferMax(t) + 2*readBuffer; bytes <= limit {
		t.Fatalf("the turns' events are %d bytes, which fit the stalled connection's buffers (%d); the test proves nothing", bytes, limit)
	}
	t.Logf("%d events, %d bytes, went to the fast watcher while the stalled one read nothing", len(got), bytes)

	// Now the stalled watcher reads: everything, in order, from the start.
	resp, err := http.ReadResponse(conn, nil)
	if err != nil {
		t.Fatal(err)
	}
	slow := &sseClient{t: t, resp: resp, events: make(chan events.Event, 100000), done: make(chan struct{})}
	go slow.read(resp.Body)
	late := slow.until(time.Minute, "the stalled watcher's copy of the last event", func(ev events.Event) bool { return ev.ID == got[len(got)-1].ID })
	if len(late) < len(got) {
		t.Fatalf("the stalled watcher got %d events; the fast one %d", len(late), len(got))
	}
	late = late[len(late)-len(got):]
	for i := range got {
		if late[i].ID != got[i].ID {
			t.Fatalf("event %d: the stalled watcher got %s, the fast one %s", i, late[i].ID, got[i].ID)
		}
	}
}

// talkerOrg is an org of one seat, s01, whose every turn ("talk ...")
// answers longReply.
func talkerOrg(t *testing.T) string {
	return writeFile(t, "org.yaml", fmt.Sprintf(`company: { name: slowco }
profiles:
  long: { provider: scripted, rules: [ { match: '^talk', reply: '%s' } ] }
roles:
  talker: { charter: talks at length, profile: long }
seats:
  - { handle: s01, role: talker }
`, longReply))
}

// readBuffer is a stalled stream's receive buffer: small, but above the
// loopback MSS, since a receive buffer below it never reopens its window
// once full.
const readBuffer = 256 << 10

// stalledStream opens GET path as a live stream on a connection that reads
// nothing until the test reads it, with a receive buffer of readBuffer.
func (c *company) stalledStream(path string) *bufio.Reader {
	c.t.Helper()
	addr := strings.TrimPrefix(c.api, "http://")
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { conn.Close() })
	if err := conn.(*net.TCPConn).SetReadBuffer(readBuffer); err != nil {
		c.t.Fatal(err)
	}
	if _, err := fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n", path, addr, c.bearer()); err != nil {
		c.t.Fatal(err)
	}
	// The status, peeked, so that the stream is known to hold its place
	// before the caller goes on; what the reader takes is one small
	// buffer's worth, and the caller reads the response from it.
	r := bufio.NewReaderSize(conn, 64)
	status, err := r.Peek(len("HTTP/1.1 200"))
	if err != nil || string(status) != "HTTP/1.1 200" {
		c.t.Fatalf("the stalled stream was not let in: %q %v", status, err)
	}
	return r
}

// A client that opens a stream and stops reading cannot hold its place
// for good: once its buffers are full, a write blocked past
// stream.write_timeout ends the stream, and the principal, whose one place
// the stalled stream held, opens a stream again.
func TestStalledStreamReaderIsDroppedAndFreesItsSlot(t *testing.T) {
	const messages = 24
	c := newCompany(t, talkerOrg(t))
	c.setenv("CREWLET_STREAM_MAX_PER_PRINCIPAL=1", "CREWLET_STREAM_WRITE_TIMEOUT=1s")
	p := c.serve()

	c.stalledStream("/seats/s01/stream")
	testenv.Eventually(t, 10*time.Second, "the stalled stream holding the principal's one place", func() error {
		status, s, body := c.tryStream("/seats/s01/stream", "")
		if status == http.StatusOK {
			s.close()
			return fmt.Errorf("a second stream was let in: the stalled one is not counted yet")
		}
		if status != http.StatusTooManyRequests {
			return fmt.Errorf("a second stream: %d %s; want 429", status, body)
		}
		return nil
	})
	// More bytes of events than the stalled connection's buffers hold
	// (TestSlowWatcherDoesNotSlowTheTurn counts them), so a write to it
	// blocks.
	for i := range messages {
		c.send("s01", fmt.Sprintf("talk %d", i))
	}
	testenv.Eventually(t, 3*time.Minute, "a stream again once the stalled one was dropped", func() error {
		status, s, body := c.tryStream("/seats/s01/stream", "")
		if status != http.StatusOK {
			return fmt.Errorf("%d %s", status, body)
		}
		s.close()
		return nil
	})
	if log := p.out.String(); !strings.Contains(log, "stream_dropped") || !strings.Contains(log, "write_timeout") {
		t.Errorf("the drop is not logged (stream_dropped reason=write_timeout):\n%s", log)
	}
}

// sendBufferMax is the most a TCP connection's send buffer grows to here.
func sendBufferMax(t *testing.T) int {
	data, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem")
	if err != nil {
		t.Skipf("cannot tell the send buffer's size: %v", err)
	}
	var lo, def, hi int
	fmt.Sscanf(string(data), "%d %d %d", &lo, &def, &hi)
	return hi
}

// Each principal holds at most stream.max_per_principal streams open on
// an API process: one more is refused with 429 and a message naming the
// key, and a place freed by a closed stream is taken again.
func TestStreamsPerPrincipalAreBounded(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 0))
	c.setenv("CREWLET_STREAM_MAX_PER_PRINCIPAL=2")
	c.apiServer()
	first := c.openStream("/seats/s01/stream", "")
	c.openStream("/conversations/c-1/stream", "")
	status, _, body := c.tryStream("/seats/s01/stream", "")
	if status != http.StatusTooManyRequests || !strings.Contains(body, "stream.max_per_principal") {
		t.Fatalf("a third stream: %d %s; want 429 naming stream.max_per_principal", status, body)
	}
	if status, _, body := c.tryStream("/seats/s01/stream", "not-an-id"); status != http.StatusBadRequest {
		t.Errorf("Last-Event-ID not-an-id: %d %s; want 400", status, body)
	}
	first.close()
	testenv.Eventually(t, 10*time.Second, "a stream again once one closed", func() error {
		status, s, body := c.tryStream("/seats/s01/stream", "")
		if status != http.StatusOK {
			return fmt.Errorf("%d %s", status, body)
		}
		s.close()
		return nil
	})
}

// rawStream reads GET path as text, after lastID when set, up to and with
// the first event of kind stop, and returns it and that event's id.
func (c *company) rawStream(path, lastID, stop string) (string, string) {
	c.t.Helper()
	// Bounded, so that a stream that never says stop fails the test with
	// what it did say, rather than hanging the package.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.api+path, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	if token := c.bearer(); token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s\nLast-Event-ID: %s\n\nHTTP %s\nContent-Type: %s\n\n", path, lastID, resp.Status, resp.Header.Get("Content-Type"))
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	var id string
	stopping := false
	for sc.Scan() {
		line := sc.Text()
		b.WriteString(line + "\n")
		if v, ok := strings.CutPrefix(line, "id: "); ok {
			id = v
		}
		if line == "event: "+stop {
			stopping = true
		}
		if line == "" && stopping {
			return b.String(), id
		}
	}
	c.t.Fatalf("the stream ended before %s (%v): %s", stop, sc.Err(), b.String())
	return "", ""
}

// crewlet watch prints a seat's events as they come and, when the API
// process it reads from is killed and comes back, reconnects from the last
// event it printed: every event of both turns printed once. The test also
// logs a raw SSE exchange that drops mid-turn and resumes with
// Last-Event-ID.
func TestWatchReconnectsAfterTheAPIRestarts(t *testing.T) {
	c := newCompany(t, fleetOrg(t, 1, 2*time.Second))
	c.setenv("CREWLET_STREAM_HEARTBEAT=1s")
	api := c.apiServer()
	c.worker("n1")
	c.waitAttached(60 * time.Second)

	// From the start of the seat's stream, so it misses nothing however
	// late it connects.
	out := &testenv.Log{}
	watch := exec.Command(binary, "watch", "s01", "--after", "0-0", "--api", c.api)
	watch.Stdout, watch.Stderr = out, out
	if err := watch.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = watch.Process.Kill(); _ = watch.Wait() }()

	msg := c.send("s01", "first message")
	part1, lastID := c.rawStream("/seats/s01/stream", "0-0", events.ModelDelta)
	part2, _ := c.rawStream("/seats/s01/stream", lastID, events.TurnFinished)
	t.Logf("a raw exchange, dropped after the first delta and resumed:\n%s\n--- reconnect ---\n%s", part1, part2)
	c.waitReply(msg, 30*time.Second)

	api.kill(t)
	c.apiServer()
	second := c.send("s01", "second message")
	c.waitReply(second, 30*time.Second)
	testenv.Eventually(t, 30*time.Second, "the watch printed both turns' turn_finished", func() error {
		if n := strings.Count(out.String(), " turn_finished "); n < 2 {
			return fmt.Errorf("%d turn_finished so far:\n%s", n, out.String())
		}
		return nil
	})
	t.Logf("crewlet watch s01:\n%s", out.String())
	if !strings.Contains(out.String(), "stream dropped") {
		t.Errorf("the watch never said its stream dropped:\n%s", out.String())
	}
	ids := map[string]bool{}
	for _, line := range strings.Split(out.String(), "\n") {
		_, id, ok := strings.Cut(line, "(id ")
		if !ok {
			continue
		}
		if ids[id] {
			t.Errorf("event %s printed twice", strings.TrimSuffix(id, ")"))
		}
		ids[id] = true
	}
	for _, kind := range []string{events.TurnStarted, events.RoundStarted, events.ModelOutput, events.AnswerSent} {
		if n := strings.Count(out.String(), " "+kind+" "); n != 2 {
			t.Errorf("%s printed %d times; want once a turn", kind, n)
		}
	}
}

// A conversation's stream follows it across seats: the delegator's turn
// tells of the ticket it opened, and the engineer's turn that serves the
// ticket, in the same conversation, tells of settling it.
func TestConversationStreamFollowsATicket(t *testing.T) {
	c := newCompany(t, writeFile(t, "org.yaml", ticketsOrg))
	c.serve()
	msg := c.send("cto", "get a fix for the build")
	conv := c.openStream("/conversations/"+msg.Conversation+"/stream", "0-0")
	var opened events.Event
	got := conv.until(60*time.Second, "ticket_settled", func(ev events.Event) bool {
		if ev.Kind == events.TicketOpened {
			opened = ev
		}
		return ev.Kind == events.TicketSettled
	})
	settled := got[len(got)-1]
	if opened.Seat != "cto" || opened.Data.Ticket == "" || !strings.HasPrefix(opened.Data.To, "eng-") {
		t.Fatalf("ticket_opened %+v; want cto's ticket to an engineer (events: %s)", opened, kindsOf(got))
	}
	if settled.Seat != opened.Data.To || settled.Data.Ticket != opened.Data.Ticket || settled.Data.Phase != string(crewlet.TicketDone) {
		t.Errorf("ticket_settled %+v; want %s settling %s done", settled, opened.Data.To, opened.Data.Ticket)
	}
}
