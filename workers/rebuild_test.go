package workers

import (
	"slices"
	"testing"
	"time"

	"github.com/crewlet/crewlet/internal/config"
)

// What a node reads of Temporal decides whether it takes Temporal's state
// as lost and what it rebuilds: each row is one way Temporal can come back.
func TestPlanRebuild(t *testing.T) {
	boot := time.Date(2026, 12, 5, 6, 0, 0, 0, time.UTC)
	later := boot.Add(time.Hour)
	seen := temporalSeen{DutyCreated: boot, DutyActions: 40, DeploymentCreated: boot, Current: "b1"}
	held := temporalFacts{DutyFound: true, DutyCreated: boot, DutyActions: 41, DeploymentFound: true, DeploymentCreated: boot, Current: "b1"}
	for _, tc := range []struct {
		name    string
		facts   temporalFacts
		seen    temporalSeen
		policy  string
		missing []string
		promote bool
		fix     bool
	}{
		{name: "state held", facts: held, seen: seen, policy: config.PromoteFirst},
		{name: "another build current (a rollout)", policy: config.PromoteFirst, seen: seen,
			facts: temporalFacts{DutyFound: true, DutyCreated: boot, DutyActions: 40, DeploymentFound: true, DeploymentCreated: boot, Current: "b2"}},
		{name: "restarted empty, before any poll", policy: config.PromoteFirst, seen: seen,
			facts:   temporalFacts{},
			missing: []string{missingDuties, missingDeployment, missingCurrentVersion}, promote: true},
		{name: "restarted empty, pollers back", policy: config.PromoteFirst, seen: seen,
			facts:   temporalFacts{DeploymentFound: true, DeploymentCreated: later},
			missing: []string{missingDuties, missingDeploymentReplaced, missingCurrentVersion}, promote: true},
		{name: "a peer rebuilt first", policy: config.PromoteFirst, seen: seen,
			facts:   temporalFacts{DutyFound: true, DutyCreated: later, DeploymentFound: true, DeploymentCreated: later, Current: "b1"},
			missing: []string{missingDutiesReplaced, missingDeploymentReplaced}, promote: true},
		{name: "restored from an older backup", policy: config.PromoteFirst, seen: seen,
			facts:   temporalFacts{DutyFound: true, DutyCreated: boot, DutyActions: 12, DeploymentFound: true, DeploymentCreated: boot, Current: "b0"},
			missing: []string{missingDutiesRolledBack}, promote: true},
		{name: "a peer rebuilt first, its duty younger", policy: config.PromoteFirst, seen: seen,
			facts:   temporalFacts{DutyFound: true, DutyCreated: later, DutyActions: 1, DeploymentFound: true, DeploymentCreated: boot, Current: "b1"},
			missing: []string{missingDutiesReplaced}, promote: true},
		{name: "duties deleted only", policy: config.PromoteFirst, seen: seen,
			facts:   temporalFacts{DeploymentFound: true, DeploymentCreated: boot, Current: "b1"},
			missing: []string{missingDuties}, promote: true},
		{name: "current version unset only", policy: config.PromoteAlways, seen: seen,
			facts:   temporalFacts{DutyFound: true, DutyCreated: boot, DutyActions: 40, DeploymentFound: true, DeploymentCreated: boot},
			missing: []string{missingCurrentVersion}, promote: true},
		{name: "promote never: rebuilt, the build left to the operator", policy: config.PromoteNever, seen: seen,
			facts:   temporalFacts{DeploymentFound: true, DeploymentCreated: later},
			missing: []string{missingDuties, missingDeploymentReplaced, missingCurrentVersion}, fix: true},
		{name: "promote never, never current: not a loss", policy: config.PromoteNever,
			seen:  temporalSeen{DutyCreated: boot, DeploymentCreated: boot},
			facts: temporalFacts{DutyFound: true, DutyCreated: boot, DutyActions: 40, DeploymentFound: true, DeploymentCreated: boot}},
		{name: "nothing seen yet, all there", policy: config.PromoteFirst, facts: held},
		{name: "nothing seen yet, duties gone", policy: config.PromoteFirst,
			facts:   temporalFacts{DeploymentFound: true, DeploymentCreated: boot, Current: "b1"},
			missing: []string{missingDuties}, promote: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := planRebuild(tc.facts, tc.seen, tc.policy)
			if !slices.Equal(p.Missing, tc.missing) {
				t.Errorf("missing %v; want %v", p.Missing, tc.missing)
			}
			if p.Promote != tc.promote {
				t.Errorf("promote %v; want %v", p.Promote, tc.promote)
			}
			if (p.Fix != "") != tc.fix {
				t.Errorf("fix %q; want one: %v", p.Fix, tc.fix)
			}
		})
	}
}
