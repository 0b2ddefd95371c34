package activities

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/pool"
	"github.com/crewlet/crewlet/internal/testenv"
)

// profilesOrg is a pool of two scripted profiles, a (whose credential acct
// a2 spends too) before b, taken in order.
const profilesOrg = `
company: { name: acme }
profiles:
  a:
    provider: scripted
    credential: acct
    rules:
      - { match: '^quota', fail: 'monthly quota exceeded', fail_kind: exhausted }
      - { match: '^boom', fail: 'upstream is down', fail_kind: server_error }
      - { match: '.', reply: 'from a' }
  a2: { provider: scripted, credential: acct }
  b:
    provider: scripted
    rules:
      - { match: '.', reply: 'from b' }
roles:
  clerk: { charter: keeps the ledger, profiles: [a, b], selection: ordered }
seats:
  - { handle: cto, role: clerk }
`

// profClock fixes the clock the profile service reckons slots, quarantines
// and cooling-offs on; the test moves it through the returned pointer.
func profClock(e *turnEnv) *time.Time {
	now := time.Now().UTC().Truncate(time.Microsecond)
	e.turns.profiles.Now = func() time.Time { return now }
	return &now
}

// profBegin publishes body to cto as eventID and begins its turn; it returns
// the turn's work key.
func (e *turnEnv) profBegin(t *testing.T, eventID, body string) string {
	t.Helper()
	workKey := crewlet.WorkKey([]string{eventID})
	e.begin(t, workKey, e.publish(t, eventID, body))
	return workKey
}

func profTurnID(workKey string) string { return crewlet.TurnWorkflowID("cto", workKey) }

// profAcquire runs AcquireProfile for the turn of workKey, as its workflow
// does.
func (e *turnEnv) profAcquire(t *testing.T, workKey string) crewlet.AcquireProfileOutput {
	t.Helper()
	out, err := e.turns.AcquireProfile(e.ctx, crewlet.AcquireProfileInput{
		Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: profTurnID(workKey), WorkKey: workKey,
	})
	if err != nil {
		t.Fatalf("AcquireProfile %s: %v", workKey, err)
	}
	return out
}

// profAcquireWant acquires for workKey and wants profile want, no hold.
func (e *turnEnv) profAcquireWant(t *testing.T, workKey, want string) {
	t.Helper()
	if out := e.profAcquire(t, workKey); out.Profile != want || out.Hold != nil {
		t.Fatalf("AcquireProfile %s: got profile %q hold %+v; want profile %q and no hold", workKey, out.Profile, out.Hold, want)
	}
}

func (e *turnEnv) profRelease(t *testing.T, workKey string) {
	t.Helper()
	if err := e.turns.ReleaseProfile(e.ctx, crewlet.ReleaseProfileInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, TurnID: profTurnID(workKey)}); err != nil {
		t.Fatalf("ReleaseProfile %s: %v", workKey, err)
	}
}

// profRound runs round 1 of the turn's only thread on profile.
func (e *turnEnv) profRound(workKey, profile string) (crewlet.ModelRoundOutput, error) {
	return e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{
		Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: workKey, Round: 1, TurnID: profTurnID(workKey), Profile: profile,
	})
}

// profAnswered wants the thread of eventID answered text in round 1,
// recorded as a round of profile.
func (e *turnEnv) profAnswered(t *testing.T, eventID, profile, text string) {
	t.Helper()
	thread := crewlet.ThreadKey(eventID)
	msgs, err := e.store.TurnMessages(e.ctx, "cto", thread, 0)
	if err != nil {
		t.Fatal(err)
	}
	m, ok := findKey(msgs, roundKey(1))
	if !ok || m.Message.Content != text || len(m.Message.ToolCalls) != 0 {
		t.Fatalf("round 1 of %s: got %+v (found %v); want the answer %q", eventID, m.Message, ok, text)
	}
	rounds, err := e.store.TurnRounds(e.ctx, "cto", thread)
	if err != nil {
		t.Fatal(err)
	}
	if len(rounds) != 1 || rounds[0].Profile != profile || rounds[0].Round != 1 {
		t.Fatalf("rounds recorded for %s: %+v; want round 1 on profile %s", eventID, rounds, profile)
	}
}

