package store_test

import (
	"context"
	"fmt"
	"reflect"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/pool"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testenv"
	"github.com/crewlet/crewlet/internal/wire"
)

// slotT0 is the clock the slot tests run on: every expiry is reckoned on the
// Now a call passes, never on the database's clock.
var slotT0 = time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)

// slotReq asks for a slot of pool "pool" (profiles p and q) for one turn run,
// at slotT0 with an hour's lease.
func slotReq(turnID string, epoch int64) store.SlotRequest {
	return store.SlotRequest{
		Pool: "pool", Profiles: []string{"p", "q"}, Credentials: []string{"cred"},
		TurnID: turnID, Epoch: epoch, Seat: "s", WorkKey: turnID,
		Now: slotT0, ExpiresAt: slotT0.Add(time.Hour),
	}
}

// capped picks profile while fewer than limit other runs hold it.
func capped(profile string, limit int) func(store.ProfileFacts) (string, pool.Scores) {
	return func(f store.ProfileFacts) (string, pool.Scores) {
		if f.Live[profile] < limit {
			return profile, f.Scores
		}
		return "", f.Scores
	}
}

// always picks profile, whatever the facts; seen (when not nil) gets them.
func always(profile string, seen *store.ProfileFacts) func(store.ProfileFacts) (string, pool.Scores) {
	return func(f store.ProfileFacts) (string, pool.Scores) {
		if seen != nil {
			*seen = f
		}
		return profile, f.Scores
	}
}

func mustAcquire(t *testing.T, st *store.Store, ctx context.Context, req store.SlotRequest, decide func(store.ProfileFacts) (string, pool.Scores), want string) {
	t.Helper()
	got, _, err := st.AcquireProfile(ctx, req, decide)
	if err != nil || got != want {
		t.Fatalf("AcquireProfile(%s epoch %d at %s) = %q, %v; want %q", req.TurnID, req.Epoch, req.Now.Format(time.RFC3339), got, err, want)
	}
}

// checkLive compares LiveSlots of p and q at now with want (0 for a
// profile absent from want).
func checkLive(t *testing.T, st *store.Store, ctx context.Context, now time.Time, want map[string]int) {
	t.Helper()
	live, err := st.LiveSlots(ctx, []string{"p", "q"}, now)
	if err != nil {
		t.Fatalf("LiveSlots: %v", err)
	}
	for _, name := range []string{"p", "q"} {
		if live[name] != want[name] {
			t.Fatalf("LiveSlots at %s = %v; want %v", now.Format(time.RFC3339), live, want)
		}
	}
}

func checkWaiters(t *testing.T, st *store.Store, ctx context.Context, profiles []string, limit int, want ...string) {
	t.Helper()
	got, err := st.ProfileWaiters(ctx, profiles, limit)
	if err != nil {
		t.Fatalf("ProfileWaiters(%v): %v", profiles, err)
	}
	if len(got) != len(want) || (len(want) > 0 && !reflect.DeepEqual(got, want)) {
		t.Fatalf("ProfileWaiters(%v, %d) = %q; want %q", profiles, limit, got, want)
	}
}

