// Package pool picks the profile a turn runs on from its role's pool and keeps
// the health of the credentials behind those profiles
// (docs/architecture.md, "Profile pools").
//
// It does no I/O and reads no clock: the caller loads the pool's live load,
// the credentials' health and the selection scores, passes now, and persists
// what comes back. Keeping the decisions pure lets every rule (escalation,
// streaks, the weighted ratio) be tested with an injected clock and no sleeps.
package pool

import (
	"time"

	"github.com/crewlet/crewlet"
)

// Candidate is one profile of a role's pool, in the pool's (definition)
// order.
type Candidate struct {
	Name string
	// Weight is the profile's share under weighted selection; 0 means it
	// is never picked by weighted selection (it stays reachable through
	// ordered pools and an explicit prefer).
	Weight int
	// MaxLoad is the most concurrent turns on the profile fleet-wide: any
	// negative value (-1 by convention) is unlimited, 0 takes no turn.
	MaxLoad int
	// Live counts the turns holding a slot of the profile now, fleet-wide.
	Live       int
	Credential string
	Model      string
}

// CredentialState is what is known of one credential's health. The caller
// persists it as-is and hands it back on the next call; the zero value is a
// healthy credential with no history.
type CredentialState struct {
	// QuarantineUntil is when the current (or last) usage-limit quarantine
	// ends.
	QuarantineUntil time.Time
	// Attempt counts consecutive usage-limit refusals (the streak); it
	// keeps counting past the cap on the cooldown.
	Attempt          int
	QuarantineReason string
	// CoolingUntil is when the current (or last) cooling-off ends.
	CoolingUntil  time.Time
	CoolingReason string
	// LastFailure and LastFailureTurn remember the last non-exhaustion
	// failure, so that a failure of another turn close after it can be
	// told from one turn failing again and again.
	LastFailure     time.Time
	LastFailureTurn string
}

// Quarantined reports whether the credential is quarantined at now.
func (s CredentialState) Quarantined(now time.Time) bool {
	return now.Before(s.QuarantineUntil)
}

// Cooling reports whether the credential is cooling off at now.
func (s CredentialState) Cooling(now time.Time) bool {
	return now.Before(s.CoolingUntil)
}

// Cooldown is how long the attempt-th consecutive usage-limit refusal
// quarantines a credential: base doubled per attempt, capped at
// crewlet.QuarantineMultiplierCap times base (1×, 2×, 4×, 8×, 12×, 12×…).
// An attempt below 1 counts as the first.
func Cooldown(base time.Duration, attempt int) time.Duration {
	// Doubling in a loop that stops at the cap, rather than shifting by
	// attempt-1, so that an attempt count grown large over a long outage
	// cannot overflow the multiplier.
	m := 1
	for i := 1; i < attempt && m < crewlet.QuarantineMultiplierCap; i++ {
		m *= 2
	}
	if m > crewlet.QuarantineMultiplierCap {
		m = crewlet.QuarantineMultiplierCap
	}
	return base * time.Duration(m)
}

// Exhausted applies a usage-limit refusal reported at now, with base the
// credential's first cooldown.
//
// A refusal while the credential is still quarantined is the same incident
// (turns already in flight when the limit hit report it one after another),
// so the state is returned unchanged: escalating on each of them would
// multiply one outage by the fleet's concurrency.
//
// Otherwise the refusal continues the streak when it comes less than one
// base after the last quarantine ended, and starts a new one (attempt 1)
// after a quiet period of at least one base. The quiet is counted from the
// quarantine's end, not from the last report: counted from the report, every
// escalated quarantine (2× base and more) would itself outlast the quiet
// period, so the first refusal after it would always reset the streak and the
// cooldown could never grow past 2×.
func (s CredentialState) Exhausted(now time.Time, base time.Duration, reason string) CredentialState {
	if s.Quarantined(now) {
		return s
	}
	attempt := 1
	if s.Attempt > 0 && !s.QuarantineUntil.IsZero() && now.Before(s.QuarantineUntil.Add(base)) {
		attempt = s.Attempt + 1
	}
	s.Attempt = attempt
	s.QuarantineUntil = now.Add(Cooldown(base, attempt))
	s.QuarantineReason = reason
	return s
}

