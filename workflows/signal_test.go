package workflows

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/crewlet/crewlet"
)

// marker is in every bad payload the tests send: a rejected payload's
// content must never reach a log line, so no logged value may contain it.
const marker = "MARKER-7f3a"

// jsonPayload is a signal payload with these exact bytes as its JSON, as
// `temporal workflow signal --input` or any client could send it.
func jsonPayload(data string) converter.RawValue {
	return converter.NewRawValue(&commonpb.Payload{
		Metadata: map[string][]byte{converter.MetadataEncoding: []byte(encodingJSON)},
		Data:     []byte(data),
	})
}

// bytesPayload is a signal payload sent as raw bytes ([]byte from a Go client).
func bytesPayload(data string) converter.RawValue {
	return converter.NewRawValue(&commonpb.Payload{
		Metadata: map[string][]byte{converter.MetadataEncoding: []byte("binary/plain")},
		Data:     []byte(data),
	})
}

func payloadOf(t *testing.T, v any) converter.RawValue {
	t.Helper()
	p, err := converter.GetDefaultDataConverter().ToPayload(v)
	if err != nil {
		t.Fatal(err)
	}
	return converter.NewRawValue(p)
}

// badPayload is one payload a signal must refuse.
type badPayload struct {
	name    string
	payload converter.RawValue
}

// badPayloads are payloads every checked signal refuses, whatever its fields;
// field is a string field of that signal's payload.
func badPayloads(field string) []badPayload {
	long := strings.Repeat("x", 5000) + marker
	return []badPayload{
		{"unknown field", jsonPayload(fmt.Sprintf(`{%q:"ok",%q:1}`, field, marker))},
		{"known field in another case", jsonPayload(fmt.Sprintf(`{%q:"ok"}`, strings.ToUpper(field)))},
		{"oversized " + field, jsonPayload(fmt.Sprintf(`{%q:%q}`, field, long))},
		{"oversized reason", jsonPayload(fmt.Sprintf(`{"reason":%q}`, long))},
		{"NUL in by", jsonPayload(`{"by":"olga\u0000` + marker + `"}`)},
		{"invalid UTF-8 in by", jsonPayload("{\"by\":\"olga\xff" + marker + "\"}")},
		{"space in by", jsonPayload(`{"by":"olga ` + marker + `"}`)},
		{"wrong JSON type", jsonPayload(fmt.Sprintf(`{%q:5}`, field))},
		{"not an object", jsonPayload(`["` + marker + `"]`)},
		{"not JSON", jsonPayload(`{"by":` + marker)},
		{"two JSON values", jsonPayload(`{} {}`)},
		{"raw bytes", bytesPayload(`{"by":"` + marker + `"}`)},
		{"oversized payload", jsonPayload(`{"by":"olga","x":"` + strings.Repeat("y", maxSignalBytes) + `"}`)},
	}
}

// TestDecodeSignalRefusesBadPayloads checks the pure validation of every
// signal payload type.
func TestDecodeSignalRefusesBadPayloads(t *testing.T) {
	t.Parallel()
	type signal struct {
		name   string
		field  string // a string field of its payload
		decode func(converter.RawValue) error
	}
	signals := []signal{
		{crewlet.SignalPause, "reason", func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.PauseRequest.Validate); return err }},
		{crewlet.SignalResume, "by", func(r converter.RawValue) error {
			_, err := decodeSignal(r, crewlet.ResumeRequest.Validate)
			return err
		}},
		{crewlet.SignalDrain, "reason", func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.DrainRequest.Validate); return err }},
		{crewlet.SignalMove, "exclude_node", func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.MoveRequest.Validate); return err }},
		{crewlet.SignalStop, "reason", func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.StopRequest.Validate); return err }},
		{crewlet.SignalStopTurn, "by", func(r converter.RawValue) error {
			_, err := decodeSignal(r, crewlet.StopTurnRequest.Validate)
			return err
		}},
		{crewlet.SignalTicket, "ticket", func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.TicketSignal.Validate); return err }},
	}
	for _, sg := range signals {
		for _, bad := range badPayloads(sg.field) {
			t.Run(sg.name+"/"+bad.name, func(t *testing.T) {
				err := sg.decode(bad.payload)
				if err == nil {
					t.Fatalf("payload accepted; want it refused")
				}
				if strings.Contains(err.Error(), marker) || len(err.Error()) > 200 {
					t.Errorf("error %q repeats the payload", err)
				}
			})
		}
	}
	t.Run("ticket/empty", func(t *testing.T) {
		if _, err := decodeSignal(jsonPayload(`{"ticket":""}`), crewlet.TicketSignal.Validate); err == nil {
			t.Fatal("empty ticket accepted")
		}
	})
	t.Run("wrong type names the field", func(t *testing.T) {
		_, err := decodeSignal(jsonPayload(`{"stop_turn":"yes"}`), crewlet.PauseRequest.Validate)
		eq(t, "error", fmt.Sprint(err), "stop_turn: not a bool")
	})
}