// profUnanswered wants no round of eventID's thread answered or recorded:
// the model was not asked.
func (e *turnEnv) profUnanswered(t *testing.T, eventID string) {
	t.Helper()
	thread := crewlet.ThreadKey(eventID)
	msgs, err := e.store.TurnMessages(e.ctx, "cto", thread, 0)
	if err != nil {
		t.Fatal(err)
	}
	if m, ok := findKey(msgs, roundKey(1)); ok {
		t.Fatalf("round 1 of %s was answered %q; want no answer", eventID, m.Message.Content)
	}
	if rounds, err := e.store.TurnRounds(e.ctx, "cto", thread); err != nil || len(rounds) != 0 {
		t.Fatalf("rounds recorded for %s: %+v (%v); want none", eventID, rounds, err)
	}
}

// profLive wants the live slots of a, a2 and b to be want (absent: none).
func (e *turnEnv) profLive(t *testing.T, want map[string]int) {
	t.Helper()
	live, err := e.store.LiveSlots(e.ctx, []string{"a", "a2", "b"}, e.turns.profiles.Now())
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(live) != fmt.Sprint(want) {
		t.Fatalf("live slots: got %v; want %v", live, want)
	}
}

// profUsable wants each profile's Usable reason.
func (e *turnEnv) profUsable(t *testing.T, want map[string]string) {
	t.Helper()
	for name, reason := range want {
		got, err := e.turns.profiles.Usable(e.ctx, name)
		if err != nil {
			t.Fatalf("Usable(%s): %v", name, err)
		}
		if got != reason {
			t.Fatalf("Usable(%s): got %q; want %q", name, got, reason)
		}
	}
}

func (e *turnEnv) profTurnProfile(t *testing.T, workKey, want string) {
	t.Helper()
	turn, err := e.store.Turn(e.ctx, "cto", workKey)
	if err != nil {
		t.Fatal(err)
	}
	if turn.Profile != want {
		t.Fatalf("turn %s's profile: got %q; want %q", workKey, turn.Profile, want)
	}
}

func (e *turnEnv) profWaiters(t *testing.T, want ...string) {
	t.Helper()
	got, err := e.store.ProfileWaiters(e.ctx, []string{"a", "b"}, 10)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("profile waiters: got %v; want %v", got, want)
	}
}

func (e *turnEnv) profHealth(t *testing.T, credential string) pool.CredentialState {
	t.Helper()
	health, err := e.store.CredentialHealth(e.ctx, []string{credential})
	if err != nil {
		t.Fatal(err)
	}
	return health[credential]
}

// wantRetryable wants err a retryable ApplicationError of type errType.
func wantRetryable(t *testing.T, what string, err error, errType string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) {
		t.Fatalf("%s: got error %v (%T); want a retryable ApplicationError of type %q", what, err, err, errType)
	}
	if appErr.Type() != errType || appErr.NonRetryable() {
		t.Fatalf("%s: got ApplicationError type %q non-retryable=%v (%v); want type %q retryable", what, appErr.Type(), appErr.NonRetryable(), err, errType)
	}
}

// wantHold wants a hold listing each of profiles (in pool order) for
// reason, none freeing by itself.
func wantHold(t *testing.T, what string, out crewlet.AcquireProfileOutput, reason string, profiles ...string) {
	t.Helper()
	if out.Profile != "" || out.Hold == nil {
		t.Fatalf("%s: got profile %q hold %+v; want a hold", what, out.Profile, out.Hold)
	}
	var want []crewlet.ProfileUnavailable
	for _, p := range profiles {
		want = append(want, crewlet.ProfileUnavailable{Profile: p, Reason: reason})
	}
	if fmt.Sprintf("%+v", out.Hold.Profiles) != fmt.Sprintf("%+v", want) || out.Hold.Until != nil {
		t.Fatalf("%s: got hold %+v (until %v); want %+v and no until", what, out.Hold.Profiles, out.Hold.Until, want)
	}
}