// Failed applies a failure other than a usage limit (a server error, a
// timeout) of turn at now, and cools the credential off at once for
// crewlet.CoolingOff: the turn fails over to another profile of its pool
// rather than trying this one again and again while the others sit idle.
//
// down says the provider gave no answer at all or said it is unavailable
// (crewlet.ProviderError.Down): nothing in a request causes that, so it
// always cools the credential off. Any other server error (a 500, a stream
// broken off) may be the request's own doing, so it does not when the same
// turn was the last to fail on the credential within 2×crewlet.CoolingOff
// (the cooling-off and the wait it caused, with room): that is one turn
// meeting the same error again after it failed over and came back, which
// points at the turn, and its own retries, bounded, handle it. Without
// that guard one such request would cool every profile of its pool off
// in turn, for as long as it is retried, and hold every other turn with it.
//
// The cooling-off is flat, never escalated (see crewlet.CoolingOff), and a
// later one lasts the same. Failed leaves the quarantine fields alone, as
// Exhausted leaves the cooling fields: the two states are independent and a
// credential can be in both.
func (s CredentialState) Failed(now time.Time, turn, reason string, down bool) CredentialState {
	d := now.Sub(s.LastFailure)
	repeat := !s.LastFailure.IsZero() && s.LastFailureTurn == turn && d >= -2*crewlet.CoolingOff && d <= 2*crewlet.CoolingOff
	if down || !repeat {
		s.CoolingUntil = now.Add(crewlet.CoolingOff)
		s.CoolingReason = reason
	}
	s.LastFailure = now
	s.LastFailureTurn = turn
	return s
}

// Health is the state the pick reads: the credentials' health by credential
// name (a missing credential is healthy) and the models switched off.
type Health struct {
	Credentials    map[string]CredentialState
	DisabledModels map[string]bool
}

// weighted reports whether selection is weighted selection, the default for
// an empty selection. Only SelectionOrdered opts out; config validation
// rejects any other value before it gets here.
func weighted(selection string) bool {
	return selection != crewlet.SelectionOrdered
}

// Unavailable says why c cannot take a turn now ("" when it can) and until
// when it frees by itself (nil when it won't).
//
// Every block is checked, not only the first: the reason is the first that
// applies (quarantined, cooling off, disabled, max load, weight 0) but until
// must hold for all of them, so it is the later of a quarantine's and a
// cooling-off's end, and nil as soon as any block lifts only by a freed slot
// or an operator. Reporting the earlier end would wake a held turn only to
// find the profile still blocked.
func Unavailable(selection string, c Candidate, h Health, now time.Time) (reason string, until *time.Time) {
	cs := h.Credentials[c.Credential]
	var end time.Time
	openEnded := false
	block := func(r string) {
		if reason == "" {
			reason = r
		}
	}
	if cs.Quarantined(now) {
		block(crewlet.UnavailableQuarantined)
		end = cs.QuarantineUntil
	}
	if cs.Cooling(now) {
		block(crewlet.UnavailableCoolingOff)
		if cs.CoolingUntil.After(end) {
			end = cs.CoolingUntil
		}
	}
	if h.DisabledModels[c.Model] {
		block(crewlet.UnavailableDisabled)
		openEnded = true
	}
	if c.MaxLoad >= 0 && c.Live >= c.MaxLoad {
		block(crewlet.UnavailableMaxLoad)
		openEnded = true
	}
	// A negative weight (rejected by config) counts as 0: let through, it
	// would shrink the round's total and unbalance every other share.
	if weighted(selection) && c.Weight <= 0 {
		block(crewlet.UnavailableWeightZero)
		openEnded = true
	}
	if reason == "" || openEnded {
		return reason, nil
	}
	return reason, &end
}

