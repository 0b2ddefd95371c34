// The profile a turn runs on: acquiring and releasing a slot of its pool,
// and checking before each round that the profile can still take it.

package activities

import (
	"context"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/profiles"
)

// roundProfile is the profile a round runs on. A turn holding a slot
// (requested) renews it and runs on that profile while it can still be
// used; once its credential is quarantined or cooling off, its model
// switched off, or its slot lapsed, the round fails over. A turn begun
// before profile pools asked for none and runs on its role's first profile
// while that one can be used; when it cannot, the round fails as
// ProfileUnavailable, which such a turn cannot fail over from: it fails,
// and its triggers come back in a turn that picks from the pool.
// COMPAT(profile-pools@1): the requested == "" branch.
func (a *Turns) roundProfile(ctx context.Context, handle, turnID string, epoch int64, requested string, role config.Role) (string, error) {
	if requested == "" {
		return role.Pool()[0], a.usable(ctx, role.Pool()[0])
	}
	if _, ok := a.model(requested); !ok {
		return "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("profile %s is no longer in the org", requested), crewlet.ErrorTypeProfileUnavailable, nil)
	}
	renewed, reason, err := a.profiles.Renew(ctx, turnID, epoch, requested)
	if err != nil {
		return "", err
	}
	if !renewed {
		return "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the turn's slot of profile %s lapsed", requested), crewlet.ErrorTypeProfileUnavailable, nil)
	}
	return requested, unusable(requested, reason)
}

// usable fails as ProfileUnavailable when a profile can no longer be used:
// its credential is quarantined or cooling off, or its model switched off.
func (a *Turns) usable(ctx context.Context, profile string) error {
	reason, err := a.profiles.Usable(ctx, profile)
	if err != nil {
		return err
	}
	return unusable(profile, reason)
}

// unusable is the ProfileUnavailable failure of a profile that cannot be
// used for reason; nil when reason is "".
func unusable(profile, reason string) error {
	if reason == "" {
		return nil
	}
	return temporal.NewNonRetryableApplicationError(
		fmt.Sprintf("profile %s is %s", profile, strings.ReplaceAll(reason, "_", " ")), crewlet.ErrorTypeProfileUnavailable, nil)
}

// AcquireProfile picks the profile a turn runs on and takes a slot of it
// (docs/architecture.md, "Profile pools"). A turn keeps the profile it ran on
// while that one can take it; else it fails over to another of its pool; with
// none able to, the output says why and the turn waits. Fenced like every step
// of the turn.
func (a *Turns) AcquireProfile(ctx context.Context, in crewlet.AcquireProfileInput) (out crewlet.AcquireProfileOutput, err error) {
	seat, _, err := a.role(ctx, in.Handle)
	if err != nil {
		return out, err
	}
	turn, err := a.store.TenureTurn(ctx, in.Tenure, in.WorkKey)
	if err != nil {
		return out, err
	}
	return a.acquire(ctx, seat.Role, in, turn.Profile)
}

// acquire is AcquireProfile for a turn run of the pool that last ran on
// prefer ("" before its first pick).
func (a *Turns) acquire(ctx context.Context, pool string, in crewlet.AcquireProfileInput, prefer string) (out crewlet.AcquireProfileOutput, err error) {
	out.Profile, out.Hold, err = a.profiles.Acquire(ctx, profiles.AcquireRequest{
		Seat: in.Handle, Role: pool, TurnID: in.TurnID, WorkKey: in.WorkKey, Epoch: in.Epoch, Prefer: prefer,
	})
	if out.Hold != nil {
		a.log.Info("turn_held_for_profile", "seat", in.Handle, "turn", in.TurnID, "pool", pool, "profiles", len(out.Hold.Profiles), "until", out.Hold.Until)
	}
	return out, err
}

// ReleaseProfile gives back a turn run's profile slot and wakes the oldest
// turn waiting for that profile. Not fenced: a slot is its run's own.
func (a *Turns) ReleaseProfile(ctx context.Context, in crewlet.ReleaseProfileInput) (err error) {
	return a.profiles.Release(ctx, in.TurnID, in.Epoch)
}