// An ordered pool gives a turn its first profile; the round runs on it and
// is recorded under it, and releasing the slot frees it.
func TestProfileAcquireRoundAndRelease(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, profilesOrg, nil)
	profClock(e)
	k1 := e.profBegin(t, "m1", "hello")
	e.profTurnProfile(t, k1, "")

	e.profAcquireWant(t, k1, "a")
	e.profTurnProfile(t, k1, "a")
	e.profLive(t, map[string]int{"a": 1})
	// Asked again (a re-run of the local activity), it keeps its one slot.
	e.profAcquireWant(t, k1, "a")
	e.profLive(t, map[string]int{"a": 1})

	out, err := e.profRound(k1, "a")
	if err != nil || out.Failed != "" || len(out.Calls) != 0 || out.Tokens == 0 {
		t.Fatalf("ModelRound on a: got %+v, %v; want an answer", out, err)
	}
	e.profAnswered(t, "m1", "a", "from a")

	e.profRelease(t, k1)
	e.profLive(t, map[string]int{})
	e.profRelease(t, k1) // a release run twice frees nothing more
	e.profLive(t, map[string]int{})
}

// A usage-limit refusal quarantines the credential, every profile spending
// it with it, and fails the round over: the turn acquires again and runs on
// the next profile of its pool.
func TestUsageLimitQuarantinesTheCredentialAndFailsOver(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, profilesOrg, nil)
	now := profClock(e)
	k1 := e.profBegin(t, "m1", "quota check")
	e.profAcquireWant(t, k1, "a")

	_, err := e.profRound(k1, "a")
	testenv.WantErrorType(t, "ModelRound refused for a usage limit", err, crewlet.ErrorTypeProfileUnavailable)
	e.profUnanswered(t, "m1")
	h := e.profHealth(t, "acct")
	if want := now.Add(e.turns.org.Now().Quarantine.Base); h.Attempt != 1 || !h.QuarantineUntil.Equal(want) || h.QuarantineReason != "monthly quota exceeded" {
		t.Fatalf("credential acct: %+v; want attempt 1, quarantined until %v for the provider's message", h, want)
	}
	if b := e.profHealth(t, "b"); b != (pool.CredentialState{}) {
		t.Fatalf("credential b: %+v; want untouched", b)
	}
	e.profUsable(t, map[string]string{"a": crewlet.UnavailableQuarantined, "a2": crewlet.UnavailableQuarantined, "b": ""})

	status, err := e.turns.profiles.Status(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range status {
		quarantined := st.Quarantine != nil && st.Quarantine.Credential == "acct" && st.Quarantine.Attempt == 1 && st.Free != nil && *st.Free == 0
		if quarantined != (st.Credential == "acct") {
			t.Fatalf("status of %s: %+v (quarantine %+v); want it quarantined exactly when it spends acct", st.Name, st, st.Quarantine)
		}
	}

	// The turn asks again and fails over; its row says where it runs now.
	e.profAcquireWant(t, k1, "b")
	e.profTurnProfile(t, k1, "b")
	e.profLive(t, map[string]int{"b": 1})
	if out, err := e.profRound(k1, "b"); err != nil || out.Failed != "" {
		t.Fatalf("ModelRound on b: got %+v, %v; want an answer", out, err)
	}
	e.profAnswered(t, "m1", "b", "from b")

	// A new turn starts on b as well while acct is quarantined; once the
	// quarantine ended, a new turn gets a again, while the turn that ran
	// on b keeps b.
	k2 := e.profBegin(t, "m2", "hello")
	e.profAcquireWant(t, k2, "b")
	*now = h.QuarantineUntil
	e.profUsable(t, map[string]string{"a": "", "a2": ""})
	e.profAcquireWant(t, k2, "b")
	k3 := e.profBegin(t, "m3", "hello")
	e.profAcquireWant(t, k3, "a")
}

