package pool

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// t0 is the injected clock's origin: no test reads the wall clock or sleeps.
var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

func fmtUntil(u *time.Time) string {
	if u == nil {
		return "nil"
	}
	return u.Format(time.RFC3339Nano)
}

// cand is a healthy, unlimited candidate on its own credential.
func cand(name string, weight int) Candidate {
	return Candidate{Name: name, Weight: weight, MaxLoad: -1, Credential: "cred-" + name, Model: "model-" + name}
}

func TestCooldown(t *testing.T) {
	t.Parallel()
	base := time.Minute
	tests := []struct {
		attempt int
		want    time.Duration
	}{
		{-1, 1 * base},
		{0, 1 * base},
		{1, 1 * base},
		{2, 2 * base},
		{3, 4 * base},
		{4, 8 * base},
		{5, 12 * base},
		{6, 12 * base},
		{64, 12 * base},
		{math.MaxInt, 12 * base},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint("attempt=", tt.attempt), func(t *testing.T) {
			if got := Cooldown(base, tt.attempt); got != tt.want {
				t.Errorf("Cooldown(%v, %d) = %v, want %v", base, tt.attempt, got, tt.want)
			}
		})
	}
}

func TestExhaustedEscalation(t *testing.T) {
	t.Parallel()
	base := 10 * time.Minute
	// Each refusal comes the moment the previous quarantine ends: the
	// streak continues and the cooldown doubles up to the cap. Attempt keeps
	// counting past it.
	wantMult := []int{1, 2, 4, 8, 12, 12, 12}
	var s CredentialState
	now := t0
	for i, m := range wantMult {
		s = s.Exhausted(now, base, fmt.Sprint("refusal ", i+1))
		wantUntil := now.Add(time.Duration(m) * base)
		if s.Attempt != i+1 || !s.QuarantineUntil.Equal(wantUntil) || s.QuarantineReason != fmt.Sprint("refusal ", i+1) {
			t.Fatalf("refusal %d: got attempt %d until %v reason %q, want attempt %d until %v (%d× base) reason %q",
				i+1, s.Attempt, s.QuarantineUntil, s.QuarantineReason, i+1, wantUntil, m, fmt.Sprint("refusal ", i+1))
		}
		now = s.QuarantineUntil
	}
}

func TestExhaustedDuringQuarantine(t *testing.T) {
	t.Parallel()
	base := 10 * time.Minute
	first := CredentialState{}.Exhausted(t0, base, "limit hit")
	tests := []struct {
		name string
		at   time.Time
	}{
		{"right after", t0},
		{"midway", t0.Add(base / 2)},
		{"last instant", first.QuarantineUntil.Add(-time.Nanosecond)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The same incident reported again changes nothing: not the
			// attempt, not the end, not the reason.
			got := first.Exhausted(tt.at, base, "reported again")
			if got != first {
				t.Errorf("Exhausted during quarantine: got %+v, want unchanged %+v", got, first)
			}
		})
	}
}

func TestExhaustedStreak(t *testing.T) {
	t.Parallel()
	base := 10 * time.Minute
	// A credential on its third consecutive refusal: quarantined 4× base.
	third := CredentialState{}
	now := t0
	for range 3 {
		third = third.Exhausted(now, base, "limit")
		now = third.QuarantineUntil
	}
	end := third.QuarantineUntil
	if third.Attempt != 3 || !end.Equal(t0.Add(base+2*base+4*base)) {
		t.Fatalf("setup: got attempt %d until %v, want attempt 3 until %v", third.Attempt, end, t0.Add(7*base))
	}
	tests := []struct {
		name        string
		at          time.Time
		wantAttempt int
		wantFor     time.Duration
	}{
		{"at the end continues", end, 4, 8 * base},
		{"within base continues", end.Add(base / 2), 4, 8 * base},
		{"just under base continues", end.Add(base - time.Nanosecond), 4, 8 * base},
		{"quiet exactly base resets", end.Add(base), 1, base},
		{"long quiet resets", end.Add(24 * time.Hour), 1, base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := third.Exhausted(tt.at, base, "again")
			if got.Attempt != tt.wantAttempt || !got.QuarantineUntil.Equal(tt.at.Add(tt.wantFor)) {
				t.Errorf("got attempt %d until %v, want attempt %d until %v",
					got.Attempt, got.QuarantineUntil, tt.wantAttempt, tt.at.Add(tt.wantFor))
			}
		})
	}

	// Quiet is counted from the quarantine's end: a 4× quarantine lasts
	// longer than one base, yet a refusal shortly after it ends continues
	// the streak. Counted from the last report (at end-4×base) the gap
	// would be over 4 bases and the streak would wrongly reset.
	t.Run("quiet counts from the end not the report", func(t *testing.T) {
		at := end.Add(base / 10)
		if gap := at.Sub(end.Add(-4 * base)); gap <= base {
			t.Fatalf("setup: gap since the report %v, want > base %v", gap, base)
		}
		if got := third.Exhausted(at, base, "again"); got.Attempt != 4 {
			t.Errorf("got attempt %d, want 4", got.Attempt)
		}
	})
}