// Every string field of every checked payload is bounded, so a field added
// to a payload type without a check fails here.
func TestDecodeSignalBoundsEveryField(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		typ    reflect.Type
		decode func(converter.RawValue) error
	}{
		{reflect.TypeFor[crewlet.PauseRequest](), func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.PauseRequest.Validate); return err }},
		{reflect.TypeFor[crewlet.ResumeRequest](), func(r converter.RawValue) error {
			_, err := decodeSignal(r, crewlet.ResumeRequest.Validate)
			return err
		}},
		{reflect.TypeFor[crewlet.DrainRequest](), func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.DrainRequest.Validate); return err }},
		{reflect.TypeFor[crewlet.MoveRequest](), func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.MoveRequest.Validate); return err }},
		{reflect.TypeFor[crewlet.StopRequest](), func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.StopRequest.Validate); return err }},
		{reflect.TypeFor[crewlet.StopTurnRequest](), func(r converter.RawValue) error {
			_, err := decodeSignal(r, crewlet.StopTurnRequest.Validate)
			return err
		}},
		{reflect.TypeFor[crewlet.TicketSignal](), func(r converter.RawValue) error { _, err := decodeSignal(r, crewlet.TicketSignal.Validate); return err }},
	} {
		for i := range tc.typ.NumField() {
			f := tc.typ.Field(i)
			if f.Type.Kind() != reflect.String {
				continue
			}
			name := jsonFields(tc.typ)[i]
			t.Run(tc.typ.Name()+"."+name, func(t *testing.T) {
				over := strings.Repeat("a", crewlet.MaxReasonBytes+1)
				if err := tc.decode(jsonPayload(fmt.Sprintf(`{%q:%q}`, name, over))); err == nil {
					t.Errorf("%s of %d bytes accepted; want every string field bounded", name, len(over))
				}
			})
		}
	}
}