// A profile's exhausted_pattern makes a refusal of the default kind (a bad
// request) whose message matches a usage limit; the same refusal on a
// profile without the pattern stays a permanent bad request.
func TestExhaustedPatternMakesABadRequestAUsageLimit(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, `
company: { name: acme }
profiles:
  p:
    provider: scripted
    exhausted_pattern: 'plan limit'
    rules:
      - { match: '^over', fail: 'you are over your plan limit' }
  q:
    provider: scripted
    rules:
      - { match: '^over', fail: 'you are over your plan limit' }
roles:
  clerk: { charter: works as clerk, profiles: [p, q], selection: ordered }
seats:
  - { handle: cto, role: clerk }
`, nil)
	now := profClock(e)
	k1 := e.profBegin(t, "m1", "over again")
	e.profAcquireWant(t, k1, "p")
	_, err := e.profRound(k1, "p")
	testenv.WantErrorType(t, "ModelRound on p refused with its exhausted_pattern", err, crewlet.ErrorTypeProfileUnavailable)
	if h := e.profHealth(t, "p"); h.Attempt != 1 || !h.QuarantineUntil.Equal(now.Add(e.turns.org.Now().Quarantine.Base)) {
		t.Fatalf("credential p: %+v; want quarantined, attempt 1", h)
	}
	e.profUsable(t, map[string]string{"p": crewlet.UnavailableQuarantined, "q": ""})

	e.profAcquireWant(t, k1, "q")
	_, err = e.profRound(k1, "q")
	testenv.WantErrorType(t, "ModelRound on q with no exhausted_pattern", err, crewlet.ErrorTypePermanent)
	if h := e.profHealth(t, "q"); h != (pool.CredentialState{}) {
		t.Fatalf("credential q: %+v; want untouched by a bad request", h)
	}
	e.profUsable(t, map[string]string{"q": ""})
}

// A server error cools the credential off at once: the round fails over
// (ProfileUnavailable) rather than retrying the same profile, and a round
// of another turn on a profile spending it is refused without asking the
// model. The same turn meeting the server error again soon after is retried
// instead: that points at the turn, which must not keep its pool cooling.
func TestServerErrorCoolsOffAtOnceAndFailsOver(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, profilesOrg, nil)
	now := profClock(e)
	k0 := e.profBegin(t, "m0", "hello")
	e.profAcquireWant(t, k0, "a")
	k1 := e.profBegin(t, "m1", "boom one")
	e.profAcquireWant(t, k1, "a")

	_, err := e.profRound(k1, "a")
	testenv.WantErrorType(t, "ModelRound meeting a server error", err, crewlet.ErrorTypeProfileUnavailable)
	h := e.profHealth(t, "acct")
	if want := now.Add(crewlet.CoolingOff); !h.CoolingUntil.Equal(want) || h.CoolingReason != "upstream is down" || h.Attempt != 0 {
		t.Fatalf("credential acct after one server error: %+v; want cooling off until %v and no quarantine", h, want)
	}
	e.profUsable(t, map[string]string{"a": crewlet.UnavailableCoolingOff, "a2": crewlet.UnavailableCoolingOff, "b": ""})
	e.profUnanswered(t, "m1")
	e.profAcquireWant(t, k1, "b")
	if _, err := e.profRound(k1, "b"); err != nil {
		t.Fatalf("ModelRound of turn 1 on b: %v", err)
	}
	e.profAnswered(t, "m1", "b", "from b")

	// Turn 0 would be answered by a; its round is refused before the call.
	_, err = e.profRound(k0, "a")
	testenv.WantErrorType(t, "ModelRound on a cooling off", err, crewlet.ErrorTypeProfileUnavailable)
	e.profUnanswered(t, "m0")
	e.profAcquireWant(t, k0, "b")
	if _, err := e.profRound(k0, "b"); err != nil {
		t.Fatalf("ModelRound of turn 0 on b: %v", err)
	}
	e.profAnswered(t, "m0", "b", "from b")

	// The cooling-off is flat: it ends a minute on. Another turn's server
	// error cools a off again; when that turn comes back to a after the
	// cooling-off and meets it again, it is retried on a, which stays usable.
	*now = now.Add(crewlet.CoolingOff)
	e.profUsable(t, map[string]string{"a": ""})
	k2 := e.profBegin(t, "m2", "boom two")
	e.profAcquireWant(t, k2, "a")
	_, err = e.profRound(k2, "a")
	testenv.WantErrorType(t, "ModelRound of another turn meeting a server error", err, crewlet.ErrorTypeProfileUnavailable)
	*now = now.Add(crewlet.CoolingOff)
	e.profAcquireWant(t, k2, "a")
	_, err = e.profRound(k2, "a")
	wantRetryable(t, "the same turn meeting the server error again", err, crewlet.ProviderServerError)
	e.profUsable(t, map[string]string{"a": "", "a2": "", "b": ""})
}

