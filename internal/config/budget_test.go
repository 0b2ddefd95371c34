package config

import (
	"reflect"
	"testing"

	"github.com/crewlet/crewlet"
)

// Money caps reach the domain in nano-dollars; on_limit: ask carries whom
// to ask and at which share, 0.8 unless set.
func TestMoneyBudgetCaps(t *testing.T) {
	t.Parallel()
	c, err := Parse([]byte(`company: { name: acme, budget: { usd_per_month: 1000, on_limit: ask, ask: { to: olga } } }
seats: [ { handle: olga, kind: human }, { handle: eng-1, role: r } ]
profiles: { p: { provider: scripted } }
roles: { r: { charter: works as r, profile: p, budget: { tokens_per_day: 5, usd_per_day: 2.5, usd_per_week: 0.25, on_limit: ask, ask: { to: olga, at: 0.5 } } } }`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		got, want crewlet.BudgetCaps
	}{
		{"roles.r.budget", c.Roles["r"].Budget.Caps(), crewlet.BudgetCaps{TokensPerDay: 5, NanoUSDPerDay: 2_500_000_000, NanoUSDPerWeek: 250_000_000,
			Ask: &crewlet.BudgetAskPolicy{To: "olga", At: 0.5}}},
		{"company.budget", c.Company.Budget.Caps(), crewlet.BudgetCaps{NanoUSDPerMonth: 1000 * 1_000_000_000,
			Ask: &crewlet.BudgetAskPolicy{To: "olga", At: DefaultAskAt}}},
	}
	for _, tt := range tests {
		if !reflect.DeepEqual(tt.got, tt.want) {
			t.Errorf("%s caps = %+v (ask %+v); want %+v (ask %+v)", tt.name, tt.got, tt.got.Ask, tt.want, tt.want.Ask)
		}
	}
}