// What crewlet sends decodes exactly as the SDK's JSON converter decoded it
// before payloads were checked: the recorded histories' payloads, and ones
// the seats and the API send.
func TestDecodeSignalAcceptsWhatCrewletSends(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, raw converter.RawValue, decode func(converter.RawValue) (any, error), want any) {
		t.Helper()
		got, err := decode(raw)
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		eq(t, "decoded", got, want)
		// The SDK's own decoding of the same payload.
		sdk := reflect.New(reflect.TypeOf(want))
		if err := converter.GetDefaultDataConverter().FromPayload(raw.Payload(), sdk.Interface()); err != nil {
			t.Fatalf("SDK decode: %v", err)
		}
		eq(t, "decoded as the SDK does", got, sdk.Elem().Interface())
	}
	pause := func(r converter.RawValue) (any, error) { return decodeSignal(r, crewlet.PauseRequest.Validate) }
	resume := func(r converter.RawValue) (any, error) { return decodeSignal(r, crewlet.ResumeRequest.Validate) }
	drain := func(r converter.RawValue) (any, error) { return decodeSignal(r, crewlet.DrainRequest.Validate) }
	move := func(r converter.RawValue) (any, error) { return decodeSignal(r, crewlet.MoveRequest.Validate) }
	stop := func(r converter.RawValue) (any, error) { return decodeSignal(r, crewlet.StopRequest.Validate) }
	stopTurn := func(r converter.RawValue) (any, error) { return decodeSignal(r, crewlet.StopTurnRequest.Validate) }
	ticket := func(r converter.RawValue) (any, error) { return decodeSignal(r, crewlet.TicketSignal.Validate) }
	for _, tc := range []struct {
		name   string
		raw    converter.RawValue
		decode func(converter.RawValue) (any, error)
		want   any
	}{
		// testdata/seat_history.json and seat_failover_history.json.
		{"recorded pause", jsonPayload(`{"stop_turn":false,"reason":"reviewing","by":""}`), pause, crewlet.PauseRequest{Reason: "reviewing"}},
		{"recorded resume", jsonPayload(`{"by":""}`), resume, crewlet.ResumeRequest{}},
		{"recorded drain", jsonPayload(`{"reason":"","by":""}`), drain, crewlet.DrainRequest{}},
		{"recorded move", jsonPayload(`{"exclude_node":"n2:773ddc4a","reason":"node drain","by":"n2:773ddc4a"}`), move,
			crewlet.MoveRequest{ExcludeNode: "n2:773ddc4a", Reason: "node drain", By: "n2:773ddc4a"}},
		// What the code sends.
		{"pause with stop_turn", payloadOf(t, crewlet.PauseRequest{StopTurn: true, Reason: "wrong repo — stop ✋", By: "Jürgen.o-l_a@example.com"}), pause,
			crewlet.PauseRequest{StopTurn: true, Reason: "wrong repo — stop ✋", By: "Jürgen.o-l_a@example.com"}},
		{"reason with new lines, at its bound", payloadOf(t, crewlet.DrainRequest{Reason: strings.Repeat("a\n", crewlet.MaxReasonBytes/2), By: "ops"}), drain,
			crewlet.DrainRequest{Reason: strings.Repeat("a\n", crewlet.MaxReasonBytes/2), By: "ops"}},
		{"rebalance move", payloadOf(t, crewlet.MoveRequest{ExcludeNode: "host-1.example.com:0a1b2c3d", Reason: "rebalance", By: "rebalance"}), move,
			crewlet.MoveRequest{ExcludeNode: "host-1.example.com:0a1b2c3d", Reason: "rebalance", By: "rebalance"}},
		{"reconcile stop", payloadOf(t, crewlet.StopRequest{Reason: "seat is no longer an agent seat of the org", By: "reconcile"}), stop,
			crewlet.StopRequest{Reason: "seat is no longer an agent seat of the org", By: "reconcile"}},
		{"stop_turn", payloadOf(t, crewlet.StopTurnRequest{By: "olga", Reason: "wrong repo"}), stopTurn, crewlet.StopTurnRequest{By: "olga", Reason: "wrong repo"}},
		{"ticket", payloadOf(t, crewlet.TicketSignal{Ticket: "t-b8ad4d07e7d9"}), ticket, crewlet.TicketSignal{Ticket: "t-b8ad4d07e7d9"}},
		// Sent by hand: `temporal workflow signal` without --input, or null.
		{"no input", converter.RawValue{}, pause, crewlet.PauseRequest{}},
		{"nil input", payloadOf(t, nil), stop, crewlet.StopRequest{}},
		{"JSON null", jsonPayload(`null`), resume, crewlet.ResumeRequest{}},
		{"a field left out", jsonPayload(`{"by":"olga"}`), pause, crewlet.PauseRequest{By: "olga"}},
		{"a field null", jsonPayload(`{"reason":null,"by":"olga"}`), drain, crewlet.DrainRequest{By: "olga"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.raw.Payload() == nil {
				got, err := tc.decode(tc.raw)
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				eq(t, "decoded", got, tc.want)
				return
			}
			check(t, tc.raw, tc.decode, tc.want)
		})
	}
}