// A model call still unanswered answerMargin before its step's deadline
// times out as a provider that is down: the credential cools off and the
// round fails over, with time left to say so, where Temporal cutting the
// step off would retry it on the same profile.
func TestUnansweredModelCallTimesOutAndFailsOver(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, `
company: { name: acme }
profiles:
  slow: { provider: scripted, delay: 1m }
  b: { provider: scripted }
roles:
  clerk: { charter: keeps the ledger, profiles: [slow, b], selection: ordered }
seats:
  - { handle: cto, role: clerk }
`, nil)
	k := e.profBegin(t, "m1", "hello")
	e.profAcquireWant(t, k, "slow")
	ctx, cancel := context.WithTimeout(e.ctx, answerMargin+time.Second)
	defer cancel()
	began := time.Now()
	_, err := e.turns.ModelRound(ctx, crewlet.ModelRoundInput{
		Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: k, Round: 1, TurnID: profTurnID(k), Profile: "slow",
	})
	testenv.WantErrorType(t, "ModelRound on a provider that does not answer", err, crewlet.ErrorTypeProfileUnavailable)
	if took := time.Since(began); took > answerMargin/2 {
		t.Fatalf("ModelRound took %s; want it given up a margin before its deadline", took)
	}
	if h := e.profHealth(t, "slow"); h.CoolingUntil.IsZero() || !strings.Contains(h.CoolingReason, "timed out") {
		t.Fatalf("credential slow: %+v; want cooling off for the timeout", h)
	}
	e.profUnanswered(t, "m1")
	e.profAcquireWant(t, k, "b")
}

// Switching a model off holds a new turn whose pool has nothing else, with
// every profile disabled and nothing freeing by itself, and fails a turn
// already on it at its next round; switching it back on lets turns pick it.
func TestModelGateHoldsEveryProfileAndFailsARunningTurn(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, profilesOrg, nil)
	now := profClock(e)
	k1 := e.profBegin(t, "m1", "hello")
	e.profAcquireWant(t, k1, "a")

	if _, err := e.turns.profiles.SwitchModel(e.ctx, "gpt-none", true, "alice", "test"); crewlet.ErrorCode(err) != crewlet.ENOTFOUND {
		t.Fatalf("SwitchModel of a model no profile uses: %v; want ENOTFOUND", err)
	}
	sw, err := e.turns.profiles.SwitchModel(e.ctx, "scripted", true, "alice", "test")
	if err != nil || sw.Model != "scripted" || !sw.Disabled || sw.By != "alice" || sw.Reason != "test" {
		t.Fatalf("SwitchModel off: got %+v, %v; want scripted disabled by alice", sw, err)
	}
	e.profUsable(t, map[string]string{"a": crewlet.UnavailableDisabled, "a2": crewlet.UnavailableDisabled, "b": crewlet.UnavailableDisabled})

	_, err = e.profRound(k1, "a")
	testenv.WantErrorType(t, "ModelRound on a switched off", err, crewlet.ErrorTypeProfileUnavailable)
	e.profUnanswered(t, "m1")

	k2 := e.profBegin(t, "m2", "hello again")
	wantHold(t, "AcquireProfile with the model off", e.profAcquire(t, k2), crewlet.UnavailableDisabled, "a", "b")
	e.profWaiters(t, profTurnID(k2))
	e.profTurnProfile(t, k2, "")
	// The running turn, failing over, is held too and gives its slot back;
	// it waits behind the turn held before it.
	*now = now.Add(time.Second)
	wantHold(t, "AcquireProfile of the running turn", e.profAcquire(t, k1), crewlet.UnavailableDisabled, "a", "b")
	e.profLive(t, map[string]int{})
	e.profWaiters(t, profTurnID(k2), profTurnID(k1))

	if _, err := e.turns.profiles.SwitchModel(e.ctx, "scripted", false, "alice", "back"); err != nil {
		t.Fatalf("SwitchModel on: %v", err)
	}
	e.profUsable(t, map[string]string{"a": "", "b": ""})
	e.profAcquireWant(t, k2, "a")
	e.profAcquireWant(t, k1, "a")
	e.profWaiters(t)
	if _, err := e.profRound(k1, "a"); err != nil {
		t.Fatalf("ModelRound on a switched back on: %v", err)
	}
	e.profAnswered(t, "m1", "a", "from a")
}

