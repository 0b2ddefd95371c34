// Package profiles runs each role's pool of model profiles: which profile a
// turn runs on (a slot of it, or a hold when none can take the turn), the
// health of the credentials they spend (quarantine, cooling off), the
// fleet-wide model switch, and GET /profiles. Every fact lives in Postgres,
// so every node and the API read the same ones; the decisions are
// internal/pool's.
package profiles

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/pool"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
)

// Service runs the profile pools of one org.
type Service struct {
	seats *seatclient.Client
	store *store.Store
	org   config.Source
	log   *slog.Logger
	// metrics counts quarantines and cool-offs; nil counts none.
	metrics *metrics.Metrics
	// Now is the clock quarantines and slots are reckoned on.
	Now func() time.Time
	// mismatched remembers the profiles whose answering model was logged,
	// so a mismatch is logged once per profile, not once per round.
	mismatched sync.Map
}

// New returns the profile service of an org. Without a seat client
// (activity tests) it wakes no waiting turn; they try again by themselves.
// m counts quarantines and cool-offs (nil: nothing).
func New(seats *seatclient.Client, st *store.Store, org config.Source, m *metrics.Metrics, log *slog.Logger) *Service {
	return &Service{seats: seats, store: st, org: org, metrics: m, log: log, Now: time.Now}
}

// SlotLease is how long a turn's slot counts without a round renewing it: a
// backstop for a turn workflow that vanished without giving its slot back
// (terminated by hand). It outlasts one model call with its retries and one
// tool call, the longest a running turn goes without a round.
const SlotLease = 30 * time.Minute

// candidates lists a role's pool as internal/pool reads it, in pool order.
func (p *Service) candidates(role config.Role, live map[string]int) []pool.Candidate {
	out := make([]pool.Candidate, 0, len(role.Pool()))
	for _, name := range role.Pool() {
		prof := p.org.Now().Profiles[name]
		out = append(out, pool.Candidate{
			Name: name, Weight: prof.Weight, MaxLoad: prof.MaxLoad, Live: live[name],
			Credential: prof.Credential, Model: prof.ModelID(),
		})
	}
	return out
}