func TestClipText(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in    string
		limit int
		want  string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefg…"},
		{"ééééééé", 10, "ééé…"}, // é is 2 bytes: never cut inside one
	} {
		got := clipText(tc.in, tc.limit)
		eq(t, fmt.Sprintf("clipText(%q, %d)", tc.in, tc.limit), got, tc.want)
		if len(got) > tc.limit || !utf8.ValidString(got) {
			t.Errorf("clipText(%q, %d) = %q: over the limit or not UTF-8", tc.in, tc.limit, got)
		}
	}
}

// logRecorder keeps what workflows log through workflow.GetLogger, with an
// interceptor (the test environment's logger is fixed when it is made).
type logRecorder struct {
	mu    sync.Mutex
	lines []logLine
}

type logLine struct {
	level, msg string
	kv         map[string]string
}

func (r *logRecorder) add(level, msg string, keyvals []any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	kv := map[string]string{}
	for i := 0; i+1 < len(keyvals); i += 2 {
		kv[fmt.Sprint(keyvals[i])] = fmt.Sprint(keyvals[i+1])
	}
	r.lines = append(r.lines, logLine{level: level, msg: msg, kv: kv})
}

// rejected lists the signal_rejected lines as "signal: error".
func (r *logRecorder) rejected() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		if l.msg == "signal_rejected" {
			out = append(out, l.kv["signal"]+": "+l.kv["error"])
		}
	}
	return out
}

// leaks reports a log line that holds the marker every bad payload carries.
func (r *logRecorder) leaks() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, l := range r.lines {
		for k, v := range l.kv {
			if strings.Contains(v, marker) || strings.Contains(k, marker) {
				out = append(out, fmt.Sprintf("%s %s (%d bytes)", l.msg, k, len(v)))
			}
		}
	}
	return out
}

type recordingLogger struct {
	rec *logRecorder
}

func (l recordingLogger) Debug(msg string, kv ...any) { l.rec.add("debug", msg, kv) }
func (l recordingLogger) Info(msg string, kv ...any)  { l.rec.add("info", msg, kv) }
func (l recordingLogger) Warn(msg string, kv ...any)  { l.rec.add("warn", msg, kv) }
func (l recordingLogger) Error(msg string, kv ...any) { l.rec.add("error", msg, kv) }

type recordLogs struct {
	interceptor.WorkerInterceptorBase
	rec *logRecorder
}

func (i *recordLogs) InterceptWorkflow(_ workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	return &recordLogsInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, rec: i.rec}
}

type recordLogsInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	rec *logRecorder
}

func (i *recordLogsInbound) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&recordLogsOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}, rec: i.rec})
}

type recordLogsOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	rec *logRecorder
}

func (o *recordLogsOutbound) GetLogger(workflow.Context) log.Logger { return recordingLogger{o.rec} }

// recordLogsOf makes env's workflows log to the returned recorder.
func recordLogsOf(env *testsuite.TestWorkflowEnvironment) *logRecorder {
	rec := &logRecorder{}
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&recordLogs{rec: rec}}})
	return rec
}

// wantRejected checks every bad payload was logged as rejected, once, under
// its signal's name, and none leaked into a log line.
func wantRejected(t *testing.T, rec *logRecorder, name string, n int) {
	t.Helper()
	got := rec.rejected()
	if len(got) != n {
		t.Errorf("signal_rejected lines: got %d %q, want %d", len(got), got, n)
	}
	for _, l := range got {
		if !strings.HasPrefix(l, name+": ") || len(l) == len(name)+2 {
			t.Errorf("signal_rejected line %q: want signal %s and why", l, name)
		}
	}
	if leaks := rec.leaks(); len(leaks) > 0 {
		t.Errorf("a rejected payload reached the log: %q", leaks)
	}
}

