package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// Model access that rides out provider trouble
// (docs/architecture.md, "Profile pools"), against OpenAI-compatible servers
// run in the test: a quota outage fails turns over and then holds them,
// max_load holds across nodes, and the model gate reaches every node.

// fakeProvider is an OpenAI-compatible chat-completions server whose
// behaviour the test switches: it answers "answer from NAME", refuses every
// call with a quota error (HTTP 429 insufficient_quota), or fails every call
// with a server error status. It counts the calls it is in at once.
type fakeProvider struct {
	name  string
	delay time.Duration
	// answerAs, when set, is the model the server says answered, whatever
	// was asked for.
	answerAs string
	start    time.Time
	srv      *httptest.Server

	mu          sync.Mutex
	quota       bool
	downStatus  int
	inFlight    int
	maxInFlight int
	answered    int
	refused     int
	timeline    []string
}

func newFakeProvider(t *testing.T, name string, delay time.Duration, start time.Time) *fakeProvider {
	f := &fakeProvider{name: name, delay: delay, start: start}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeProvider) url() string { return f.srv.URL + "/v1" }

func (f *fakeProvider) setQuota(on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.quota = on
}

// setDown makes the server fail every call with status (a 5xx); 0 brings it
// back.
func (f *fakeProvider) setDown(status int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.downStatus = status
}

func (f *fakeProvider) counts() (answered, refused, maxInFlight int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answered, f.refused, f.maxInFlight
}

func (f *fakeProvider) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model string `json:"model"`
	}
	if r.URL.Path != "/v1/chat/completions" || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "not a chat completion", http.StatusNotFound)
		return
	}
	f.mu.Lock()
	at := time.Since(f.start).Round(100 * time.Millisecond)
	if f.quota {
		f.refused++
		f.timeline = append(f.timeline, fmt.Sprintf("%6s %s refused (429 quota)", at, f.name))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"message":"You exceeded your current quota, please check your plan and billing details.","type":"insufficient_quota","code":"insufficient_quota"}}`))
		return
	}
	if status := f.downStatus; status != 0 {
		f.refused++
		f.timeline = append(f.timeline, fmt.Sprintf("%6s %s failed (%d)", at, f.name, status))
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"error":{"message":"The service is temporarily unavailable.","type":"server_error"}}`))
		return
	}
	f.inFlight++
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.mu.Unlock()
	time.Sleep(f.delay)
	f.mu.Lock()
	f.inFlight--
	f.answered++
	f.timeline = append(f.timeline, fmt.Sprintf("%6s %s answered", at, f.name))
	f.mu.Unlock()
	model := req.Model
	if f.answerAs != "" {
		model = f.answerAs
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": "stop",
			"message": map[string]any{"role": "assistant", "content": "answer from " + f.name}}},
		"usage": map[string]any{"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
	})
}

// profiles returns GET /profiles keyed by name.
func (c *company) profiles() map[string]crewlet.ProfileStatus {
	c.t.Helper()
	var v api.ProfilesView
	if err := c.call(http.MethodGet, "/profiles", nil, &v); err != nil {
		c.t.Fatalf("GET /profiles: %v", err)
	}
	out := map[string]crewlet.ProfileStatus{}
	for _, p := range v.Profiles {
		out[p.Name] = p
	}
	return out
}

// deliveries returns how often each of a seat's unacked entries was
// delivered.
func (c *company) deliveries(handle string) map[string]int64 {
	c.t.Helper()
	d, err := c.mailbox().Deliveries(context.Background(), handle)
	if err != nil {
		c.t.Fatal(err)
	}
	return d
}