func TestFailed(t *testing.T) {
	t.Parallel()
	type failure struct {
		after time.Duration // since t0
		turn  string
		down  bool
	}
	// coolFrom is when the cooling-off the failures leave began: it ends
	// crewlet.CoolingOff later.
	tests := []struct {
		name     string
		failures []failure
		coolFrom time.Duration // since t0
	}{
		{"a first server error cools off at once", []failure{{0, "t1", false}}, 0},
		{"a first down cools off at once", []failure{{0, "t1", true}}, 0},
		{"the same turn failing again within 2 cooling-offs does not cool again", []failure{{0, "t1", false}, {70 * time.Second, "t1", false}}, 0},
		{"the same turn failing again past 2 cooling-offs cools again", []failure{{0, "t1", false}, {121 * time.Second, "t1", false}}, 121 * time.Second},
		{"the same turn finding the provider down again cools again", []failure{{0, "t1", true}, {70 * time.Second, "t1", true}}, 70 * time.Second},
		{"the same turn's server error after its down does not cool again", []failure{{0, "t1", true}, {70 * time.Second, "t1", false}}, 0},
		{"another turn's server error cools again", []failure{{0, "t1", false}, {70 * time.Second, "t2", false}}, 70 * time.Second},
		{"another turn between makes it no repeat", []failure{{0, "t1", false}, {10 * time.Second, "t2", false}, {70 * time.Second, "t1", false}}, 70 * time.Second},
		{"out of order by a clock skew is still a repeat", []failure{{10 * time.Second, "t1", false}, {5 * time.Second, "t1", false}}, 10 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var s CredentialState
			for _, f := range tt.failures {
				s = s.Failed(t0.Add(f.after), f.turn, "boom "+f.turn, f.down)
			}
			if want := t0.Add(tt.coolFrom + crewlet.CoolingOff); !s.CoolingUntil.Equal(want) {
				t.Errorf("CoolingUntil = %v, want %v", s.CoolingUntil, want)
			}
			last := tt.failures[len(tt.failures)-1]
			if !s.LastFailure.Equal(t0.Add(last.after)) || s.LastFailureTurn != last.turn {
				t.Errorf("last failure = %v %q, want %v %q", s.LastFailure, s.LastFailureTurn, t0.Add(last.after), last.turn)
			}
		})
	}

	t.Run("a later cooling is again 60s", func(t *testing.T) {
		var s CredentialState
		s = s.Failed(t0, "t1", "e1", false)
		if got, want := s.CoolingUntil.Sub(t0), crewlet.CoolingOff; got != want || s.CoolingReason != "e1" {
			t.Fatalf("first cooling lasts %v for %q, want %v for %q", got, s.CoolingReason, want, "e1")
		}
		later := t0.Add(time.Hour)
		s = s.Failed(later, "t2", "e2", true)
		if got, want := s.CoolingUntil.Sub(later), crewlet.CoolingOff; got != want {
			t.Errorf("second cooling lasts %v, want %v (flat, not escalated)", got, want)
		}
		if s.CoolingReason != "e2" {
			t.Errorf("CoolingReason = %q, want %q", s.CoolingReason, "e2")
		}
	})
}