// Bad payloads sent straight to a seat (as `temporal workflow signal` could)
// are ignored and logged: the seat's state does not change, mail published
// after them is answered, and the next valid signal, of any kind, applies.
func TestSeatIgnoresBadSignalPayloads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		field string
		// paused pauses the seat first (resume needs something to lift).
		paused bool
	}{
		{crewlet.SignalPause, "reason", false},
		{crewlet.SignalDrain, "reason", false},
		{crewlet.SignalMove, "exclude_node", false},
		{crewlet.SignalStop, "reason", false},
		{crewlet.SignalResume, "by", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newSeatHarness(t)
			rec := recordLogsOf(h.env)
			bad := badPayloads(tc.field)
			h.publish(time.Second, "m1")
			if tc.paused {
				h.signal(10*time.Second, crewlet.SignalPause, crewlet.PauseRequest{Reason: "review", By: "olga"})
			}
			// One at a time, and a burst in one workflow task.
			for i, b := range bad[:len(bad)/2] {
				h.signal(time.Minute+time.Duration(i)*time.Second, tc.name, b.payload)
			}
			h.at(2*time.Minute, func() {
				for _, b := range bad[len(bad)/2:] {
					h.env.SignalWorkflow(tc.name, b.payload)
				}
			})
			h.publish(3*time.Minute, "m2")
			after := h.view(10 * time.Minute)
			// A valid signal of another kind: the signal coroutine is not
			// stuck on the bad ones.
			then := crewlet.SignalDrain
			if tc.name == crewlet.SignalDrain {
				then = crewlet.SignalPause
			}
			h.signal(11*time.Minute, then, map[string]any{"reason": "after", "by": "ops"})
			h.publish(12*time.Minute, "m3")
			last := h.view(20 * time.Minute)
			h.run(seatIn(), time.Hour)

			wantRejected(t, rec, tc.name, len(bad))
			eq(t, "epoch (no move, no drain)", after.state.Epoch, int64(1))
			eq(t, "node", after.state.Node, "node-a")
			eq(t, "drain", after.state.Drain, (*crewlet.DrainHold)(nil))
			eq(t, "detaches", after.detaches, 0)
			if tc.paused {
				eq(t, "status (still paused)", after.state.Status, crewlet.StatusPaused)
				eq(t, "pause (unchanged)", after.state.Pause != nil && after.state.Pause.By == "olga", true)
				eq(t, "turns run (the held mail waits)", after.turns, ids("m1"))
			} else {
				eq(t, "status", after.state.Status, crewlet.StatusIdle)
				eq(t, "pause", after.state.Pause, (*crewlet.PauseHold)(nil))
				eq(t, "turns run (the seat keeps serving)", after.turns, ids("m1", "m2"))
				eq(t, "acked", after.acked, ids("m1", "m2"))
			}
			if then == crewlet.SignalDrain {
				eq(t, "status after a valid drain", last.state.Status, crewlet.StatusDrained)
			} else {
				eq(t, "status after a valid pause", last.state.Status, crewlet.StatusPaused)
			}
			if tc.paused {
				// The drain keeps the pause; resume lifts both (TestSeatDrain).
				eq(t, "drain by", last.state.Drain != nil && last.state.Drain.By == "ops", true)
			}
		})
	}
}