// max_load holds fleet-wide: runs picking at once, from one pool or from
// pools sharing the profile (where only the profile's lock stands between
// them), never take more slots than the cap. A lost race shows only
// sometimes, so each case runs a few rounds, each on a fresh database.
func TestAcquireProfileHoldsMaxLoadUnderConcurrency(t *testing.T) {
	t.Parallel()
	const runs, limit, rounds = 40, 3, 3
	type testCase struct {
		name string
		pool func(i int) string
	}
	var cases []testCase
	for round := range rounds {
		cases = append(cases,
			testCase{fmt.Sprintf("one pool, round %d", round), func(int) string { return "pool" }},
			testCase{fmt.Sprintf("pools sharing the profile, round %d", round), func(i int) string { return fmt.Sprintf("pool-%d", i) }},
		)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, ctx := setup(t)
			type result struct {
				turn, profile string
				err           error
			}
			results := make(chan result, runs)
			start := make(chan struct{})
			for i := range runs {
				go func() {
					req := slotReq(fmt.Sprintf("turn/s/k%d", i), 1)
					req.Pool, req.Profiles = tc.pool(i), []string{"p"}
					<-start
					got, _, err := st.AcquireProfile(ctx, req, capped("p", limit))
					results <- result{req.TurnID, got, err}
				}()
			}
			close(start)
			var winners, losers []string
			for range runs {
				r := <-results
				switch {
				case r.err != nil:
					t.Errorf("AcquireProfile(%s): %v", r.turn, r.err)
				case r.profile == "p":
					winners = append(winners, r.turn)
				case r.profile == "":
					losers = append(losers, r.turn)
				default:
					t.Errorf("AcquireProfile(%s) = %q; want p or \"\"", r.turn, r.profile)
				}
			}
			if t.Failed() {
				t.FailNow()
			}
			if len(winners) != limit || len(losers) != runs-limit {
				t.Fatalf("%d runs got p (%v), %d got none; want %d and %d", len(winners), winners, len(losers), limit, runs-limit)
			}
			live, err := st.LiveSlots(ctx, []string{"p"}, slotT0)
			if err != nil || live["p"] != limit {
				t.Fatalf("LiveSlots = %v, %v; want p: %d", live, err, limit)
			}
			if w, err := st.ProfileWaiters(ctx, []string{"p"}, 100); err != nil || len(w) != runs-limit {
				t.Fatalf("ProfileWaiters = %d waiters, %v; want the %d runs that got none", len(w), err, runs-limit)
			}

			// A freed slot goes to the next run that asks.
			if freed, err := st.ReleaseProfile(ctx, winners[0], 1); err != nil || freed != "p" {
				t.Fatalf("ReleaseProfile(%s) = %q, %v; want p", winners[0], freed, err)
			}
			if live, _ := st.LiveSlots(ctx, []string{"p"}, slotT0); live["p"] != limit-1 {
				t.Fatalf("LiveSlots after a release = %v; want p: %d", live, limit-1)
			}
			req := slotReq(losers[0], 1)
			req.Pool, req.Profiles = tc.pool(0), []string{"p"}
			mustAcquire(t, st, ctx, req, capped("p", limit), "p")
			req = slotReq(losers[1], 1)
			req.Pool, req.Profiles = tc.pool(1), []string{"p"}
			mustAcquire(t, st, ctx, req, capped("p", limit), "")
			if live, _ := st.LiveSlots(ctx, []string{"p"}, slotT0); live["p"] != limit {
				t.Fatalf("LiveSlots after the freed slot was taken = %v; want p: %d", live, limit)
			}
		})
	}
}

// A run asking again is not blocked by the slot it holds: the facts leave it
// out of Live and name it as Current. Picking another profile moves the
// slot (a failover) rather than taking a second one.
func TestAcquireProfileOwnSlotDoesNotCountAgainstIt(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	var facts store.ProfileFacts
	seen := func(f store.ProfileFacts) (string, pool.Scores) {
		facts = f
		return capped("p", 1)(f)
	}

	mustAcquire(t, st, ctx, slotReq("turn/s/k1", 1), seen, "p")
	if facts.Current != "" || facts.Live["p"] != 0 {
		t.Fatalf("first ask saw Current %q Live %v; want none held", facts.Current, facts.Live)
	}
	mustAcquire(t, st, ctx, slotReq("turn/s/k1", 1), seen, "p")
	if facts.Current != "p" || facts.Live["p"] != 0 {
		t.Fatalf("second ask of the same run saw Current %q Live %v; want Current p and its own slot left out of Live", facts.Current, facts.Live)
	}
	checkLive(t, st, ctx, slotT0, map[string]int{"p": 1})

	// Another turn does count it.
	mustAcquire(t, st, ctx, slotReq("turn/s/k2", 1), seen, "")
	if facts.Current != "" || facts.Live["p"] != 1 {
		t.Fatalf("another turn saw Current %q Live %v; want none held and p: 1", facts.Current, facts.Live)
	}

	// Failover: the slot moves from p to q.
	mustAcquire(t, st, ctx, slotReq("turn/s/k1", 1), always("q", &facts), "q")
	if facts.Current != "p" {
		t.Fatalf("failover saw Current %q; want p", facts.Current)
	}
	checkLive(t, st, ctx, slotT0, map[string]int{"q": 1})
	if freed, err := st.ReleaseProfile(ctx, "turn/s/k1", 1); err != nil || freed != "q" {
		t.Fatalf("ReleaseProfile after the failover = %q, %v; want q", freed, err)
	}
	checkLive(t, st, ctx, slotT0, map[string]int{})
}