// A profile at its max_load holds a turn, listed as a waiter, until the
// slot is given back; then the turn gets it.
func TestMaxLoadHoldsATurnUntilASlotIsReleased(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, `
company: { name: acme }
profiles:
  a: { provider: scripted, max_load: 1 }
  b: { provider: scripted, max_load: 0 }
roles:
  clerk: { charter: works as clerk, profiles: [a, b], selection: ordered }
seats:
  - { handle: cto, role: clerk }
`, nil)
	profClock(e)
	k1 := e.profBegin(t, "m1", "first")
	k2 := e.profBegin(t, "m2", "second")
	e.profAcquireWant(t, k1, "a")

	wantHold(t, "AcquireProfile at max load", e.profAcquire(t, k2), crewlet.UnavailableMaxLoad, "a", "b")
	e.profWaiters(t, profTurnID(k2))
	// The turn holding the slot keeps it when it asks again.
	e.profAcquireWant(t, k1, "a")
	e.profLive(t, map[string]int{"a": 1})

	e.profRelease(t, k1)
	e.profLive(t, map[string]int{})
	e.profAcquireWant(t, k2, "a")
	e.profWaiters(t)
	e.profLive(t, map[string]int{"a": 1})
	e.profTurnProfile(t, k2, "a")
	if _, err := e.profRound(k2, "a"); err != nil {
		t.Fatalf("ModelRound on a: %v", err)
	}
	e.profAnswered(t, "m2", "a", "[cto] second")
}

// A turn begun before profile pools asks for no profile: it runs on its
// role's first profile and takes no slot; a usage limit fails it as before
// (quarantining the credential all the same), with no failover.
func TestLegacyTurnRunsOnTheFirstProfileWithoutASlot(t *testing.T) {
	t.Parallel()
	e := setupTurnsOrg(t, profilesOrg, nil)
	profClock(e)
	k1 := e.profBegin(t, "m1", "hello")
	out, err := e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: k1, Round: 1})
	if err != nil || out.Failed != "" || len(out.Calls) != 0 {
		t.Fatalf("legacy ModelRound: got %+v, %v; want an answer", out, err)
	}
	e.profAnswered(t, "m1", "a", "from a")
	e.profLive(t, map[string]int{})
	e.profTurnProfile(t, k1, "")

	// A usage limit quarantines the credential as for any turn; such a
	// turn cannot fail over, so it fails and its trigger comes back in a
	// turn that picks from the pool.
	k2 := e.profBegin(t, "m2", "quota check")
	_, err = e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: k2, Round: 1})
	testenv.WantErrorType(t, "legacy ModelRound refused for a usage limit", err, crewlet.ErrorTypeProfileUnavailable)
	if h := e.profHealth(t, "acct"); h.Attempt != 1 {
		t.Fatalf("credential acct: %+v; want quarantined, attempt 1", h)
	}
	if msg := err.Error(); !strings.Contains(msg, "monthly quota exceeded") {
		t.Fatalf("legacy refusal: %q; want the provider's message", msg)
	}
	// Its profile quarantined, the next legacy round does not reach the
	// model at all.
	k3 := e.profBegin(t, "m3", "hello")
	_, err = e.turns.ModelRound(e.ctx, crewlet.ModelRoundInput{Tenure: crewlet.Tenure{Handle: "cto", Epoch: e.epoch}, WorkKey: k3, Round: 1})
	testenv.WantErrorType(t, "legacy ModelRound on a quarantined profile", err, crewlet.ErrorTypeProfileUnavailable)
	if rounds, err := e.store.TurnRounds(e.ctx, "cto", crewlet.ThreadKey("m3")); err != nil || len(rounds) != 0 {
		t.Fatalf("rounds of m3: %+v, %v; want none: the model was not asked", rounds, err)
	}
}