// A valid payload still applies when sent as raw JSON, as the recorded
// histories and `temporal workflow signal --input` send it.
func TestSeatAppliesValidRawSignals(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	rec := recordLogsOf(h.env)
	h.publish(time.Second, "m1")
	h.signal(time.Minute, crewlet.SignalPause, jsonPayload(`{"stop_turn":false,"reason":"reviewing","by":""}`))
	h.publish(2*time.Minute, "m2")
	paused := h.view(5 * time.Minute)
	h.signal(6*time.Minute, crewlet.SignalResume, jsonPayload(`{"by":""}`))
	resumed := h.view(10 * time.Minute)
	h.signal(11*time.Minute, crewlet.SignalMove, jsonPayload(`{"exclude_node":"node-a","reason":"node drain","by":"n2:773ddc4a"}`))
	moved := h.view(15 * time.Minute)
	h.signal(16*time.Minute, crewlet.SignalDrain, jsonPayload(`{"reason":"","by":""}`))
	drained := h.view(20 * time.Minute)
	h.signal(21*time.Minute, crewlet.SignalStop, jsonPayload(`{"reason":"removed","by":"reconcile"}`))
	h.at(20*time.Hour, h.env.CancelWorkflow)
	if err := h.run(seatIn(), 0); err != nil {
		t.Fatalf("seat ended with %v; want it stopped", err)
	}
	end := h.final()

	eq(t, "status after pause", paused.state.Status, crewlet.StatusPaused)
	eq(t, "pause reason", paused.state.Pause != nil && paused.state.Pause.Reason == "reviewing", true)
	eq(t, "turns while paused", paused.turns, ids("m1"))
	eq(t, "status after resume", resumed.state.Status, crewlet.StatusIdle)
	eq(t, "turns after resume", resumed.turns, ids("m1", "m2"))
	eq(t, "node after move", moved.state.Node, "node-b")
	eq(t, "epoch after move", moved.state.Epoch, int64(2))
	eq(t, "status after drain", drained.state.Status, crewlet.StatusDrained)
	eq(t, "status after stop", end.state.Status, crewlet.StatusStopped)
	eq(t, "rejected", rec.rejected(), []string(nil))
}

// A wake is a hint: whatever it carries, it wakes the seat.
func TestSeatWakesOnAnyPayload(t *testing.T) {
	t.Parallel()
	for _, p := range []struct {
		name    string
		payload any
	}{
		{"nil", nil},
		{"a string", jsonPayload(`"` + marker + `"`)},
		{"an object", jsonPayload(`{"` + marker + `":1}`)},
		{"raw bytes", bytesPayload(marker)},
		{"not JSON", jsonPayload(`{`)},
	} {
		t.Run(p.name, func(t *testing.T) {
			h := newSeatHarness(t)
			rec := recordLogsOf(h.env)
			h.at(time.Minute, func() {
				h.world.publish("m1")
				h.env.SignalWorkflow(crewlet.SignalWake, p.payload)
			})
			// Well before the backstop timer would read the mailbox.
			v := h.view(time.Minute + 10*time.Second)
			h.run(seatIn(), time.Hour)
			eq(t, "turns run", v.turns, ids("m1"))
			eq(t, "rejected", rec.rejected(), []string(nil))
		})
	}
}

// The case: a 200 KB pause reason is refused, so the seat is not
// paused and its continue-as-new carry stays small.
func TestSeatRefusesAHugePauseReason(t *testing.T) {
	t.Parallel()
	h := newSeatHarness(t)
	rec := recordLogsOf(h.env)
	h.publish(time.Second, "m1")
	h.signal(time.Minute, crewlet.SignalPause, map[string]any{"reason": strings.Repeat("x", 200<<10), "by": "olga"})
	h.publish(2*time.Minute, "m2")
	h.at(10*time.Minute, func() {
		h.env.SetContinueAsNewSuggested(true)
		h.env.SignalWorkflow(crewlet.SignalWake, nil)
	})
	next := decodeCarry(t, h.run(seatIn(), 0))

	eq(t, "carried pause", next.Carry.State.Pause, (*crewlet.PauseHold)(nil))
	eq(t, "turns run", h.world.turnNames(), ids("m1", "m2"))
	wantRejected(t, rec, crewlet.SignalPause, 1)
	b, err := json.Marshal(next)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > 4<<10 {
		t.Errorf("carry of a seat with no hold: %d bytes; want a few hundred", len(b))
	}
}

