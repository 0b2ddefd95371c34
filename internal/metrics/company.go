package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/crewlet/crewlet"
)

// Company is the company's state now, as the gauges show it: what is
// stuck shows as a level, not only as the event that began it.
type Company struct {
	// SeatsByStatus counts the org's agent seats by live status; "absent"
	// counts seats whose workflow is not running.
	SeatsByStatus map[string]int
	// SeatsByHealth counts the org's agent seats by the health duty's last
	// word; "unknown" counts seats it has not classified yet.
	SeatsByHealth map[string]int
	// OpenTickets counts the tickets not yet ended, by phase.
	OpenTickets map[string]int
	// Quarantined and Cooling count the credentials that take no turn now.
	Quarantined, Cooling int
	// Mailboxes is each agent seat's backlog.
	Mailboxes map[string]crewlet.Backlog
}

// companyEvery bounds how often the company is read: scrapes from several
// Prometheus servers, or a fast scrape interval, cost one read a window.
const companyEvery = 15 * time.Second

// WatchCompany registers the gauges of the company's state, read by read
// when scraped and at most once every 15s. A read bounds its own work
// (visibility counts, a few grouped queries, one pipelined Redis round per
// 1,000 seats); one that fails is counted and logged, and that scrape shows
// no company gauges rather than stale ones. With seatLabels false, mailbox
// backlogs are summed (waiting) and maxed (lag) over the seats instead of
// labelled by seat, for an org too large for a series per seat.
func (m *Metrics) WatchCompany(read func(context.Context) (Company, error), seatLabels bool, log *slog.Logger) {
	if m == nil {
		return
	}
	c := &companyCollector{read: read, seatLabels: seatLabels, log: log,
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "crewlet_company_read_failures_total",
			Help: "Reads of the company's state for the gauges below that failed (Temporal visibility, Postgres or Redis unreachable); the log says which."}),
	}
	seat := []string{}
	if seatLabels {
		seat = []string{"seat"}
	}
	c.seats = prometheus.NewDesc("crewlet_seats",
		"Agent seats by live status (idle, running, establishing, paused, draining, moving, ...; absent: no workflow runs): seats stuck establishing have no node that takes them, absent ones were never started or were terminated.",
		[]string{"status"}, nil)
	c.health = prometheus.NewDesc("crewlet_seats_health",
		"Agent seats by health state, as the health duty last classified them (ok, waiting, paused, held, backlog, turn_overrunning, dead_letters_rising, failing, establishing_too_long, unplaceable, unproven_teardown, gone; unknown: not classified yet). docs/operations.md, \"Seat health\", says what to do about each.",
		[]string{"state"}, nil)
	c.tickets = prometheus.NewDesc("crewlet_tickets_open",
		"Tickets not yet ended, by phase (pending: the assignee has not answered; asking: the assignee waits on a question to the delegator): a pile that only grows is delegation that does not come back.",
		[]string{"phase"}, nil)
	c.quarantined = prometheus.NewDesc("crewlet_credentials_quarantined",
		"Credentials in quarantine now (the provider said a usage limit is reached): their profiles take no turn until it ends.", nil, nil)
	c.cooling = prometheus.NewDesc("crewlet_credentials_cooling",
		"Credentials cooling off now after repeated server errors.", nil, nil)
	c.waiting = prometheus.NewDesc("crewlet_mailbox_waiting",
		"Mailbox entries not yet answered (unread, or read by a turn not yet finished), by seat unless metrics.seat_labels is false: mail piling up behind a paused, held or failing seat.",
		seat, nil)
	c.lag = prometheus.NewDesc("crewlet_mailbox_lag_seconds",
		"Age of the oldest mailbox entry not yet answered, by seat unless metrics.seat_labels is false (then the largest): how long the longest-waiting sender has waited.",
		seat, nil)
	m.reg.MustRegister(c)
}

type companyCollector struct {
	read       func(context.Context) (Company, error)
	seatLabels bool
	log        *slog.Logger
	failures   prometheus.Counter

	seats, health, tickets, quarantined, cooling, waiting, lag *prometheus.Desc

	mu     sync.Mutex
	last   Company
	readAt time.Time
	ok     bool
}

func (c *companyCollector) Describe(ch chan<- *prometheus.Desc) {
	c.failures.Describe(ch)
	for _, d := range []*prometheus.Desc{c.seats, c.health, c.tickets, c.quarantined, c.cooling, c.waiting, c.lag} {
		ch <- d
	}
}

func (c *companyCollector) Collect(ch chan<- prometheus.Metric) {
	co, ok := c.company()
	c.failures.Collect(ch)
	if !ok {
		return
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for status, n := range co.SeatsByStatus {
		gauge(c.seats, float64(n), status)
	}
	for state, n := range co.SeatsByHealth {
		gauge(c.health, float64(n), state)
	}
	for phase, n := range co.OpenTickets {
		gauge(c.tickets, float64(n), phase)
	}
	gauge(c.quarantined, float64(co.Quarantined))
	gauge(c.cooling, float64(co.Cooling))
	lagOf := func(b crewlet.Backlog) float64 {
		if b.Oldest.IsZero() {
			return 0
		}
		return max(0, time.Since(b.Oldest).Seconds())
	}
	if c.seatLabels {
		for seat, b := range co.Mailboxes {
			gauge(c.waiting, float64(b.Waiting), seat)
			gauge(c.lag, lagOf(b), seat)
		}
		return
	}
	var waiting, lag float64
	for _, b := range co.Mailboxes {
		waiting += float64(b.Waiting)
		lag = max(lag, lagOf(b))
	}
	gauge(c.waiting, waiting)
	gauge(c.lag, lag)
}

// company is the last read if it is recent, else a new one.
func (c *companyCollector) company() (Company, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.readAt.IsZero() && time.Since(c.readAt) < companyEvery {
		return c.last, c.ok
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	co, err := c.read(ctx)
	c.readAt, c.last, c.ok = time.Now(), co, err == nil
	if err != nil {
		c.failures.Inc()
		c.log.Warn("company_gauges_unread", "error", err)
	}
	return c.last, c.ok
}
