package api_test

import (
	"testing"

	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/config"
)

// Who reads the words of a seat's live stream: every company-wide principal
// with the read right, and the anonymous operator of a tokenless org; a
// member its own seat's only; a principal with no known role none.
func TestMayReadTranscript(t *testing.T) {
	for _, c := range []struct {
		p    api.Principal
		want bool
	}{
		{api.Principal{Name: "v", Role: config.RoleViewer}, true},
		{api.Principal{Name: "o", Role: config.RoleOperator}, true},
		{api.Principal{Name: "a", Role: config.RoleAdmin}, true},
		{api.Principal{Name: "anon", Anonymous: true}, true},
		{api.Principal{Name: "x", Role: "stranger"}, false},
		{api.Principal{Name: "m", Role: config.RoleMember, Seat: "s01"}, true},
		{api.Principal{Name: "m", Role: config.RoleMember, Seat: "s02"}, false},
	} {
		if got := api.MayReadTranscript(c.p, "s01"); got != c.want {
			t.Errorf("%+v may read the transcript: %v; want %v", c.p, got, c.want)
		}
	}
}