// A seat's continue-as-new input, with every carried field at its bound and
// its strings the worst case for JSON (each byte escaped to six), stays under
// maxCarryBytes, far below Temporal's 2 MiB payload limit. State taken in
// before signals were checked (a 200 KB reason) is clipped to the same bound.
func TestSeatCarryIsBounded(t *testing.T) {
	t.Parallel()
	worst := func(n int) string { return strings.Repeat("<", n) } // "\u003c" in JSON
	id := func(n int) string { return strings.Repeat("é", n/2) }  // letters; no escapes
	node := strings.Repeat("n", crewlet.MaxNodeBytes)
	handle := strings.Repeat("h", 63) // crewlet.ValidName's bound
	turnID := crewlet.TurnWorkflowID(handle, strings.Repeat("k", 32))
	since := time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	exclude := make([]string, 1000)
	for i := range exclude {
		exclude[i] = node
	}
	seatAt := func(reason, by, lastError string) *seat {
		return &seat{
			in: crewlet.SeatInput{Handle: handle, Role: handle, ReadBatch: 1 << 20, HeartbeatTimeout: time.Hour, ReleaseWait: time.Hour, RetryBackoff: time.Hour},
			state: crewlet.SeatState{
				Handle: handle, Role: handle, Status: crewlet.StatusEstablishing, Epoch: 1 << 62,
				Node: node, HostQueue: "crewlet.host." + node,
				Pause: &crewlet.PauseHold{By: by, Reason: reason, StopTurn: true, Since: since},
				Drain: &crewlet.DrainHold{By: by, Reason: reason, Since: since},
				Turn:  &crewlet.CurrentTurn{ID: turnID, WorkKey: strings.Repeat("k", 32), Triggers: 1 << 30, StartedAt: since},
				Budget: &crewlet.BudgetHold{Scope: crewlet.ScopeCompany, Window: crewlet.WindowMonth, Cap: 1 << 62, Used: 1 << 62,
					ResetsAt: since},
				QueuedMail: 1 << 62, LastError: lastError, FailedTurn: turnID,
				Counters: crewlet.SeatCounters{Turns: 1 << 62, Triggers: 1 << 62, Skipped: 1 << 62, Failures: 1 << 62,
					Establishes: 1 << 62, ContinuedRuns: 1 << 62},
			},
			attached: true, wakePending: true, hostLost: true,
			move:    &crewlet.MoveRequest{ExcludeNode: node, Reason: reason, By: by},
			exclude: exclude,
		}
	}
	for _, tc := range []struct {
		name string
		s    *seat
	}{
		{"every field at its bound", seatAt(worst(crewlet.MaxReasonBytes), id(crewlet.MaxByBytes), worst(maxLastErrorBytes))},
		{"state from before the checks", seatAt(worst(200<<10), id(10<<10), worst(1<<20))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next := tc.s.next()
			b, err := json.Marshal(next)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("carry: %d bytes (bound %d)", len(b), maxCarryBytes)
			if len(b) > maxCarryBytes {
				t.Errorf("carry is %d bytes; want at most maxCarryBytes (%d)", len(b), maxCarryBytes)
			}
			c := next.Carry
			eq(t, "pause reason within its bound", len(c.State.Pause.Reason) <= crewlet.MaxReasonBytes, true)
			eq(t, "move by within its bound", len(c.Move.By) <= crewlet.MaxByBytes, true)
			eq(t, "last error within its bound", len(c.State.LastError) <= maxLastErrorBytes, true)
			eq(t, "excluded nodes (the newest)", len(c.Exclude), maxCarriedExclude)
		})
	}
	t.Run("a valid state is carried unchanged", func(t *testing.T) {
		s := seatAt("upgrade", "olga", "read mail: timeout")
		s.exclude, s.hostLost = ids("node-b"), false
		next := s.next()
		eq(t, "state", next.Carry.State, s.state)
		eq(t, "move", next.Carry.Move, s.move)
		eq(t, "exclude", next.Carry.Exclude, ids("node-b"))
	})
}