func (p *Service) credentials(names []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, name := range names {
		c := p.org.Now().Profiles[name].Credential
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out
}

// AcquireRequest asks for a profile for one turn run.
type AcquireRequest struct {
	Seat, Role      string
	TurnID, WorkKey string
	Epoch           int64
	// Prefer is the profile the turn ran on so far: kept while it can take
	// the turn, so a turn moves only when it must fail over.
	Prefer string
}

// Acquire picks the profile a turn runs on and takes a slot of it. With no
// profile of the pool able to take the turn it returns the hold instead, and
// the turn is recorded as waiting for one.
func (p *Service) Acquire(ctx context.Context, req AcquireRequest) (string, *crewlet.ProfileHold, error) {
	role := p.org.Now().Roles[req.Role]
	names := role.Pool()
	now := p.Now()
	var hold *crewlet.ProfileHold
	picked, freed, err := p.store.AcquireProfile(ctx, store.SlotRequest{
		Pool: req.Role, Profiles: names, Credentials: p.credentials(names),
		TurnID: req.TurnID, Epoch: req.Epoch, Seat: req.Seat, WorkKey: req.WorkKey,
		Now: now, ExpiresAt: now.Add(SlotLease),
	}, func(f store.ProfileFacts) (string, pool.Scores) {
		prefer := req.Prefer
		if prefer == "" {
			prefer = f.Current
		}
		res := pool.Pick(role.Selection, p.candidates(role, f.Live), pool.Health{Credentials: f.Credentials, DisabledModels: f.Disabled}, now, f.Scores, prefer)
		hold = res.Hold
		return res.Profile, res.Scores
	})
	if err != nil {
		return "", nil, err
	}
	if freed != "" {
		p.wake(ctx, []string{freed}, 1)
	}
	if picked == "" {
		return "", hold, nil
	}
	if req.Prefer != "" && picked != req.Prefer {
		p.log.WarnContext(ctx, "turn_failed_over", "seat", req.Seat, "turn", req.TurnID, "from", req.Prefer, "to", picked)
	}
	return picked, nil, nil
}

// Release gives back a turn run's slot and wakes the oldest turn waiting on
// the profile it freed.
func (p *Service) Release(ctx context.Context, turnID string, epoch int64) error {
	freed, err := p.store.ReleaseProfile(ctx, turnID, epoch)
	if err != nil {
		return err
	}
	p.Freed(ctx, freed)
	return nil
}

// Freed wakes the oldest turn waiting on profile, whose slot a turn run
// gave back ("" wakes none).
func (p *Service) Freed(ctx context.Context, profile string) {
	if profile != "" {
		p.wake(ctx, []string{profile}, 1)
	}
}

// wakeTries bounds how many gone waiters one wake skips before it gives up;
// a held turn also tries again by itself, so a wake lost here is late, not
// lost.
const wakeTries = 8

// wake signals up to n turns waiting on any of profiles, oldest first. A
// waiter whose workflow is gone is forgotten. It only nudges, so a failure
// is logged and the caller goes on.
func (p *Service) wake(ctx context.Context, profiles []string, n int) {
	if p.seats == nil {
		return
	}
	waiters, err := p.store.ProfileWaiters(ctx, profiles, n+wakeTries)
	if err != nil {
		p.log.WarnContext(ctx, "profile_wake_failed", "profiles", profiles, "error", err)
		return
	}
	woken := 0
	for _, turnID := range waiters {
		if woken >= n {
			return
		}
		err := p.seats.ProfileFree(ctx, turnID)
		switch {
		case err == nil:
			woken++
		case seatclient.Gone(err):
			if err := p.store.ForgetProfileWaiter(ctx, turnID); err != nil {
				p.log.WarnContext(ctx, "profile_wake_failed", "turn", turnID, "error", err)
			}
		default:
			p.log.WarnContext(ctx, "profile_wake_failed", "turn", turnID, "error", err)
		}
	}
}

// Usable says why a profile can no longer be used by a turn that holds a
// slot of it ("" when it can): its credential is quarantined or cooling
// off, or its model is switched off. Load is not asked: the turn holds its
// slot already.
func (p *Service) Usable(ctx context.Context, profile string) (string, error) {
	prof := p.org.Now().Profiles[profile]
	health, err := p.store.CredentialHealth(ctx, []string{prof.Credential})
	if err != nil {
		return "", err
	}
	disabled, err := p.store.DisabledModels(ctx)
	if err != nil {
		return "", err
	}
	return p.unusable(profile, pool.Health{Credentials: health, DisabledModels: disabled}), nil
}

// Renew renews the slot a turn run holds of profile and says, as Usable
// does, why the profile can no longer be used ("" when it can), in one
// round trip. renewed is false when the slot's lease had run out: the run
// must take a slot again.
func (p *Service) Renew(ctx context.Context, turnID string, epoch int64, profile string) (renewed bool, reason string, err error) {
	now := p.Now()
	renewed, health, err := p.store.RenewProfileSlot(ctx, turnID, epoch, now, now.Add(SlotLease), p.org.Now().Profiles[profile].Credential)
	if err != nil {
		return false, "", err
	}
	return renewed, p.unusable(profile, health), nil
}

// unusable is why health keeps a turn holding a slot of profile from
// using it: load is not asked.
func (p *Service) unusable(profile string, health pool.Health) string {
	prof := p.org.Now().Profiles[profile]
	c := pool.Candidate{Name: profile, Weight: 1, MaxLoad: config.Unlimited, Credential: prof.Credential, Model: prof.ModelID()}
	reason, _ := pool.Unavailable(crewlet.SelectionOrdered, c, health, p.Now())
	return reason
}

// Exhausted records a usage-limit refusal of a profile's credential: it is
// quarantined, every profile spending it with it.
func (p *Service) Exhausted(ctx context.Context, profile, reason string) error {
	cred := p.org.Now().Profiles[profile].Credential
	now := p.Now()
	before, after, err := p.store.ReportCredential(ctx, cred, func(s pool.CredentialState) pool.CredentialState {
		return s.Exhausted(now, p.org.Now().Quarantine.Base, reason)
	})
	if err != nil {
		return err
	}
	if !before.Quarantined(now) {
		p.metrics.Quarantined(profile)
		p.log.WarnContext(ctx, "credential_quarantined", "credential", cred, "profile", profile, "attempt", after.Attempt,
			"until", after.QuarantineUntil, "for", after.QuarantineUntil.Sub(now).Round(time.Second), "reason", reason)
	}
	return nil
}

// Failed records a failure other than a usage limit (a server error, a
// refused connection, a timeout) of a turn on a profile's credential, which
// cools it off (pool.CredentialState.Failed says when it does not); down
// says the provider gave no answer or said it is unavailable. cooling says
// whether the credential is cooling off now: the turn then fails over.
func (p *Service) Failed(ctx context.Context, profile, turnID, reason string, down bool) (cooling bool, err error) {
	cred := p.org.Now().Profiles[profile].Credential
	now := p.Now()
	before, after, err := p.store.ReportCredential(ctx, cred, func(s pool.CredentialState) pool.CredentialState {
		return s.Failed(now, turnID, reason, down)
	})
	if err != nil {
		return false, err
	}
	if !before.Cooling(now) && after.Cooling(now) {
		p.metrics.CooledOff(profile)
		p.log.WarnContext(ctx, "credential_cooling_off", "credential", cred, "profile", profile, "until", after.CoolingUntil, "reason", reason)
	}
	return after.Cooling(now), nil
}

// Answered records which model a profile's provider said answered. A
// mismatch with the configured model is logged once per profile and kept
// for GET /profiles; it only reports, so it never fails the round.
func (p *Service) Answered(ctx context.Context, profile, answered string) {
	configured := p.org.Now().Profiles[profile].Model
	if answered == "" || configured == "" || answered == configured {
		return
	}
	if prev, ok := p.mismatched.Load(profile); ok && prev == answered {
		return
	}
	p.mismatched.Store(profile, answered)
	p.log.WarnContext(ctx, "model_mismatch", "profile", profile, "configured", configured, "answered", answered)
	if _, err := p.store.NoteAnsweredModel(ctx, profile, configured, answered); err != nil {
		p.log.WarnContext(ctx, "model_mismatch_unrecorded", "profile", profile, "error", err)
	}
}

// Status returns every profile as GET /profiles shows it, in name order.
func (p *Service) Status(ctx context.Context) ([]crewlet.ProfileStatus, error) {
	names := make([]string, 0, len(p.org.Now().Profiles))
	for name := range p.org.Now().Profiles {
		names = append(names, name)
	}
	slices.Sort(names)
	now := p.Now()
	live, err := p.store.LiveSlots(ctx, names, now)
	if err != nil {
		return nil, err
	}
	health, err := p.store.CredentialHealth(ctx, p.credentials(names))
	if err != nil {
		return nil, err
	}
	disabled, err := p.store.DisabledModels(ctx)
	if err != nil {
		return nil, err
	}
	answered, err := p.store.AnsweredModels(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]crewlet.ProfileStatus, 0, len(names))
	for _, name := range names {
		prof := p.org.Now().Profiles[name]
		st := crewlet.ProfileStatus{
			Name: name, Provider: prof.Provider, Model: prof.ModelID(), Credential: prof.Credential,
			Weight: prof.Weight, Live: live[name], Disabled: disabled[prof.ModelID()],
		}
		if prof.MaxLoad != config.Unlimited {
			st.MaxLoad = ptr(prof.MaxLoad)
			st.Free = ptr(max(0, prof.MaxLoad-live[name]))
		}
		h := health[prof.Credential]
		if h.Quarantined(now) {
			st.Quarantine = &crewlet.ProfileQuarantine{Credential: prof.Credential, Until: h.QuarantineUntil,
				SecondsLeft: secondsLeft(h.QuarantineUntil, now), Attempt: h.Attempt, Reason: h.QuarantineReason}
		}
		if h.Cooling(now) {
			st.CoolingOff = &crewlet.ProfileCoolingOff{Credential: prof.Credential, Until: h.CoolingUntil,
				SecondsLeft: secondsLeft(h.CoolingUntil, now), Reason: h.CoolingReason}
		}
		if st.Quarantine != nil || st.CoolingOff != nil || st.Disabled {
			st.Free = ptr(0)
		}
		if a, ok := answered[name]; ok && a[0] == prof.Model {
			st.AnsweredModel = a[1]
		}
		out = append(out, st)
	}
	return out, nil
}