// A quota outage, first on one provider and then on both: turns fail over
// to the second with no trigger redelivered, GET /profiles shows the
// quarantine, and when both refuse the triggers are held (no dead letter,
// no delivery spent) and answered once the quarantine lifts.
func TestQuotaOutageFailsOverThenHoldsThenRecovers(t *testing.T) {
	start := time.Now()
	first := newFakeProvider(t, "first", 200*time.Millisecond, start)
	second := newFakeProvider(t, "second", 200*time.Millisecond, start)
	c := pooledCompany(t, "outage", first.url(), second.url(), "quarantine: { base: 10s }\nhealth: { interval: 1s }")
	step := stepLog(t, start)

	// Both answer: ordered selection takes the first.
	if got := c.waitReply(c.send("w1", "before"), 60*time.Second); got != "answer from first" {
		t.Fatalf("reply before the outage: %q; want the first profile's", got)
	}
	step("both up: w1 answered by first")

	// The first runs out: the turn that meets it fails over within itself.
	first.setQuota(true)
	step("first starts refusing (quota)")
	for i, seat := range []string{"w1", "w2", "w1"} {
		msg := c.send(seat, fmt.Sprintf("during %d", i))
		if got := c.waitReply(msg, 60*time.Second); got != "answer from second" {
			t.Fatalf("reply %d during the outage: %q; want the second profile's", i, got)
		}
		step("%s answered by second", seat)
	}
	if _, refused, _ := first.counts(); refused != 1 {
		t.Errorf("first was asked %d times while it refused; want once: its quarantine keeps later turns off it", refused)
	}
	q := c.profiles()["first"]
	if q.Quarantine == nil || q.Quarantine.Attempt != 1 || q.Quarantine.SecondsLeft <= 0 || q.Free == nil || *q.Free != 0 ||
		!strings.Contains(q.Quarantine.Reason, "quota") {
		t.Fatalf("GET /profiles first: %+v (quarantine %+v); want quarantined, attempt 1, free 0, with the provider's reason", q, q.Quarantine)
	}
	step("GET /profiles: first quarantined %ds, attempt %d", q.Quarantine.SecondsLeft, q.Quarantine.Attempt)
	for _, seat := range []string{"w1", "w2"} {
		if st := c.state(seat); st.Counters.Failures != 0 || st.LastError != "" {
			t.Fatalf("seat %s: %d failed turns, last error %q; want none: a failover happens inside the turn, nothing is redelivered", seat, st.Counters.Failures, st.LastError)
		}
	}

	// Both run out: the triggers are held, read once, unanswered.
	second.setQuota(true)
	step("second starts refusing too")
	held := []crewlet.Message{c.send("w1", "held 1"), c.send("w2", "held 2")}
	var holdUntil time.Time
	for _, m := range held {
		testenv.Eventually(t, 60*time.Second, "turn of "+m.Body+" held", func() error {
			st := c.state(m.To)
			if st.Turn == nil || st.Turn.Progress == nil || st.Turn.Progress.Held == nil {
				return fmt.Errorf("seat %s: turn %+v", m.To, st.Turn)
			}
			if u := st.Turn.Progress.Held.Until; u != nil && u.After(holdUntil) {
				holdUntil = *u
			}
			return nil
		})
	}
	step("both seats' turns held for a profile until %s", holdUntil.Sub(start).Round(100*time.Millisecond))
	before := map[string]map[string]int64{"w1": c.deliveries("w1"), "w2": c.deliveries("w2")}
	for seat, d := range before {
		if len(d) != 1 {
			t.Fatalf("seat %s unacked entries %v; want its held trigger only", seat, d)
		}
		for id, n := range d {
			if n != 1 {
				t.Fatalf("seat %s entry %s delivered %d times; want once: a held turn reads its triggers once", seat, id, n)
			}
		}
	}
	ps := c.profiles()
	if ps["first"].Quarantine == nil && ps["second"].Quarantine == nil {
		t.Fatalf("GET /profiles while held: %+v; want a quarantine", ps)
	}
	step("GET /profiles: first %+v, second %+v", ps["first"].Quarantine, ps["second"].Quarantine)
	// The health duty sees the hold in the pool's waiters.
	if cause := c.waitHealth("w1", crewlet.HealthHeld, 20*time.Second); !strings.Contains(cause, "for a profile") {
		t.Fatalf("w1's health cause %q; want a profile hold", cause)
	}

	// The providers recover; the held turns run when the quarantine lifts,
	// without being read again.
	first.setQuota(false)
	second.setQuota(false)
	step("both providers recover")
	for _, m := range held {
		got := c.waitReply(m, 90*time.Second)
		if !strings.HasPrefix(got, "answer from ") {
			t.Fatalf("reply to %s: %q; want a model's answer", m.Body, got)
		}
		step("%s: %s", m.Body, got)
	}
	if dl := c.deadLetters(); len(dl) != 0 {
		t.Fatalf("dead letters after the outage: %+v; want none", dl)
	}
	for _, seat := range []string{"w1", "w2"} {
		if st := c.state(seat); st.Counters.Failures != 0 {
			t.Fatalf("seat %s: %d failed turns; want none", seat, st.Counters.Failures)
		}
	}
	first.mu.Lock()
	second.mu.Lock()
	t.Logf("provider timeline:\n%s\n%s", strings.Join(first.timeline, "\n"), strings.Join(second.timeline, "\n"))
	second.mu.Unlock()
	first.mu.Unlock()
}

