package api

import (
	"errors"
	"net/http"
	"slices"
	"sort"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/prices"
	"github.com/crewlet/crewlet/internal/store"
)

// Costs is the answer of GET /costs: the company's spend from Since to
// Until (days on its clock, both included) by one key, and in all.
// PriceVersions are the price versions of the receipts in the range that
// turn retention still keeps (maintenance.turn_retention).
type Costs struct {
	By            string            `json:"by"`
	Since         string            `json:"since"`
	Until         string            `json:"until"`
	Timezone      string            `json:"timezone"`
	Rows          []crewlet.CostRow `json:"rows"`
	Total         crewlet.Cost      `json:"total"`
	PriceVersions []string          `json:"price_versions"`
	TableVersion  string            `json:"table_version"`
}

// maxCostDays is the longest range GET /costs sums: spend_daily keeps 400
// days.
const maxCostDays = 400

func (s *Server) getCosts(w http.ResponseWriter, r *http.Request) {
	org := s.Org.Now()
	loc := org.Location()
	q := r.URL.Query()
	by := q.Get("by")
	if by == "" {
		by = "seat"
	}
	keys := make([]string, 0, len(store.SpendKeys))
	for k := range store.SpendKeys {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if !slices.Contains(keys, by) {
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "by must be one of %v, got %q", keys, by))
		return
	}
	today := s.Views.Now().In(loc) // the clock the usage windows are read on
	since, errSince := dayParam(q.Get("since"), "since", loc, time.Date(today.Year(), today.Month(), 1, 0, 0, 0, 0, loc))
	until, errUntil := dayParam(q.Get("until"), "until", loc, time.Date(today.Year(), today.Month(), today.Day(), 0, 0, 0, 0, loc))
	if err := errors.Join(errSince, errUntil); err != nil {
		writeError(w, err)
		return
	}
	days := int(until.Sub(since).Hours()/24+0.5) + 1
	switch {
	case until.Before(since):
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "until (%s) is before since (%s); send since on or before until", until.Format(time.DateOnly), since.Format(time.DateOnly)))
		return
	case days > maxCostDays:
		writeError(w, crewlet.Errorf(crewlet.EINVALID, "%s to %s is %d days; send a range of at most %d days (the spend kept)", since.Format(time.DateOnly), until.Format(time.DateOnly), days, maxCostDays))
		return
	}
	rows, err := s.Store.Spend(r.Context(), by, since, until)
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if by == "day" {
		rows = everyDay(rows, since, days)
	}
	versions, err := s.Store.PriceVersions(r.Context(), since, until.AddDate(0, 0, 1))
	if err != nil {
		s.logError(w, r, err)
		return
	}
	if rows == nil {
		rows = []crewlet.CostRow{}
	}
	if versions == nil {
		versions = []string{}
	}
	out := Costs{By: by, Since: since.Format(time.DateOnly), Until: until.Format(time.DateOnly), Timezone: loc.String(),
		Rows: rows, PriceVersions: versions, TableVersion: prices.Version}
	for _, row := range rows {
		out.Total.Add(row.Cost)
	}
	out.Total.USD = prices.USD(out.Total.NanoUSD)
	writeJSON(w, http.StatusOK, out)
}

// dayParam is a query parameter holding a day (YYYY-MM-DD) as its start on
// the company's clock loc, or def when it is not set.
func dayParam(v, name string, loc *time.Location, def time.Time) (time.Time, error) {
	if v == "" {
		return def, nil
	}
	d, err := time.ParseInLocation(time.DateOnly, v, loc)
	if err != nil {
		return time.Time{}, crewlet.Errorf(crewlet.EINVALID, "%s must be a day as YYYY-MM-DD on the company's clock (%s), got %q", name, loc, v)
	}
	return d, nil
}

// everyDay gives each of the days from since a row, a day nothing was
// spent on at 0, so a chart of the days has no gaps.
func everyDay(rows []crewlet.CostRow, since time.Time, days int) []crewlet.CostRow {
	spent := make(map[string]crewlet.CostRow, len(rows))
	for _, row := range rows {
		spent[row.Key] = row
	}
	out := make([]crewlet.CostRow, days)
	for i := range out {
		day := since.AddDate(0, 0, i).Format(time.DateOnly)
		out[i] = spent[day]
		out[i].Key = day
	}
	return out
}