func TestStatesIndependent(t *testing.T) {
	t.Parallel()
	base := 10 * time.Minute
	t.Run("Failed leaves the quarantine alone", func(t *testing.T) {
		q := CredentialState{}.Exhausted(t0, base, "limit")
		got := q.Failed(t0.Add(time.Second), "t1", "e1", false)
		if got.Attempt != q.Attempt || !got.QuarantineUntil.Equal(q.QuarantineUntil) || got.QuarantineReason != q.QuarantineReason {
			t.Errorf("quarantine after Failed = %d %v %q, want %d %v %q",
				got.Attempt, got.QuarantineUntil, got.QuarantineReason, q.Attempt, q.QuarantineUntil, q.QuarantineReason)
		}
		now := t0.Add(3 * time.Second)
		if !got.Quarantined(now) || !got.Cooling(now) {
			t.Errorf("Quarantined, Cooling = %v, %v; want both true", got.Quarantined(now), got.Cooling(now))
		}
	})
	t.Run("Exhausted leaves the cooling alone", func(t *testing.T) {
		c := CredentialState{}.Failed(t0, "t1", "e1", true)
		got := c.Exhausted(t0.Add(2*time.Second), base, "limit")
		if !got.CoolingUntil.Equal(c.CoolingUntil) || got.CoolingReason != c.CoolingReason ||
			!got.LastFailure.Equal(c.LastFailure) || got.LastFailureTurn != c.LastFailureTurn {
			t.Errorf("cooling after Exhausted = %+v, want cooling fields of %+v", got, c)
		}
	})
}