// A provider that is down (503 to every call) fails turns over to the
// pool's other profile within the turn: every message is answered by the
// working one, the down one is asked once and shown cooling off, nothing is
// redelivered or dead-lettered. When both are down the trigger is held and
// answered once one is back.
func TestProviderDownFailsOverThenHoldsThenRecovers(t *testing.T) {
	start := time.Now()
	first := newFakeProvider(t, "first", 0, start)
	second := newFakeProvider(t, "second", 0, start)
	first.setDown(http.StatusServiceUnavailable)
	c := pooledCompany(t, "down", first.url(), second.url(), "health: { interval: 1s }")
	step := stepLog(t, start)

	for i, seat := range []string{"w1", "w2", "w1", "w2"} {
		if got := c.waitReply(c.send(seat, fmt.Sprintf("while first is down %d", i)), 60*time.Second); got != "answer from second" {
			t.Fatalf("reply %d while first is down: %q; want the second profile's", i, got)
		}
		step("%s answered by second", seat)
	}
	if _, refused, _ := first.counts(); refused != 1 {
		t.Errorf("first was asked %d times while down; want once: its cooling-off keeps later turns off it", refused)
	}
	if p := c.profiles()["first"]; p.CoolingOff == nil || p.CoolingOff.SecondsLeft <= 0 || !strings.Contains(p.CoolingOff.Reason, "unavailable") {
		t.Fatalf("GET /profiles first: %+v (cooling off %+v); want cooling off with the provider's reason", p, p.CoolingOff)
	}
	wantNoFailures(t, c)

	// Both down: the trigger is held, read once, and answered once second
	// is back and its cooling-off ends.
	second.setDown(http.StatusBadGateway)
	step("second fails too (502)")
	held := c.send("w1", "while both are down")
	testenv.Eventually(t, 60*time.Second, "turn held for a profile", func() error {
		if st := c.state("w1"); st.Turn == nil || st.Turn.Progress == nil || st.Turn.Progress.Held == nil {
			return fmt.Errorf("seat w1: turn %+v", st.Turn)
		}
		return nil
	})
	step("w1's turn held")
	for id, n := range c.deliveries("w1") {
		if n != 1 {
			t.Fatalf("w1 entry %s delivered %d times; want once: a held turn reads its triggers once", id, n)
		}
	}
	second.setDown(0)
	step("second is back")
	if got := c.waitReply(held, 120*time.Second); got != "answer from second" {
		t.Fatalf("reply while both were down: %q; want the second profile's once it is back", got)
	}
	step("held message answered by second")
	wantNoFailures(t, c)
	first.mu.Lock()
	second.mu.Lock()
	t.Logf("provider timeline:\n%s\n%s", strings.Join(first.timeline, "\n"), strings.Join(second.timeline, "\n"))
	second.mu.Unlock()
	first.mu.Unlock()
}

// A profile whose provider refuses the connection (a closed loopback port)
// fails turns over to the pool's other profile at the first refusal: every
// message is answered, none dead-lettered.
func TestRefusedConnectionFailsOver(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	alive := newFakeProvider(t, "alive", 0, time.Now())
	c := pooledCompany(t, "refused", "http://"+closed+"/v1", alive.url(), "")
	// One at a time: the first turn alone meets the refusal, and fails
	// over by itself, not because a second turn's failure joined it.
	for i, seat := range []string{"w1", "w2", "w1"} {
		if got := c.waitReply(c.send(seat, fmt.Sprintf("message %d", i)), 60*time.Second); got != "answer from alive" {
			t.Fatalf("reply %d: %q; want the reachable profile's", i, got)
		}
	}
	if p := c.profiles()["first"]; p.CoolingOff == nil || !strings.Contains(p.CoolingOff.Reason, "refused") {
		t.Fatalf("GET /profiles first (the closed port): %+v (cooling off %+v); want cooling off for the refused connection", p, p.CoolingOff)
	}
	wantNoFailures(t, c)
}