// Models are the model ids the org's profiles use, each once.
func (p *Service) Models() map[string][]string {
	out := map[string][]string{}
	for name, prof := range p.org.Now().Profiles {
		out[prof.ModelID()] = append(out[prof.ModelID()], name)
	}
	return out
}

// SwitchModel switches a model off or back on for the whole fleet. Every
// pick reads the switch, so the next turn on any node honours it; turns
// running on it fail over at their next round. Switching one back on wakes
// the turns waiting on its profiles.
func (p *Service) SwitchModel(ctx context.Context, model string, disabled bool, by, reason string) (crewlet.ModelSwitch, error) {
	profiles, ok := p.Models()[model]
	if !ok {
		return crewlet.ModelSwitch{}, crewlet.Errorf(crewlet.ENOTFOUND, "no profile uses model %q; `crewlet profiles` lists the models in use", model)
	}
	sw, err := p.store.SetModelSwitch(ctx, crewlet.ModelSwitch{Model: model, Disabled: disabled, By: by, Reason: reason})
	if err != nil {
		return sw, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "model %s could not be switched; see the server log", model)
	}
	p.log.InfoContext(ctx, "model_switched", "model", model, "disabled", disabled, "by", by, "reason", reason)
	if !disabled {
		p.wake(ctx, profiles, maxWakeOnEnable)
	}
	return sw, nil
}

// maxWakeOnEnable bounds the turns one switch-on wakes at once; the rest
// try again by themselves within their recheck.
const maxWakeOnEnable = 256

func secondsLeft(until, now time.Time) int64 {
	return int64((until.Sub(now) + time.Second - 1) / time.Second)
}

func ptr[T any](v T) *T { return &v }