// A slot belongs to one turn run (turn id and epoch): the same turn at
// another epoch holds another slot, and a release frees only its own.
func TestProfileSlotsArePerTurnRun(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	mustAcquire(t, st, ctx, slotReq("turn/s/k1", 1), always("p", nil), "p")

	var facts store.ProfileFacts
	mustAcquire(t, st, ctx, slotReq("turn/s/k1", 2), always("p", &facts), "p")
	if facts.Current != "" || facts.Live["p"] != 1 {
		t.Fatalf("epoch 2 saw Current %q Live %v; want none held and epoch 1's slot counted", facts.Current, facts.Live)
	}
	checkLive(t, st, ctx, slotT0, map[string]int{"p": 2})

	for _, step := range []struct {
		epoch int64
		freed string
		live  int
	}{
		{1, "p", 1}, // the stale run's late release frees only its own slot
		{1, "", 1},  // twice is a no-op
		{2, "p", 0},
		{2, "", 0},
	} {
		freed, err := st.ReleaseProfile(ctx, "turn/s/k1", step.epoch)
		if err != nil || freed != step.freed {
			t.Fatalf("ReleaseProfile(epoch %d) = %q, %v; want %q", step.epoch, freed, err, step.freed)
		}
		checkLive(t, st, ctx, slotT0, map[string]int{"p": step.live})
	}
}

// A slot stops counting at its expiry (by the Now passed, strictly after
// expires_at), in LiveSlots and in the facts of a pick; a renewal makes it
// count again.
func TestProfileSlotExpiresUnlessRenewed(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	req := slotReq("turn/s/k1", 1)
	expires := slotT0.Add(time.Minute)
	req.ExpiresAt = expires
	mustAcquire(t, st, ctx, req, always("p", nil), "p")

	for _, tc := range []struct {
		name string
		now  time.Time
		live int
	}{
		{"before", slotT0, 1},
		{"just before", expires.Add(-time.Microsecond), 1},
		{"at", expires, 0},
		{"after", expires.Add(time.Hour), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkLive(t, st, ctx, tc.now, map[string]int{"p": tc.live})
		})
	}

	// Another run picking after the expiry does not see the slot.
	var facts store.ProfileFacts
	later := slotReq("turn/s/k2", 1)
	later.Now, later.ExpiresAt = expires.Add(time.Hour), expires.Add(2*time.Hour)
	mustAcquire(t, st, ctx, later, always("q", &facts), "q")
	if facts.Live["p"] != 0 {
		t.Fatalf("a pick after the expiry saw Live %v; want p: 0", facts.Live)
	}

	// A lapsed slot is not revived: its capacity may be someone else's now.
	if renewed, _, err := st.RenewProfileSlot(ctx, "turn/s/k1", 1, expires.Add(time.Hour), expires.Add(3*time.Hour), "c"); err != nil || renewed {
		t.Fatalf("renewing a lapsed slot = %v, %v; want false", renewed, err)
	}
	checkLive(t, st, ctx, expires.Add(time.Hour), map[string]int{"q": 1})
	// A live one is pushed out.
	if renewed, _, err := st.RenewProfileSlot(ctx, "turn/s/k2", 1, expires.Add(time.Hour), expires.Add(5*time.Hour), "c"); err != nil || !renewed {
		t.Fatalf("renewing a live slot = %v, %v; want true", renewed, err)
	}
	checkLive(t, st, ctx, expires.Add(4*time.Hour), map[string]int{"q": 1})
	// The renewal reads what the round must know of its profile's health.
	quarantined := expires.Add(9 * time.Hour)
	if _, _, err := st.ReportCredential(ctx, "c", func(c pool.CredentialState) pool.CredentialState {
		c.QuarantineUntil = quarantined
		return c
	}); err != nil {
		t.Fatal(err)
	}
	renewed, health, err := st.RenewProfileSlot(ctx, "turn/s/k2", 1, expires.Add(time.Hour), expires.Add(5*time.Hour), "c")
	if err != nil || !renewed || !health.Credentials["c"].QuarantineUntil.Equal(quarantined) {
		t.Fatalf("renewing with credential c quarantined = %v, %+v, %v; want renewed and c's quarantine until %s", renewed, health, err, quarantined)
	}
	// Renewing another epoch's slot touches nothing.
	if renewed, _, err := st.RenewProfileSlot(ctx, "turn/s/k2", 2, expires.Add(time.Hour), expires.Add(10*time.Hour), "c"); err != nil || renewed {
		t.Fatalf("renewing another epoch's slot = %v, %v; want false", renewed, err)
	}
	checkLive(t, st, ctx, expires.Add(6*time.Hour), map[string]int{})
}