// Scores is the running state of one pool's weighted selection, persisted by
// the caller between picks. The zero value starts a fresh round.
type Scores struct {
	// Eligible is the candidate set of the last pick, in pool order: the
	// set the scores belong to.
	Eligible []string `json:"eligible"`
	// Score is each eligible candidate's current score.
	Score map[string]int64 `json:"score"`
}

// Result is the outcome of a pick: the profile, the scores to persist, or
// the hold when no profile can take the turn.
type Result struct {
	// Profile is the chosen profile; "" when the turn is held.
	Profile string
	// Scores is what the caller persists for the next pick of this pool.
	Scores Scores
	// Hold says why no profile can take the turn; nil when one can. Its
	// Since is left zero for the caller, which knows when the turn started
	// waiting.
	Hold *crewlet.ProfileHold
}

// Pick chooses the profile for a turn of a pool with the given selection
// policy. prefer, when non-empty and available, is kept (a turn keeps its
// profile unless it must fail over) and scores are returned unchanged:
// keeping a profile is not a new pick and must not shift the ratio.
//
// Weighted selection is smooth weighted round-robin (nginx style): each
// available candidate adds its weight to its score, the highest score wins
// (ties to the earlier in pool order), and the winner gives back the total
// weight of the available set. Ordered selection takes the first available
// candidate and leaves the scores alone. When no candidate is available the
// result carries a hold listing every candidate and why.
func Pick(selection string, cands []Candidate, h Health, now time.Time, s Scores, prefer string) Result {
	hold := &crewlet.ProfileHold{Profiles: []crewlet.ProfileUnavailable{}}
	var avail []Candidate
	preferOK := false
	for _, c := range cands {
		reason, until := Unavailable(selection, c, h, now)
		if reason != "" {
			hold.Profiles = append(hold.Profiles, crewlet.ProfileUnavailable{Profile: c.Name, Reason: reason, Until: until})
			if until != nil && (hold.Until == nil || until.Before(*hold.Until)) {
				u := *until
				hold.Until = &u
			}
			continue
		}
		avail = append(avail, c)
		if prefer != "" && c.Name == prefer {
			preferOK = true
		}
	}
	switch {
	case len(avail) == 0:
		return Result{Scores: s, Hold: hold}
	case preferOK:
		return Result{Profile: prefer, Scores: s}
	case !weighted(selection):
		return Result{Profile: avail[0].Name, Scores: s}
	}
	return pickWeighted(avail, s)
}

// pickWeighted runs one smooth weighted round-robin step over avail, every
// one of them available with a positive weight.
//
// Scores belong to one candidate set: when avail differs from the set of the
// last pick, every score restarts at 0. Keeping the scores of a candidate
// that dropped out (at max load, quarantined) freezes them, and a frozen
// score comes back stale: a cheap heavy profile that won just before it
// filled up returns deep in debt and loses the next pick to a paid overflow
// profile, which is exactly the pick weighting was meant to avoid. Starting
// over costs only the ratio's phase within one round, never its long-run
// share while the set holds steady.
func pickWeighted(avail []Candidate, s Scores) Result {
	names := make([]string, len(avail))
	for i, c := range avail {
		names[i] = c.Name
	}
	same := len(names) == len(s.Eligible)
	for i := 0; same && i < len(names); i++ {
		same = names[i] == s.Eligible[i]
	}
	// A fresh map either way: the caller's map is its persisted state and
	// must not change under it.
	score := make(map[string]int64, len(avail))
	var total int64
	best := -1
	for i, c := range avail {
		v := int64(c.Weight)
		if same {
			v += s.Score[c.Name]
		}
		score[c.Name] = v
		total += int64(c.Weight)
		// Strictly greater, so ties go to the earlier candidate.
		if best < 0 || v > score[avail[best].Name] {
			best = i
		}
	}
	winner := avail[best].Name
	score[winner] -= total
	return Result{Profile: winner, Scores: Scores{Eligible: names, Score: score}}
}
