// Package prices says what a model call costs in money: the embedded
// snapshot of the public genai-prices table (snapshot/README.md), and the
// org file's own prices, which override or add a model.
//
// Amounts are whole nano-dollars (1e-9 USD) so that sums are exact: a price
// of $0.135 per million tokens is 135 nano-dollars a token.
package prices

import (
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"regexp"
	"strings"
	"sync"
	"time"
)

// Version is the embedded snapshot's price version: its commit and date.
const Version = "genai-prices@47df840a/2026-08-21"

// Source says where the embedded snapshot comes from and its licence.
const Source = "pydantic/genai-prices prices/data_slim.json at 47df840a (2026-08-21), MIT licence"

//go:embed snapshot/genai-prices-data_slim.json
var snapshot []byte

// NanoPerUSD is the nano-dollars in a dollar.
const NanoPerUSD = 1_000_000_000

// Usage is the tokens of one model call by kind. Input counts every prompt
// token, cached ones included; Cached is the part read from the provider's
// prompt cache, charged at the cache-read price.
type Usage struct {
	Input  int64 `json:"input_tokens"`
	Output int64 `json:"output_tokens"`
	Cached int64 `json:"cached_tokens"`
}

// Rates are dollars per million tokens, in nano-dollars, for one call: a
// tiered price already resolved to the call's tier.
type Rates struct {
	Input     int64
	Output    int64
	CacheRead int64
	// HasCacheRead is false when the table names no cache-read price: cached
	// tokens are then charged at the input price.
	HasCacheRead bool
}

// MarshalJSON writes the rates as the table does: dollars per million
// tokens, cache_read_mtok only when there is one.
func (r Rates) MarshalJSON() ([]byte, error) {
	out := struct {
		Input     float64  `json:"input_mtok"`
		Output    float64  `json:"output_mtok"`
		CacheRead *float64 `json:"cache_read_mtok,omitempty"`
	}{Input: MTok(r.Input), Output: MTok(r.Output)}
	if r.HasCacheRead {
		c := MTok(r.CacheRead)
		out.CacheRead = &c
	}
	return json.Marshal(out)
}

// Quote is the price of one call, or why there is none.
type Quote struct {
	// Model is the model asked about; Matched is the table's id (or the org
	// file's model) it was priced as, and Provider the table's provider ("org"
	// for the org file's own price).
	Model    string `json:"model"`
	Matched  string `json:"matched,omitempty"`
	Provider string `json:"provider,omitempty"`
	// Priced is false when no price was found: the amount is then 0 and
	// the usage is counted as unpriced, never as free.
	Priced  bool   `json:"priced"`
	Version string `json:"price_version,omitempty"`
	Rates   Rates  `json:"rates"`
	// NanoUSD is the amount in nano-dollars, USD the same in dollars.
	NanoUSD int64   `json:"nano_usd"`
	USD     float64 `json:"usd"`
}

// Override is one model's price in the org file, in dollars per million
// tokens; it replaces the table's price of that exact model name.
type Override struct {
	Model         string
	InputMTok     float64
	OutputMTok    float64
	CacheReadMTok *float64
}

// Table is the embedded snapshot with the org file's overrides.
type Table struct {
	providers []provider
	overrides map[string]override
}

type override struct {
	rates   Rates
	version string
}

type provider struct {
	ID         string     `json:"id"`
	APIPattern string     `json:"api_pattern"`
	ModelMatch *matchRule `json:"model_match"`
	Models     []model    `json:"models"`
	api        *regexp.Regexp
}

type model struct {
	ID     string          `json:"id"`
	Match  matchRule       `json:"match"`
	Prices json.RawMessage `json:"prices"`
	prices []conditional
}

// conditional is a set of prices and when it applies; the last one whose
// constraint holds wins, so the first (unconstrained) is the default.
type conditional struct {
	Constraint *struct {
		StartDate string `json:"start_date"`
		StartTime string `json:"start_time"`
		EndTime   string `json:"end_time"`
	} `json:"constraint"`
	Prices map[string]json.RawMessage `json:"prices"`
}

type matchRule struct {
	Equals     *string     `json:"equals"`
	StartsWith *string     `json:"starts_with"`
	EndsWith   *string     `json:"ends_with"`
	Contains   *string     `json:"contains"`
	Regex      *string     `json:"regex"`
	Or         []matchRule `json:"or"`
	And        []matchRule `json:"and"`
	re         *regexp.Regexp
}