// pooledCompany serves an org whose role pools two openai profiles, first
// and second at the given base URLs, taken in that order, on seats w1 and
// w2; extra is more of the org's top-level YAML.
func pooledCompany(t *testing.T, name, firstURL, secondURL, extra string) *company {
	t.Helper()
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(`
company: { name: %s }
%s
profiles:
  first: { provider: openai, base_url: %s, model: model-a }
  second: { provider: openai, base_url: %s, model: model-b }
roles:
  worker: { charter: works, profiles: [first, second], selection: ordered }
seats:
  - { handle: w1, role: worker }
  - { handle: w2, role: worker }
`, name, extra, firstURL, secondURL)))
	c.serve()
	c.waitAttached(60 * time.Second)
	return c
}

// stepLog logs a test's steps with the time since start.
func stepLog(t *testing.T, start time.Time) func(format string, args ...any) {
	return func(format string, args ...any) {
		t.Logf("%6s %s", time.Since(start).Round(100*time.Millisecond), fmt.Sprintf(format, args...))
	}
}

// wantNoFailures wants no dead letter and no failed turn on any seat of c.
func wantNoFailures(t *testing.T, c *company) {
	t.Helper()
	if dl := c.deadLetters(); len(dl) != 0 {
		t.Fatalf("dead letters: %+v; want none", dl)
	}
	for _, seat := range []string{"w1", "w2"} {
		if st := c.state(seat); st.Counters.Failures != 0 || st.LastError != "" {
			t.Fatalf("seat %s: %d failed turns, last error %q; want none: a failover happens inside the turn", seat, st.Counters.Failures, st.LastError)
		}
	}
}

// deadLetters returns GET /deadletters.
func (c *company) deadLetters() []json.RawMessage {
	c.t.Helper()
	var v []json.RawMessage
	if err := c.call(http.MethodGet, "/deadletters", nil, &v); err != nil {
		c.t.Fatalf("GET /deadletters: %v", err)
	}
	return v
}

// max_load is a fleet-wide count: six seats on two worker nodes, each sent
// a message at once, never have more than two calls at the server of a
// profile capped at two, and every message is answered.
func TestMaxLoadHoldsAcrossTwoNodes(t *testing.T) {
	start := time.Now()
	capped := newFakeProvider(t, "capped", 1500*time.Millisecond, start)
	var seats strings.Builder
	for i := 1; i <= 6; i++ {
		fmt.Fprintf(&seats, "  - { handle: s%02d, role: worker }\n", i)
	}
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(`
company: { name: capped }
nodes: { rebalance_interval: 1s }
profiles:
  capped: { provider: openai, base_url: %s, model: model-c, max_load: 2 }
roles:
  worker: { charter: works, profiles: [capped] }
seats:
%s`, capped.url(), seats.String())))
	c.apiServer()
	c.worker("node-a")
	c.worker("node-b")
	// node-a may have placed every seat before node-b was live; the
	// rebalance duty then gives node-b its share.
	testenv.Eventually(t, 60*time.Second, "seats spread over both nodes", func() error {
		nodes := map[string]bool{}
		for _, s := range c.seats() {
			nodes[s.Node] = true
		}
		if len(nodes) != 2 || nodes[""] {
			return fmt.Errorf("seats on %v", nodes)
		}
		return nil
	})
	c.waitAttached(60 * time.Second)
	var msgs []crewlet.Message
	for i := 1; i <= 6; i++ {
		msgs = append(msgs, c.send(fmt.Sprintf("s%02d", i), "go"))
	}
	var sawHeld bool
	for _, m := range msgs {
		testenv.Eventually(t, 90*time.Second, "reply to "+m.To, func() error {
			if st := c.state(m.To); st.Turn != nil && st.Turn.Progress != nil && st.Turn.Progress.Held != nil {
				sawHeld = true
			}
			if len(c.repliesTo(m)) == 0 {
				return fmt.Errorf("no reply yet")
			}
			return nil
		})
	}
	answered, _, most := capped.counts()
	t.Logf("6 turns on 2 nodes, max_load 2: %d calls answered, at most %d at once, a held turn seen: %v, in %s",
		answered, most, sawHeld, time.Since(start).Round(100*time.Millisecond))
	if most > 2 {
		t.Fatalf("the server saw %d calls at once; want at most max_load 2", most)
	}
	if most < 2 {
		t.Fatalf("the server saw at most %d call at once; want 2, or the cap was never tested", most)
	}
	if p := c.profiles()["capped"]; p.Live != 0 || p.Free == nil || *p.Free != 2 {
		t.Fatalf("GET /profiles after every turn ended: live %d free %v; want every slot given back", p.Live, p.Free)
	}
}

