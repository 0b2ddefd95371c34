package api

import (
	"net/http"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/prices"
)

// PriceQuote is the answer of GET /prices: what one call of a model would
// cost at the prices a receipt written now is charged at.
type PriceQuote struct {
	// Profile is the profile asked about, if any: its model, priced at the
	// provider its base URL is.
	Profile string `json:"profile,omitempty"`
	// Tokens is the call quoted.
	Tokens prices.Usage `json:"tokens"`
	prices.Quote
	// TableVersion and Source are the embedded table's.
	TableVersion string `json:"table_version"`
	Source       string `json:"source"`
}

// maxQuotedTokens bounds a quoted call: far above any model's context.
const maxQuotedTokens = 1_000_000_000

func (s *Server) getPrice(w http.ResponseWriter, r *http.Request) {
	org := s.Org.Now()
	q := r.URL.Query()
	model, profileName := q.Get("model"), q.Get("profile")
	baseURL := ""
	switch {
	case (model == "") == (profileName == ""):
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "name a model (?model=gpt-4o-mini) or a profile of the org (?profile=NAME), one of the two"))
		return
	case profileName != "":
		p, ok := org.Profiles[profileName]
		if !ok {
			writeError(w, crewlet.Errorf(crewlet.ENOTFOUND, "no profile %q in the org; GET /profiles lists them", profileName))
			return
		}
		model, baseURL = p.PricedModel(""), p.BaseURL
	}
	if err := crewlet.CheckText("model", model, crewlet.MaxIDBytes); err != nil {
		writeError(w, err)
		return
	}
	var u prices.Usage
	for _, p := range []struct {
		name string
		to   *int64
		def  int64
	}{{"input_tokens", &u.Input, 1000}, {"output_tokens", &u.Output, 1000}, {"cached_tokens", &u.Cached, 0}} {
		n, err := intParam(r, p.name, "a count of tokens", p.def)
		if err == nil && n > maxQuotedTokens {
			err = crewlet.Errorf(crewlet.EINVALID, "%s must be at most %d, got %d", p.name, maxQuotedTokens, n)
		}
		if err != nil {
			writeError(w, err)
			return
		}
		*p.to = n
	}
	if u.Cached > u.Input {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "cached_tokens (%d) are part of input_tokens (%d) and cannot exceed them", u.Cached, u.Input))
		return
	}
	table, err := org.PriceTable()
	if err != nil {
		s.logError(w, r, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the price table cannot be read; see the server log"))
		return
	}
	writeJSON(w, http.StatusOK, PriceQuote{Profile: profileName, Tokens: u, Quote: table.Quote(model, baseURL, time.Now(), u),
		TableVersion: prices.Version, Source: prices.Source})
}