// base is the embedded snapshot, read once: a Table shares it.
var base = sync.OnceValues(func() ([]provider, error) {
	var providers []provider
	if err := json.Unmarshal(snapshot, &providers); err != nil {
		return nil, fmt.Errorf("read the embedded price table: %w", err)
	}
	for i := range providers {
		p := &providers[i]
		var err error
		if p.api, err = regexp.Compile(p.APIPattern); err != nil {
			return nil, fmt.Errorf("price table provider %s: api_pattern: %w", p.ID, err)
		}
		if p.ModelMatch != nil {
			if err := p.ModelMatch.compile(); err != nil {
				return nil, fmt.Errorf("price table provider %s: %w", p.ID, err)
			}
		}
		for j := range p.Models {
			m := &p.Models[j]
			if err := m.Match.compile(); err != nil {
				return nil, fmt.Errorf("price table model %s/%s: %w", p.ID, m.ID, err)
			}
			if err := m.readPrices(); err != nil {
				return nil, fmt.Errorf("price table model %s/%s: %w", p.ID, m.ID, err)
			}
		}
	}
	return providers, nil
})

// New is the embedded snapshot with the org file's prices: cheap after the
// first, which reads the snapshot.
func New(overrides []Override) (*Table, error) {
	providers, err := base()
	if err != nil {
		return nil, err
	}
	t := &Table{providers: providers, overrides: map[string]override{}}
	for _, o := range overrides {
		r := Rates{Input: nanoPerMTok(o.InputMTok), Output: nanoPerMTok(o.OutputMTok)}
		if o.CacheReadMTok != nil {
			r.CacheRead, r.HasCacheRead = nanoPerMTok(*o.CacheReadMTok), true
		}
		// The version names the entry's exact rates, so a changed price in
		// the org file is a new version on the receipts charged at it.
		sum := sha256.Sum256(fmt.Appendf(nil, "%s|%d|%d|%d|%t", o.Model, r.Input, r.Output, r.CacheRead, r.HasCacheRead))
		t.overrides[o.Model] = override{rates: r, version: "org:" + hex.EncodeToString(sum[:4])}
	}
	return t, nil
}

// nanoPerMTok is dollars per million tokens in nano-dollars per million
// tokens, rounded to the nearest: the org file's prices come as floats.
func nanoPerMTok(usd float64) int64 { return int64(math.Round(usd * NanoPerUSD)) }

func (m *model) readPrices() error {
	if len(m.Prices) > 0 && m.Prices[0] == '[' {
		return json.Unmarshal(m.Prices, &m.prices)
	}
	var one map[string]json.RawMessage
	if err := json.Unmarshal(m.Prices, &one); err != nil {
		return err
	}
	m.prices = []conditional{{Prices: one}}
	return nil
}

func (r *matchRule) compile() error {
	if r.Regex != nil {
		re, err := regexp.Compile(*r.Regex)
		if err != nil {
			return fmt.Errorf("match regex %q: %w", *r.Regex, err)
		}
		r.re = re
	}
	for i := range r.Or {
		if err := r.Or[i].compile(); err != nil {
			return err
		}
	}
	for i := range r.And {
		if err := r.And[i].compile(); err != nil {
			return err
		}
	}
	return nil
}

func (r *matchRule) matches(s string) bool {
	switch {
	case r.Equals != nil:
		return s == *r.Equals
	case r.StartsWith != nil:
		return strings.HasPrefix(s, *r.StartsWith)
	case r.EndsWith != nil:
		return strings.HasSuffix(s, *r.EndsWith)
	case r.Contains != nil:
		return strings.Contains(s, *r.Contains)
	case r.re != nil:
		return r.re.MatchString(s)
	case r.Or != nil:
		for i := range r.Or {
			if r.Or[i].matches(s) {
				return true
			}
		}
		return false
	case r.And != nil:
		for i := range r.And {
			if !r.And[i].matches(s) {
				return false
			}
		}
		return true
	}
	return false
}

// Quote prices one call of model, made at at through baseURL (the profile's
// endpoint, which picks the provider whose prices apply: the same model
// costs differently on Bedrock or OpenRouter). The org file's price of the
// exact model name comes first; then the provider whose API the endpoint
// is; then the provider the model's name says (claude: Anthropic); then any
// provider that lists it.
func (t *Table) Quote(model, baseURL string, at time.Time, u Usage) Quote {
	q := Quote{Model: model}
	if model == "" {
		return q
	}
	if o, ok := t.overrides[model]; ok {
		q.Matched, q.Provider, q.Priced, q.Version, q.Rates = model, "org", true, o.version, o.rates
		q.NanoUSD = q.Rates.charge(u)
		q.USD = USD(q.NanoUSD)
		return q
	}
	found := func(take func(p *provider) bool) bool {
		for i := range t.providers {
			p := &t.providers[i]
			if !take(p) {
				continue
			}
			for j := range p.Models {
				m := &p.Models[j]
				if !m.Match.matches(model) {
					continue
				}
				rates, ok := m.rates(at, u.Input)
				if !ok {
					continue
				}
				q.Matched, q.Provider, q.Priced, q.Version, q.Rates = m.ID, p.ID, true, Version, rates
				q.NanoUSD = rates.charge(u)
				q.USD = USD(q.NanoUSD)
				return true
			}
		}
		return false
	}
	if baseURL != "" && found(func(p *provider) bool { return p.api.MatchString(baseURL) }) {
		return q
	}
	if found(func(p *provider) bool { return p.ModelMatch != nil && p.ModelMatch.matches(model) }) {
		return q
	}
	found(func(*provider) bool { return true })
	return q
}