// A run no profile can take is recorded as waiting on its pool's profiles,
// oldest first, until it gets one, releases, or is forgotten.
func TestProfileWaiters(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	none := func(f store.ProfileFacts) (string, pool.Scores) { return "", f.Scores }
	hold := func(turn string, profiles []string, at time.Duration) {
		t.Helper()
		req := slotReq(turn, 1)
		req.Profiles, req.Now = profiles, slotT0.Add(at)
		mustAcquire(t, st, ctx, req, none, "")
	}
	hold("a", []string{"p", "q"}, 2*time.Second)
	hold("b", []string{"p"}, time.Second)
	hold("c", []string{"q"}, 3*time.Second)

	for _, tc := range []struct {
		profiles []string
		limit    int
		want     []string
	}{
		{[]string{"p"}, 10, []string{"b", "a"}},
		{[]string{"q"}, 10, []string{"a", "c"}},
		{[]string{"q", "r"}, 10, []string{"a", "c"}},
		{[]string{"p", "q"}, 10, []string{"b", "a", "c"}},
		{[]string{"p", "q"}, 2, []string{"b", "a"}},
		{[]string{"r"}, 10, nil},
	} {
		t.Run(fmt.Sprint(tc.profiles, tc.limit), func(t *testing.T) {
			checkWaiters(t, st, ctx, tc.profiles, tc.limit, tc.want...)
		})
	}

	// Held again, a waiter keeps its place and waits on its new profiles.
	hold("b", []string{"q"}, 10*time.Second)
	checkWaiters(t, st, ctx, []string{"p"}, 10, "a")
	checkWaiters(t, st, ctx, []string{"q"}, 10, "b", "a", "c")

	// Getting a profile ends the wait.
	mustAcquire(t, st, ctx, slotReq("a", 1), always("p", nil), "p")
	checkWaiters(t, st, ctx, []string{"p", "q"}, 10, "b", "c")
	// So does a release, even with no slot held.
	if freed, err := st.ReleaseProfile(ctx, "b", 1); err != nil || freed != "" {
		t.Fatalf("ReleaseProfile of a waiter = %q, %v; want \"\"", freed, err)
	}
	checkWaiters(t, st, ctx, []string{"p", "q"}, 10, "c")
	if err := st.ForgetProfileWaiter(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	checkWaiters(t, st, ctx, []string{"p", "q"}, 10)

	// A held run gives back the slot it had.
	hold("a", []string{"p", "q"}, 20*time.Second)
	checkLive(t, st, ctx, slotT0, map[string]int{})
	checkWaiters(t, st, ctx, []string{"q"}, 10, "a")
}

// The turn row records the profile it runs on: set by the pick, moved by a
// failover, kept while the turn is held.
func TestAcquireProfileRecordsTheTurnsProfile(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	for _, wk := range []string{"k1", "k2"} {
		testenv.SeatAtEpoch(t, ctx, st, "s", 1)
		if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "s", WorkKey: wk, TurnID: "turn/s/" + wk, Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	req := slotReq("turn/s/k1", 1)
	req.WorkKey = "k1"
	none := func(f store.ProfileFacts) (string, pool.Scores) { return "", f.Scores }
	for _, step := range []struct {
		name    string
		decide  func(store.ProfileFacts) (string, pool.Scores)
		picked  string
		profile string
	}{
		{"picked", always("p", nil), "p", "p"},
		{"failed over", always("q", nil), "q", "q"},
		{"held", none, "", "q"},
	} {
		mustAcquire(t, st, ctx, req, step.decide, step.picked)
		row, err := st.Turn(ctx, "s", "k1")
		if err != nil || row.Profile != step.profile {
			t.Fatalf("%s: turn profile = %q, %v; want %q", step.name, row.Profile, err, step.profile)
		}
	}
	if other, err := st.Turn(ctx, "s", "k2"); err != nil || other.Profile != "" {
		t.Fatalf("other turn's profile = %q, %v; want none", other.Profile, err)
	}
}

// A pool's scores are what its last pick returned; another pool's are its
// own.
func TestAcquireProfilePersistsScoresPerPool(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	next := pool.Scores{Eligible: []string{"p", "q"}, Score: map[string]int64{"p": -2, "q": 2}}
	var seen pool.Scores
	pick := func(profile string, out pool.Scores) func(store.ProfileFacts) (string, pool.Scores) {
		return func(f store.ProfileFacts) (string, pool.Scores) {
			seen = f.Scores
			return profile, out
		}
	}

	mustAcquire(t, st, ctx, slotReq("turn/s/k1", 1), pick("p", next), "p")
	if len(seen.Eligible) != 0 || len(seen.Score) != 0 {
		t.Fatalf("first pick of the pool saw scores %+v; want none", seen)
	}
	then := pool.Scores{Eligible: []string{"p", "q"}, Score: map[string]int64{"p": 1, "q": -1}}
	mustAcquire(t, st, ctx, slotReq("turn/s/k2", 1), pick("q", then), "q")
	if !reflect.DeepEqual(seen, next) {
		t.Fatalf("second pick saw scores %+v; want the first pick's %+v", seen, next)
	}
	other := slotReq("turn/s/k3", 1)
	other.Pool = "other"
	mustAcquire(t, st, ctx, other, pick("p", pool.Scores{}), "p")
	if len(seen.Eligible) != 0 || len(seen.Score) != 0 {
		t.Fatalf("another pool saw scores %+v; want none", seen)
	}
	mustAcquire(t, st, ctx, slotReq("turn/s/k4", 1), pick("p", then), "p")
	if !reflect.DeepEqual(seen, then) {
		t.Fatalf("third pick saw scores %+v; want the second pick's %+v", seen, then)
	}
}

// Reports on one credential at once all count, each seeing the state the
// one before it left.
func TestReportCredentialIsAtomic(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	const reports = 20
	type result struct {
		before, after int
		err           error
	}
	results := make(chan result, reports)
	var wg sync.WaitGroup
	for range reports {
		wg.Add(1)
		go func() {
			defer wg.Done()
			before, after, err := st.ReportCredential(ctx, "cred", func(s pool.CredentialState) pool.CredentialState {
				s.Attempt++
				return s
			})
			results <- result{before.Attempt, after.Attempt, err}
		}()
	}
	wg.Wait()
	close(results)
	var afters []int
	for r := range results {
		if r.err != nil {
			t.Fatalf("ReportCredential: %v", r.err)
		}
		if r.after != r.before+1 {
			t.Fatalf("a report saw attempt %d before and %d after; want one more", r.before, r.after)
		}
		afters = append(afters, r.after)
	}
	sort.Ints(afters)
	for i, a := range afters {
		if a != i+1 {
			t.Fatalf("attempts after each report = %v; want 1..%d, each once", afters, reports)
		}
	}
	health, err := st.CredentialHealth(ctx, []string{"cred", "never"})
	if err != nil {
		t.Fatal(err)
	}
	if got, ok := health["cred"]; !ok || got.Attempt != reports {
		t.Fatalf("CredentialHealth[cred] = %+v (present %v); want attempt %d", got, ok, reports)
	}
	if got, ok := health["never"]; ok {
		t.Fatalf("CredentialHealth[never] = %+v; want absent", got)
	}
	if len(health) != 1 {
		t.Fatalf("CredentialHealth = %v; want only cred", health)
	}
}

// A credential's state round-trips: times to the microsecond, zero times
// as zero, each report seeing what the last one stored.
func TestReportCredentialRoundTrips(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	full := pool.CredentialState{
		QuarantineUntil: slotT0.Add(5*time.Minute + 123456789), Attempt: 3, QuarantineReason: "usage limit",
		CoolingUntil: slotT0.Add(time.Minute + 987), CoolingReason: "503",
		LastFailure: slotT0.Add(-time.Second + 42), LastFailureTurn: "turn/s/k1",
	}
	onlyFailure := pool.CredentialState{LastFailure: slotT0, LastFailureTurn: "turn/s/k2"}
	var stored pool.CredentialState
	for _, step := range []struct {
		name  string
		state pool.CredentialState
	}{
		{"every field", full},
		{"times cleared", onlyFailure},
		{"all zero", pool.CredentialState{}},
		{"set again", full},
	} {
		t.Run(step.name, func(t *testing.T) {
			before, after, err := st.ReportCredential(ctx, "cred", func(pool.CredentialState) pool.CredentialState { return step.state })
			if err != nil {
				t.Fatal(err)
			}
			if !sameCredential(before, stored) {
				t.Fatalf("report saw before = %+v; want the stored %+v", before, stored)
			}
			if !reflect.DeepEqual(after, step.state) {
				t.Fatalf("report returned after = %+v; want what apply returned %+v", after, step.state)
			}
			health, err := st.CredentialHealth(ctx, []string{"cred"})
			if err != nil {
				t.Fatal(err)
			}
			if got := health["cred"]; !sameCredential(got, step.state) {
				t.Fatalf("CredentialHealth = %+v; want %+v", got, step.state)
			}
			// A pick reads the same.
			var facts store.ProfileFacts
			mustAcquire(t, st, ctx, slotReq("turn/s/"+step.name, 1), always("p", &facts), "p")
			if got := facts.Credentials["cred"]; !sameCredential(got, step.state) {
				t.Fatalf("pick facts Credentials[cred] = %+v; want %+v", got, step.state)
			}
			stored = step.state
		})
	}
}

// sameCredential compares two states, times to within a microsecond (what
// Postgres keeps) and zero only with zero.
func sameCredential(a, b pool.CredentialState) bool {
	near := func(x, y time.Time) bool {
		if x.IsZero() || y.IsZero() {
			return x.IsZero() == y.IsZero()
		}
		return x.Sub(y).Abs() < time.Microsecond
	}
	return near(a.QuarantineUntil, b.QuarantineUntil) && near(a.CoolingUntil, b.CoolingUntil) && near(a.LastFailure, b.LastFailure) &&
		a.Attempt == b.Attempt && a.QuarantineReason == b.QuarantineReason && a.CoolingReason == b.CoolingReason &&
		a.LastFailureTurn == b.LastFailureTurn
}

// A model switch is fleet-wide and the last one wins; switching back on
// keeps the record of who did it.
func TestModelSwitches(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	var lastAt time.Time
	for _, step := range []struct {
		sw       crewlet.ModelSwitch
		disabled []string
	}{
		{crewlet.ModelSwitch{Model: "m1", Disabled: true, By: "alice", Reason: "answers garbage"}, []string{"m1"}},
		{crewlet.ModelSwitch{Model: "m2", Disabled: true, By: "carol"}, []string{"m1", "m2"}},
		{crewlet.ModelSwitch{Model: "m1", Disabled: false, By: "bob", Reason: "fixed upstream"}, []string{"m2"}},
	} {
		got, err := st.SetModelSwitch(ctx, step.sw)
		if err != nil {
			t.Fatal(err)
		}
		if got.At.IsZero() || got.At.Before(lastAt) || got.Model != step.sw.Model || got.By != step.sw.By {
			t.Fatalf("SetModelSwitch(%+v) = %+v; want it back with a time no earlier than %v", step.sw, got, lastAt)
		}
		lastAt = got.At
		disabled, err := st.DisabledModels(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]bool{}
		for _, m := range step.disabled {
			want[m] = true
		}
		if !reflect.DeepEqual(disabled, want) {
			t.Fatalf("after %+v DisabledModels = %v; want %v", step.sw, disabled, want)
		}
		var facts store.ProfileFacts
		mustAcquire(t, st, ctx, slotReq("turn/s/"+step.sw.Model+step.sw.By, 1), always("p", &facts), "p")
		if !reflect.DeepEqual(facts.Disabled, want) {
			t.Fatalf("after %+v a pick saw Disabled %v; want %v", step.sw, facts.Disabled, want)
		}
	}
	switches, err := st.ModelSwitches(ctx)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		model    string
		disabled bool
		by       string
		reason   string
	}
	var got []row
	for _, sw := range switches {
		if sw.At.IsZero() {
			t.Fatalf("ModelSwitches: %+v has no time", sw)
		}
		got = append(got, row{sw.Model, sw.Disabled, sw.By, sw.Reason})
	}
	want := []row{{"m1", false, "bob", "fixed upstream"}, {"m2", true, "carol", ""}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ModelSwitches = %+v; want %+v", got, want)
	}
}

// NoteAnsweredModel says when a profile's answering model changed.
func TestNoteAnsweredModel(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	for _, step := range []struct {
		profile, configured, answered string
		changed                       bool
	}{
		{"p1", "claude-x", "claude-y", true},
		{"p1", "claude-x", "claude-y", false},
		{"p1", "claude-x", "claude-z", true},
		{"p1", "claude-x", "claude-z", false},
		{"p2", "claude-x", "claude-y", true},
		{"p1", "claude-w", "claude-z", true},
		{"p1", "claude-w", "claude-z", false},
	} {
		changed, err := st.NoteAnsweredModel(ctx, step.profile, step.configured, step.answered)
		if err != nil || changed != step.changed {
			t.Fatalf("NoteAnsweredModel(%s, %s, %s) = %v, %v; want %v", step.profile, step.configured, step.answered, changed, err, step.changed)
		}
	}
	got, err := st.AnsweredModels(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][2]string{"p1": {"claude-w", "claude-z"}, "p2": {"claude-x", "claude-y"}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("AnsweredModels = %v; want %v", got, want)
	}
}

// A turn run that is gone (its tenure moved on) and acts late touches
// nothing of the run that replaced it: its release leaves the successor's
// place among the waiters, and its pick does not overwrite the profile the
// successor recorded on the turn.
func TestStaleTurnRunLeavesItsSuccessorAlone(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	testenv.SeatAtEpoch(t, ctx, st, "s", 1)
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "s", WorkKey: "k1", TurnID: "turn/s/k1", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	old, cur := slotReq("turn/s/k1", 1), slotReq("turn/s/k1", 2)
	old.WorkKey, cur.WorkKey = "k1", "k1"
	mustAcquire(t, st, ctx, old, always("p", nil), "p")
	testenv.SeatAtEpoch(t, ctx, st, "s", 2)
	if _, err := st.OpenTurn(ctx, wire.TurnRow{Seat: "s", WorkKey: "k1", TurnID: "turn/s/k1", Epoch: 2}); err != nil {
		t.Fatal(err)
	}
	none := func(f store.ProfileFacts) (string, pool.Scores) { return "", f.Scores }
	mustAcquire(t, st, ctx, cur, none, "")
	if freed, err := st.ReleaseProfile(ctx, old.TurnID, old.Epoch); err != nil || freed != "p" {
		t.Fatalf("stale release = %q, %v; want its own slot of p", freed, err)
	}
	checkWaiters(t, st, ctx, []string{"p"}, 10, "turn/s/k1")
	mustAcquire(t, st, ctx, cur, always("q", nil), "q")
	mustAcquire(t, st, ctx, old, always("p", nil), "p")
	if row, err := st.Turn(ctx, "s", "k1"); err != nil || row.Profile != "q" {
		t.Fatalf("turn profile after a stale pick = %q, %v; want the successor's q", row.Profile, err)
	}
}

// A pick says which profile's slot the run gave up, so the caller can wake
// a turn waiting for it: none on a first pick or a pick of the same
// profile, the old one on a failover or a hold.
func TestAcquireProfileSaysWhatItFreed(t *testing.T) {
	t.Parallel()
	st, ctx := setup(t)
	req := slotReq("turn/s/k1", 1)
	none := func(f store.ProfileFacts) (string, pool.Scores) { return "", f.Scores }
	for _, step := range []struct {
		name          string
		decide        func(store.ProfileFacts) (string, pool.Scores)
		picked, freed string
	}{
		{"first pick", always("p", nil), "p", ""},
		{"same again", always("p", nil), "p", ""},
		{"failed over", always("q", nil), "q", "p"},
		{"held", none, "", "q"},
		{"held again", none, "", ""},
	} {
		picked, freed, err := st.AcquireProfile(ctx, req, step.decide)
		if err != nil || picked != step.picked || freed != step.freed {
			t.Fatalf("%s: picked %q freed %q (%v); want picked %q freed %q", step.name, picked, freed, err, step.picked, step.freed)
		}
	}
}
