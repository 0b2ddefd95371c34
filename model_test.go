package crewlet

import "testing"

// Down tells a provider that is down (no answer, 502, 503, 504, 529) from
// a server error that may be the request's own doing, and from every other
// kind.
func TestProviderErrorDown(t *testing.T) {
	t.Parallel()
	cases := []struct {
		kind   string
		status int
		want   bool
	}{
		{ProviderServerError, 0, true},
		{ProviderServerError, 502, true},
		{ProviderServerError, 503, true},
		{ProviderServerError, 504, true},
		{ProviderServerError, 529, true},
		{ProviderServerError, 500, false},
		{ProviderServerError, 408, false},
		{ProviderServerError, 200, false},
		{ProviderRateLimited, 0, false},
		{ProviderExhausted, 503, false},
	}
	for _, c := range cases {
		if got := (&ProviderError{Kind: c.kind, Status: c.status}).Down(); got != c.want {
			t.Errorf("ProviderError{Kind: %s, Status: %d}.Down() = %v; want %v", c.kind, c.status, got, c.want)
		}
	}
}