func TestQuarantinedCooling(t *testing.T) {
	t.Parallel()
	s := CredentialState{QuarantineUntil: t0, CoolingUntil: t0}
	tests := []struct {
		name string
		now  time.Time
		want bool
	}{
		{"before", t0.Add(-time.Nanosecond), true},
		{"at the end", t0, false},
		{"after", t0.Add(time.Second), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Quarantined(tt.now); got != tt.want {
				t.Errorf("Quarantined = %v, want %v", got, tt.want)
			}
			if got := s.Cooling(tt.now); got != tt.want {
				t.Errorf("Cooling = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestUnavailable(t *testing.T) {
	t.Parallel()
	qEnd := t0.Add(10 * time.Minute)
	cEnd := t0.Add(time.Minute)
	late := t0.Add(time.Hour)
	c := Candidate{Name: "p", Weight: 1, MaxLoad: -1, Credential: "k", Model: "m"}
	with := func(f func(*Candidate)) Candidate { x := c; f(&x); return x }
	creds := func(s CredentialState) Health { return Health{Credentials: map[string]CredentialState{"k": s}} }
	quarantined := CredentialState{QuarantineUntil: qEnd, Attempt: 1}
	cooling := CredentialState{CoolingUntil: cEnd}
	disabled := Health{DisabledModels: map[string]bool{"m": true}}

	tests := []struct {
		name       string
		selection  string
		c          Candidate
		h          Health
		wantReason string
		wantUntil  *time.Time
	}{
		{"healthy", crewlet.SelectionWeighted, c, Health{}, "", nil},
		{"other credential quarantined", crewlet.SelectionWeighted, c, Health{Credentials: map[string]CredentialState{"other": quarantined}}, "", nil},
		{"other model disabled", crewlet.SelectionWeighted, c, Health{DisabledModels: map[string]bool{"other": true}}, "", nil},
		{"quarantine over", crewlet.SelectionWeighted, c, creds(CredentialState{QuarantineUntil: t0, CoolingUntil: t0.Add(-time.Second)}), "", nil},
		{"quarantined", crewlet.SelectionWeighted, c, creds(quarantined), crewlet.UnavailableQuarantined, &qEnd},
		{"cooling off", crewlet.SelectionWeighted, c, creds(cooling), crewlet.UnavailableCoolingOff, &cEnd},
		{"quarantined and cooling, cooling ends first", crewlet.SelectionWeighted, c, creds(CredentialState{QuarantineUntil: qEnd, CoolingUntil: cEnd}), crewlet.UnavailableQuarantined, &qEnd},
		{"quarantined and cooling, cooling ends last", crewlet.SelectionWeighted, c, creds(CredentialState{QuarantineUntil: cEnd, CoolingUntil: late}), crewlet.UnavailableQuarantined, &late},
		{"disabled", crewlet.SelectionWeighted, c, disabled, crewlet.UnavailableDisabled, nil},
		{"quarantined and disabled", crewlet.SelectionWeighted, c, Health{Credentials: creds(quarantined).Credentials, DisabledModels: disabled.DisabledModels}, crewlet.UnavailableQuarantined, nil},
		{"at max load", crewlet.SelectionWeighted, with(func(x *Candidate) { x.MaxLoad, x.Live = 2, 2 }), Health{}, crewlet.UnavailableMaxLoad, nil},
		{"over max load", crewlet.SelectionWeighted, with(func(x *Candidate) { x.MaxLoad, x.Live = 2, 3 }), Health{}, crewlet.UnavailableMaxLoad, nil},
		{"below max load", crewlet.SelectionWeighted, with(func(x *Candidate) { x.MaxLoad, x.Live = 2, 1 }), Health{}, "", nil},
		{"max load 0 takes no turn", crewlet.SelectionOrdered, with(func(x *Candidate) { x.MaxLoad = 0 }), Health{}, crewlet.UnavailableMaxLoad, nil},
		{"unlimited", crewlet.SelectionWeighted, with(func(x *Candidate) { x.MaxLoad, x.Live = -1, 1000 }), Health{}, "", nil},
		{"cooling and at max load", crewlet.SelectionWeighted, with(func(x *Candidate) { x.MaxLoad, x.Live = 1, 1 }), creds(cooling), crewlet.UnavailableCoolingOff, nil},
		{"weight 0 weighted", crewlet.SelectionWeighted, with(func(x *Candidate) { x.Weight = 0 }), Health{}, crewlet.UnavailableWeightZero, nil},
		{"weight 0 default selection", "", with(func(x *Candidate) { x.Weight = 0 }), Health{}, crewlet.UnavailableWeightZero, nil},
		{"weight 0 ordered", crewlet.SelectionOrdered, with(func(x *Candidate) { x.Weight = 0 }), Health{}, "", nil},
		{"quarantined and weight 0", crewlet.SelectionWeighted, with(func(x *Candidate) { x.Weight = 0 }), creds(quarantined), crewlet.UnavailableQuarantined, nil},
		{"disabled and at max load", crewlet.SelectionWeighted, with(func(x *Candidate) { x.MaxLoad = 0 }), disabled, crewlet.UnavailableDisabled, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reason, until := Unavailable(tt.selection, tt.c, tt.h, t0)
			if reason != tt.wantReason || fmtUntil(until) != fmtUntil(tt.wantUntil) {
				t.Errorf("Unavailable = %q, %s; want %q, %s", reason, fmtUntil(until), tt.wantReason, fmtUntil(tt.wantUntil))
			}
		})
	}
}

// run makes n weighted picks over cands, threading the scores, and returns
// the picks in order.
func run(t *testing.T, cands []Candidate, n int) []string {
	t.Helper()
	var s Scores
	out := make([]string, 0, n)
	for i := range n {
		r := Pick(crewlet.SelectionWeighted, cands, Health{}, t0, s, "")
		if r.Profile == "" {
			t.Fatalf("pick %d: held: %+v", i+1, r.Hold)
		}
		out = append(out, r.Profile)
		s = r.Scores
	}
	return out
}

func TestPickWeightedShares(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		weights []int
		picks   int
	}{
		{"5:3:2", []int{5, 3, 2}, 1000},
		{"100:1", []int{100, 1}, 1010},
		{"1:1:1", []int{1, 1, 1}, 999},
		{"7:0:3", []int{7, 0, 3}, 1000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cands []Candidate
			total := 0
			for i, w := range tt.weights {
				cands = append(cands, cand(fmt.Sprint("p", i), w))
				total += w
			}
			counts := map[string]int{}
			for _, p := range run(t, cands, tt.picks) {
				counts[p]++
			}
			var got []string
			for _, c := range cands {
				got = append(got, fmt.Sprintf("%s(w=%d)=%d", c.Name, c.Weight, counts[c.Name]))
			}
			t.Logf("weights %s over %d picks: %s", tt.name, tt.picks, strings.Join(got, " "))
			for _, c := range cands {
				share := float64(counts[c.Name]) / float64(tt.picks)
				want := float64(c.Weight) / float64(total)
				if math.Abs(share-want) > 0.02 {
					t.Errorf("%s: share %.4f (%d of %d), want %.4f ±0.02", c.Name, share, counts[c.Name], tt.picks, want)
				}
			}
		})
	}
}

func longestRun(picks []string) (string, int) {
	best, bestName, cur := 0, "", 0
	for i, p := range picks {
		if i > 0 && p == picks[i-1] {
			cur++
		} else {
			cur = 1
		}
		if cur > best {
			best, bestName = cur, p
		}
	}
	return bestName, best
}

func TestPickWeightedSmooth(t *testing.T) {
	t.Parallel()
	cands := []Candidate{cand("a", 5), cand("b", 1), cand("c", 1)}
	picks := run(t, cands, 700)

	// SWRR's round for 5,1,1, worked by hand: the heavy profile never
	// takes more than two picks in a row within a round, and b, c are
	// spread into it instead of bunched at its end.
	wantRound := []string{"a", "a", "b", "a", "c", "a", "a"}
	for i := 0; i < len(picks); i += len(wantRound) {
		if got := picks[i : i+len(wantRound)]; !reflect.DeepEqual(got, wantRound) {
			t.Fatalf("round at pick %d = %v, want %v", i+1, got, wantRound)
		}
	}
	// Across rounds the tail "a a" meets the head "a a": 4 is SWRR's
	// longest run, where plain (bunched) round-robin would run 5 a's
	// and then b, c back to back.
	name, n := longestRun(picks)
	t.Logf("weights 5:1:1 over %d picks: first round %v, longest run %d×%s", len(picks), picks[:7], n, name)
	if n > 4 {
		t.Errorf("longest run = %d×%s, want ≤ 4", n, name)
	}
	naive := []string{"a", "a", "a", "a", "a", "b", "c"}
	if _, nn := longestRun(append(naive, naive...)); nn <= n {
		t.Errorf("plain round-robin longest run %d, want it longer than SWRR's %d", nn, n)
	}
}

func TestPickWeightedTies(t *testing.T) {
	t.Parallel()
	// Equal weights tie on every first step: the earlier in pool order wins,
	// so the picks follow the pool order.
	got := run(t, []Candidate{cand("x", 2), cand("y", 2), cand("z", 2)}, 6)
	want := []string{"x", "y", "z", "x", "y", "z"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("picks = %v, want %v", got, want)
	}
}

func TestPickWeightedScores(t *testing.T) {
	t.Parallel()
	cands := []Candidate{cand("a", 3), cand("b", 1)}
	tests := []struct {
		name        string
		in          Scores
		wantProfile string
		want        Scores
	}{
		{"zero scores", Scores{},
			"a", Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": -1, "b": 1}}},
		{"same set continues", Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": -1, "b": 1}},
			"a", Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": -2, "b": 2}}},
		{"same set, b due", Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": -3, "b": 3}},
			"b", Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": 0, "b": 0}}},
		{"other set restarts", Scores{Eligible: []string{"b"}, Score: map[string]int64{"a": -3, "b": 3}},
			"a", Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": -1, "b": 1}}},
		{"same names other order restarts", Scores{Eligible: []string{"b", "a"}, Score: map[string]int64{"a": -3, "b": 3}},
			"a", Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": -1, "b": 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before map[string]int64
			if tt.in.Score != nil {
				before = map[string]int64{}
				for k, v := range tt.in.Score {
					before[k] = v
				}
			}
			r := Pick(crewlet.SelectionWeighted, cands, Health{}, t0, tt.in, "")
			if r.Profile != tt.wantProfile || !reflect.DeepEqual(r.Scores, tt.want) || r.Hold != nil {
				t.Errorf("Pick = %q %+v hold %v, want %q %+v hold nil", r.Profile, r.Scores, r.Hold, tt.wantProfile, tt.want)
			}
			if before != nil && !reflect.DeepEqual(tt.in.Score, before) {
				t.Errorf("input scores changed to %v, want %v", tt.in.Score, before)
			}
		})
	}
}

// naiveFrozenPick is the fleetd seed's selection, kept here to show what the
// reset rule fixes: a candidate that is unavailable keeps its score frozen
// and takes no part in the pick; the others run SWRR among themselves.
func naiveFrozenPick(cands []Candidate, score map[string]int64) string {
	var total int64
	best := ""
	for _, c := range cands {
		if c.MaxLoad >= 0 && c.Live >= c.MaxLoad {
			continue
		}
		score[c.Name] += int64(c.Weight)
		total += int64(c.Weight)
		if best == "" || score[c.Name] > score[best] {
			best = c.Name
		}
	}
	score[best] -= total
	return best
}

func TestPickFrozenScore(t *testing.T) {
	t.Parallel()
	// A free local box (weight 100, one turn at a time) and a paid overflow
	// profile (weight 1). Turns run one after another, so the local box is
	// free at each pick: SWRR gives it picks 1..50 (at pick k local scores
	// 101-k against paid's k, and wins while 101-k >= k), leaving local at
	// -50 and paid at +50. The 50th turn then runs long: local sits at
	// max_load while 20 more turns come, all to paid. Then local frees.
	//
	// Naive (frozen) selection: local's -50 froze while it was busy, and
	// paid alone nets 0 per pick (+1, -1), staying at 50. On local's
	// return: local -50+100 = 50, paid 50+1 = 51, and paid wins: the
	// paid profile takes a turn the free box was idle for.
	//
	// With the reset rule the set {local, paid} differs from the last
	// pick's {paid}, scores restart at 0: local 100, paid 1, local wins.
	local := Candidate{Name: "local", Weight: 100, MaxLoad: 1, Credential: "none", Model: "llama"}
	paid := Candidate{Name: "paid", Weight: 1, MaxLoad: -1, Credential: "key", Model: "gpt"}
	phase := func(localLive int) []Candidate {
		l := local
		l.Live = localLive
		return []Candidate{l, paid}
	}

	var s Scores
	naive := map[string]int64{}
	step := func(i int, cands []Candidate, want string) {
		t.Helper()
		r := Pick(crewlet.SelectionWeighted, cands, Health{}, t0, s, "")
		if r.Profile != want {
			t.Fatalf("pick %d = %q, want %q (scores %+v)", i, r.Profile, want, r.Scores)
		}
		s = r.Scores
		if got := naiveFrozenPick(cands, naive); got != want {
			t.Fatalf("setup: naive pick %d = %q, want %q (scores %v)", i, got, want, naive)
		}
	}
	i := 0
	for range 50 {
		i++
		step(i, phase(0), "local")
	}
	if want := (map[string]int64{"local": -50, "paid": 50}); !reflect.DeepEqual(naive, want) {
		t.Fatalf("naive scores after local's 50 picks = %v, want %v", naive, want)
	}
	for range 20 {
		i++
		step(i, phase(1), "paid")
	}
	if want := (Scores{Eligible: []string{"paid"}, Score: map[string]int64{"paid": 0}}); !reflect.DeepEqual(s, want) {
		t.Fatalf("scores while local is busy = %+v, want %+v", s, want)
	}
	if want := (map[string]int64{"local": -50, "paid": 50}); !reflect.DeepEqual(naive, want) {
		t.Fatalf("naive scores while local is busy = %v, want %v (local frozen)", naive, want)
	}

	// Local frees.
	i++
	back := phase(0)
	r := Pick(crewlet.SelectionWeighted, back, Health{}, t0, s, "")
	want := Scores{Eligible: []string{"local", "paid"}, Score: map[string]int64{"local": -1, "paid": 1}}
	if r.Profile != "local" || !reflect.DeepEqual(r.Scores, want) {
		t.Errorf("pick %d after local frees = %q %+v, want %q %+v", i, r.Profile, r.Scores, "local", want)
	}
	got := naiveFrozenPick(back, naive)
	// Before the winner's deduction: local 50, paid 51.
	if wantNaive := (map[string]int64{"local": 50, "paid": 51 - 101}); got != "paid" || !reflect.DeepEqual(naive, wantNaive) {
		t.Errorf("naive pick %d = %q scores %v, want %q scores %v (the stale score the reset rule fixes)", i, got, naive, "paid", wantNaive)
	}
	t.Logf("after local frees: Pick chose %q, naive frozen pick chose %q (local 50 vs paid 51)", r.Profile, got)
}

func TestPickOrdered(t *testing.T) {
	t.Parallel()
	free := Candidate{Name: "free", Weight: 0, MaxLoad: 1, Credential: "none", Model: "llama"}
	cheap := Candidate{Name: "cheap", Weight: 0, MaxLoad: -1, Credential: "k1", Model: "mini"}
	dear := Candidate{Name: "dear", Weight: 5, MaxLoad: -1, Credential: "k2", Model: "big"}
	busy := free
	busy.Live = 1
	in := Scores{Eligible: []string{"x"}, Score: map[string]int64{"x": 7}}
	tests := []struct {
		name  string
		cands []Candidate
		h     Health
		want  string
	}{
		{"first, weight 0 is fine", []Candidate{free, cheap, dear}, Health{}, "free"},
		{"first at max load", []Candidate{busy, cheap, dear}, Health{}, "cheap"},
		{"second quarantined", []Candidate{busy, cheap, dear}, Health{Credentials: map[string]CredentialState{"k1": {QuarantineUntil: t0.Add(time.Minute)}}}, "dear"},
		{"second disabled", []Candidate{busy, cheap, dear}, Health{DisabledModels: map[string]bool{"mini": true}}, "dear"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Pick(crewlet.SelectionOrdered, tt.cands, tt.h, t0, in, "")
			if r.Profile != tt.want || !reflect.DeepEqual(r.Scores, in) || r.Hold != nil {
				t.Errorf("Pick = %q %+v hold %v, want %q %+v (scores unchanged) hold nil", r.Profile, r.Scores, r.Hold, tt.want, in)
			}
		})
	}
}

func TestPickPrefer(t *testing.T) {
	t.Parallel()
	a, b := cand("a", 9), cand("b", 1)
	zero := cand("z", 0)
	busyB := b
	busyB.MaxLoad, busyB.Live = 1, 1
	in := Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": 4, "b": -4}}
	// A normal weighted pick from in: a 13, b -3 → a, a 13-10 = 3.
	normal := Scores{Eligible: []string{"a", "b"}, Score: map[string]int64{"a": 3, "b": -3}}
	tests := []struct {
		name       string
		selection  string
		cands      []Candidate
		prefer     string
		want       string
		wantScores Scores
	}{
		{"kept though SWRR would pick another", crewlet.SelectionWeighted, []Candidate{a, b}, "b", "b", in},
		{"kept under ordered", crewlet.SelectionOrdered, []Candidate{a, b}, "b", "b", in},
		{"unavailable fails over", crewlet.SelectionWeighted, []Candidate{a, busyB}, "b",
			"a", Scores{Eligible: []string{"a"}, Score: map[string]int64{"a": 0}}},
		{"weight 0 under weighted fails over", crewlet.SelectionWeighted, []Candidate{a, b, zero}, "z", "a", normal},
		{"not in pool", crewlet.SelectionWeighted, []Candidate{a, b}, "gone", "a", normal},
		{"empty", crewlet.SelectionWeighted, []Candidate{a, b}, "", "a", normal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Pick(tt.selection, tt.cands, Health{}, t0, in, tt.prefer)
			if r.Profile != tt.want || !reflect.DeepEqual(r.Scores, tt.wantScores) || r.Hold != nil {
				t.Errorf("Pick = %q %+v hold %v, want %q %+v hold nil", r.Profile, r.Scores, r.Hold, tt.want, tt.wantScores)
			}
		})
	}
}

func TestPickHold(t *testing.T) {
	t.Parallel()
	qEnd := t0.Add(30 * time.Minute)
	cEnd := t0.Add(time.Minute)
	h := Health{
		Credentials: map[string]CredentialState{
			"shared": {QuarantineUntil: qEnd, Attempt: 2},
			"hot":    {CoolingUntil: cEnd},
		},
		DisabledModels: map[string]bool{"retired": true},
	}
	// Two profiles on one credential are quarantined together.
	s1 := Candidate{Name: "s1", Weight: 1, MaxLoad: -1, Credential: "shared", Model: "m1"}
	s2 := Candidate{Name: "s2", Weight: 1, MaxLoad: -1, Credential: "shared", Model: "m2"}
	hot := Candidate{Name: "hot", Weight: 1, MaxLoad: -1, Credential: "hot", Model: "m3"}
	old := Candidate{Name: "old", Weight: 1, MaxLoad: -1, Credential: "k", Model: "retired"}
	full := Candidate{Name: "full", Weight: 1, MaxLoad: 2, Live: 2, Credential: "k", Model: "m4"}
	never := Candidate{Name: "never", Weight: 0, MaxLoad: -1, Credential: "k", Model: "m5"}
	in := Scores{Eligible: []string{"s1"}, Score: map[string]int64{"s1": 1}}

	tests := []struct {
		name      string
		selection string
		cands     []Candidate
		want      crewlet.ProfileHold
	}{
		{"every reason", crewlet.SelectionWeighted, []Candidate{s1, s2, hot, old, full, never}, crewlet.ProfileHold{
			Profiles: []crewlet.ProfileUnavailable{
				{Profile: "s1", Reason: crewlet.UnavailableQuarantined, Until: &qEnd},
				{Profile: "s2", Reason: crewlet.UnavailableQuarantined, Until: &qEnd},
				{Profile: "hot", Reason: crewlet.UnavailableCoolingOff, Until: &cEnd},
				{Profile: "old", Reason: crewlet.UnavailableDisabled},
				{Profile: "full", Reason: crewlet.UnavailableMaxLoad},
				{Profile: "never", Reason: crewlet.UnavailableWeightZero},
			},
			Until: &cEnd,
		}},
		{"shared credential", crewlet.SelectionOrdered, []Candidate{s1, s2}, crewlet.ProfileHold{
			Profiles: []crewlet.ProfileUnavailable{
				{Profile: "s1", Reason: crewlet.UnavailableQuarantined, Until: &qEnd},
				{Profile: "s2", Reason: crewlet.UnavailableQuarantined, Until: &qEnd},
			},
			Until: &qEnd,
		}},
		{"none frees by itself", crewlet.SelectionWeighted, []Candidate{old, full, never}, crewlet.ProfileHold{
			Profiles: []crewlet.ProfileUnavailable{
				{Profile: "old", Reason: crewlet.UnavailableDisabled},
				{Profile: "full", Reason: crewlet.UnavailableMaxLoad},
				{Profile: "never", Reason: crewlet.UnavailableWeightZero},
			},
		}},
		{"empty pool", crewlet.SelectionWeighted, nil, crewlet.ProfileHold{Profiles: []crewlet.ProfileUnavailable{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Pick(tt.selection, tt.cands, h, t0, in, "s1")
			if r.Profile != "" || r.Hold == nil {
				t.Fatalf("Pick = %q hold %v, want a hold", r.Profile, r.Hold)
			}
			if !reflect.DeepEqual(*r.Hold, tt.want) {
				t.Errorf("hold = %s, want %s", fmtHold(*r.Hold), fmtHold(tt.want))
			}
			if !r.Hold.Since.IsZero() {
				t.Errorf("hold Since = %v, want zero (set by the caller)", r.Hold.Since)
			}
			if !reflect.DeepEqual(r.Scores, in) {
				t.Errorf("scores = %+v, want unchanged %+v", r.Scores, in)
			}
		})
	}

	t.Run("another credential takes the turn", func(t *testing.T) {
		free := Candidate{Name: "free", Weight: 1, MaxLoad: -1, Credential: "k", Model: "m6"}
		r := Pick(crewlet.SelectionWeighted, []Candidate{s1, s2, free}, h, t0, Scores{}, "")
		if r.Profile != "free" || r.Hold != nil {
			t.Errorf("Pick = %q hold %v, want %q hold nil", r.Profile, r.Hold, "free")
		}
	})
	t.Run("frees when the quarantine ends", func(t *testing.T) {
		r := Pick(crewlet.SelectionWeighted, []Candidate{s1, s2}, h, qEnd, Scores{}, "")
		if r.Profile != "s1" || r.Hold != nil {
			t.Errorf("Pick at %v = %q hold %v, want %q hold nil", qEnd, r.Profile, r.Hold, "s1")
		}
	})
}

func fmtHold(h crewlet.ProfileHold) string {
	var b strings.Builder
	b.WriteString("{")
	for _, p := range h.Profiles {
		fmt.Fprintf(&b, "%s:%s until %s; ", p.Profile, p.Reason, fmtUntil(p.Until))
	}
	fmt.Fprintf(&b, "until %s}", fmtUntil(h.Until))
	return b.String()
}
