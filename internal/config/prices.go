package config

import (
	"fmt"
	"math"

	"github.com/crewlet/crewlet/internal/prices"
)

// Price is one model's price in the org file, dollars per million tokens
// (the embedded table's field names): it overrides the table's price of
// that exact model name, or adds a model the table lacks (a negotiated
// rate, a local model at 0).
type Price struct {
	Model      string  `mapstructure:"model"`
	InputMTok  float64 `mapstructure:"input_mtok"`
	OutputMTok float64 `mapstructure:"output_mtok"`
	// CacheReadMTok is the price of prompt tokens read from the provider's
	// cache; nil charges them at InputMTok.
	CacheReadMTok *float64 `mapstructure:"cache_read_mtok"`
}

// maxPriceMTok bounds a price: far above any model's, and low enough that a
// month of a busy company's tokens cannot overflow an amount.
const maxPriceMTok = 10_000

// PriceTable is the embedded price table with the org file's prices.
func (c *Config) PriceTable() (*prices.Table, error) {
	overrides := make([]prices.Override, 0, len(c.Prices))
	for _, p := range c.Prices {
		overrides = append(overrides, prices.Override{Model: p.Model, InputMTok: p.InputMTok, OutputMTok: p.OutputMTok, CacheReadMTok: p.CacheReadMTok})
	}
	return prices.New(overrides)
}

// PricedModel is the model a profile's calls are priced as: the model the
// provider said answered when it said one, else the profile's model.
func (p Profile) PricedModel(answered string) string {
	if answered != "" {
		return answered
	}
	return p.Model
}

// checkPrices checks prices: a model named once, and prices that are
// numbers from 0 to maxPriceMTok.
func checkPrices(add addFunc, c *Config) {
	first := map[string]int{}
	for i, p := range c.Prices {
		base := fmt.Sprintf("prices[%d]", i)
		if p.Model == "" {
			add(base+".model", "is empty; name the model as the profile's model (or the provider's answer) names it")
		} else if j, dup := first[p.Model]; dup {
			add(base+".model", "%q is priced twice (prices[%d] too); keep one", p.Model, j)
		} else {
			first[p.Model] = i
		}
		check := func(key string, v float64) {
			if math.IsNaN(v) || v < 0 || v > maxPriceMTok {
				add(base+"."+key, "is %v; a price is dollars per million tokens, from 0 to %d", v, maxPriceMTok)
			}
		}
		check("input_mtok", p.InputMTok)
		check("output_mtok", p.OutputMTok)
		if p.CacheReadMTok != nil {
			check("cache_read_mtok", *p.CacheReadMTok)
		}
	}
}