// rates resolves the model's prices at a time and for a call of input
// prompt tokens: the last conditional price whose constraint holds, and in
// a tiered price the highest tier the prompt reaches (the whole call is
// charged at that tier, as the providers bill it).
func (m *model) rates(at time.Time, input int64) (Rates, bool) {
	var chosen map[string]json.RawMessage
	for _, c := range m.prices {
		if c.holds(at) {
			chosen = c.Prices
		}
	}
	in, okIn := tierPrice(chosen["input_mtok"], input)
	out, okOut := tierPrice(chosen["output_mtok"], input)
	if !okIn && !okOut {
		return Rates{}, false
	}
	r := Rates{Input: in, Output: out}
	r.CacheRead, r.HasCacheRead = tierPrice(chosen["cache_read_mtok"], input)
	return r, true
}

func (c conditional) holds(at time.Time) bool {
	if c.Constraint == nil {
		return true
	}
	at = at.UTC()
	if d := c.Constraint.StartDate; d != "" {
		start, err := time.Parse(time.DateOnly, d)
		if err != nil || at.Before(start) {
			return false
		}
	}
	if c.Constraint.StartTime != "" && c.Constraint.EndTime != "" {
		start, err1 := time.Parse("15:04:05Z", c.Constraint.StartTime)
		end, err2 := time.Parse("15:04:05Z", c.Constraint.EndTime)
		if err1 != nil || err2 != nil {
			return false
		}
		of := time.Date(0, 1, 1, at.Hour(), at.Minute(), at.Second(), 0, time.UTC)
		if start.Before(end) {
			return !of.Before(start) && of.Before(end)
		}
		return !of.Before(start) || of.Before(end)
	}
	return true
}

// tierPrice reads one price: a plain number, or {base, tiers:[{start,
// price}]}.
func tierPrice(raw json.RawMessage, input int64) (int64, bool) {
	if len(raw) == 0 {
		return 0, false
	}
	if raw[0] != '{' {
		n, err := nanoOf(json.Number(raw))
		return n, err == nil
	}
	var tiered struct {
		Base  json.Number `json:"base"`
		Tiers []struct {
			Start int64       `json:"start"`
			Price json.Number `json:"price"`
		} `json:"tiers"`
	}
	if err := json.Unmarshal(raw, &tiered); err != nil {
		return 0, false
	}
	price := tiered.Base
	for _, tier := range tiered.Tiers {
		if input >= tier.Start {
			price = tier.Price
		}
	}
	n, err := nanoOf(price)
	return n, err == nil
}

// nanoOf is a decimal price in dollars as exact nano-dollars.
func nanoOf(n json.Number) (int64, error) {
	r, ok := new(big.Rat).SetString(string(n))
	if !ok {
		return 0, fmt.Errorf("price %q is not a number", n)
	}
	r.Mul(r, big.NewRat(NanoPerUSD, 1))
	f, _ := r.Float64()
	return int64(math.Round(f)), nil
}

// charge is a call's amount: uncached prompt tokens at the input price,
// cached ones at the cache-read price (the input price when there is none)
// and answer tokens at the output price, rounded to the nearest
// nano-dollar once.
func (r Rates) charge(u Usage) int64 {
	cached := min(max(u.Cached, 0), max(u.Input, 0))
	cacheRate := r.Input
	if r.HasCacheRead {
		cacheRate = r.CacheRead
	}
	total := new(big.Int).Mul(big.NewInt(max(u.Input, 0)-cached), big.NewInt(r.Input))
	total.Add(total, new(big.Int).Mul(big.NewInt(cached), big.NewInt(cacheRate)))
	total.Add(total, new(big.Int).Mul(big.NewInt(max(u.Output, 0)), big.NewInt(r.Output)))
	// Rates are per million tokens: round half up on the division.
	total.Add(total, big.NewInt(500_000))
	return total.Quo(total, big.NewInt(1_000_000)).Int64()
}

// USD is an amount in nano-dollars as dollars, for reading.
func USD(nano int64) float64 { return float64(nano) / NanoPerUSD }

// MTok is a rate in nano-dollars per million tokens as dollars per million
// tokens, for reading.
func MTok(nano int64) float64 { return float64(nano) / NanoPerUSD }