// A model switched off at runtime takes effect on the next turn on every
// node: its profile is skipped and turns go to the next of the pool; on
// again, turns come back to it. The model a provider says answered is
// recorded, and a mismatch shown.
func TestModelDisableReachesEveryNode(t *testing.T) {
	start := time.Now()
	a := newFakeProvider(t, "a", 0, start)
	b := newFakeProvider(t, "b", 0, start)
	b.answerAs = "model-b-2026-05"
	c := newCompany(t, writeFile(t, "org.yaml", fmt.Sprintf(`
company: { name: gate }
profiles:
  a: { provider: openai, base_url: %s, model: model-a }
  b: { provider: openai, base_url: %s, model: model-b }
roles:
  worker: { charter: works, profiles: [a, b], selection: ordered }
seats:
  - { handle: s01, role: worker }
  - { handle: s02, role: worker }
  - { handle: s03, role: worker }
  - { handle: s04, role: worker }
`, a.url(), b.url())))
	c.apiServer()
	c.worker("node-a")
	c.worker("node-b")
	c.waitAttached(60 * time.Second)
	byNode := map[string][]string{}
	for _, s := range c.seats() {
		byNode[s.Node] = append(byNode[s.Node], s.Handle)
	}
	if len(byNode) != 2 {
		t.Fatalf("seats by node %v; want both nodes holding seats", byNode)
	}
	round := func(want string) {
		t.Helper()
		for _, seat := range []string{"s01", "s02", "s03", "s04"} {
			if got := c.waitReply(c.send(seat, "which model?"), 60*time.Second); got != "answer from "+want {
				t.Fatalf("seat %s: %q; want the answer of %s", seat, got, want)
			}
		}
	}
	round("a")
	out, err := c.cli("models", "disable", "model-a", "--reason", "subscription ran out")
	if err != nil {
		t.Fatalf("crewlet models disable: %v: %s", err, out)
	}
	if p := c.profiles()["a"]; !p.Disabled || p.Free == nil || *p.Free != 0 {
		t.Fatalf("GET /profiles a after disable: %+v; want disabled", p)
	}
	if out, err := c.cli("profiles"); err != nil || !strings.Contains(out, "model disabled") {
		t.Fatalf("crewlet profiles: %v\n%s; want a's row saying its model is disabled", err, out)
	}
	round("b")
	ps := c.profiles()
	if ps["b"].AnsweredModel != "model-b-2026-05" || ps["a"].AnsweredModel != "" {
		t.Fatalf("GET /profiles answered models: a %q, b %q; want b's mismatch shown, a none", ps["a"].AnsweredModel, ps["b"].AnsweredModel)
	}
	var turns []wire.TurnRow
	if err := c.call(http.MethodGet, "/seats/s01/turns?limit=1", nil, &turns); err != nil || len(turns) != 1 {
		t.Fatalf("GET /seats/s01/turns: %v %+v", err, turns)
	}
	var view wire.TurnView
	if err := c.call(http.MethodGet, "/turns/s01/"+turns[0].WorkKey, nil, &view); err != nil || len(view.Receipts) == 0 {
		t.Fatalf("GET /turns/s01/%s: %v %+v", turns[0].WorkKey, err, view)
	}
	if r := view.Receipts[0]; view.Turn.Profile != "b" || r.Profile != "b" || r.AnsweredModel != "model-b-2026-05" {
		t.Fatalf("turn profile %q, round %+v; want profile b recorded on the turn and the round, with the model that answered", view.Turn.Profile, r)
	}
	if out, err := c.cli("models", "enable", "model-a"); err != nil {
		t.Fatalf("crewlet models enable: %v: %s", err, out)
	}
	round("a")
	if out, err := c.cli("models", "disable", "no-such-model"); err == nil || !strings.Contains(out, "no profile uses model") {
		t.Fatalf("disabling an unknown model: %v %s; want refused, naming it", err, out)
	}
	t.Logf("seats by node %v; a answered %d, b answered %d", byNode, must(a.counts()), must(b.counts()))
}

func must(answered, _, _ int) int { return answered }