// A turn ignores bad stop_turn and ticket payloads, during its rounds and
// while it waits on a ticket, logs them, and goes on; the valid ones after
// them still apply.
func TestTurnIgnoresBadSignalPayloads(t *testing.T) {
	t.Parallel()
	t.Run("stop_turn during a round", func(t *testing.T) {
		h := newTurnHarness(t)
		rec := recordLogsOf(h.env)
		h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{write(0, "fs__write")}}}
		bad := badPayloads("reason")
		h.world.duringRound = func(round int) {
			if round == 1 {
				for _, b := range bad {
					h.env.SignalWorkflow(crewlet.SignalStopTurn, b.payload)
				}
			}
		}
		out, err := h.run()
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "status (not stopped)", out.Status, crewlet.TurnDone)
		eq(t, "rounds", out.Rounds, 2)
		wantRejected(t, rec, crewlet.SignalStopTurn, len(bad))
	})

	t.Run("stop_turn during a round, then a valid one", func(t *testing.T) {
		h := newTurnHarness(t)
		h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{write(0, "fs__write")}}}
		h.world.duringRound = func(round int) {
			if round == 1 {
				h.env.SignalWorkflow(crewlet.SignalStopTurn, jsonPayload(`{"by":5}`))
				h.env.SignalWorkflow(crewlet.SignalStopTurn, jsonPayload(`{"by":"alice","reason":"wrong repo"}`))
			}
		}
		out, err := h.run()
		if err != nil {
			t.Fatal(err)
		}
		eq(t, "status", out.Status, crewlet.TurnStopped)
		eq(t, "stopped by", h.world.finished.StoppedBy, "alice")
	})

	for _, tc := range []struct {
		name string
		// then is the valid signal that ends the wait.
		then     func(h *turnHarness)
		resolved string
	}{
		{"while waiting, then the ticket's signal", func(h *turnHarness) {
			h.env.SignalWorkflow(crewlet.SignalTicket, crewlet.TicketSignal{Ticket: "t-1"})
		}, `resolve t-1 timed_out=false stopped_by=""`},
		{"while waiting, then a stop", func(h *turnHarness) {
			h.env.SignalWorkflow(crewlet.SignalStopTurn, crewlet.StopTurnRequest{By: "alice"})
		}, `resolve t-1 timed_out=false stopped_by="alice"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newTurnHarness(t)
			rec := recordLogsOf(h.env)
			h.world.rounds = []roundScript{{calls: []crewlet.ToolCallRef{write(0, "delegate")}}}
			h.world.wait = &crewlet.TicketWait{Ticket: "t-1", Kind: crewlet.WaitSettle, For: time.Hour}
			badTickets, badStops := badPayloads("ticket"), badPayloads("by")
			h.env.RegisterDelayedCallback(func() {
				for _, b := range badTickets {
					h.env.SignalWorkflow(crewlet.SignalTicket, b.payload)
				}
				for _, b := range badStops {
					h.env.SignalWorkflow(crewlet.SignalStopTurn, b.payload)
				}
			}, 5*time.Minute)
			var during crewlet.TurnProgress
			h.env.RegisterDelayedCallback(func() {
				if v, err := h.env.QueryWorkflow(crewlet.QueryState); err == nil {
					_ = v.Get(&during)
				}
				tc.then(h)
			}, 10*time.Minute)
			if _, err := h.run(); err != nil {
				t.Fatal(err)
			}
			if during.Waiting == nil || during.Waiting.Ticket != "t-1" || during.StopRequested != "" {
				t.Errorf("state after the bad signals: %+v; want still waiting on t-1, no stop", during)
			}
			h.world.mu.Lock()
			eq(t, "resolved", h.world.log[5], tc.resolved)
			h.world.mu.Unlock()
			got := rec.rejected()
			eq(t, "rejected", len(got), len(badTickets)+len(badStops))
			if leaks := rec.leaks(); len(leaks) > 0 {
				t.Errorf("a rejected payload reached the log: %q", leaks)
			}
		})
	}
}
