package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// The company's gauges show what the read returned, labelled by seat or,
// with seat labels off, summed and maxed over the seats; reads are shared
// by scrapes within the window; a failed read is counted and shows no stale
// gauge.
func TestCompanyGauges(t *testing.T) {
	t.Parallel()
	co := Company{
		SeatsByStatus: map[string]int{"idle": 3, "establishing": 1, "absent": 0},
		OpenTickets:   map[string]int{"pending": 2, "asking": 0},
		Quarantined:   1,
		Mailboxes: map[string]crewlet.Backlog{
			"cto": {Waiting: 4, Oldest: time.Now().Add(-90 * time.Second)},
			"cfo": {Waiting: 1, Oldest: time.Now().Add(-30 * time.Second)},
			"ceo": {},
		},
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		seatLabels bool
		want       []string
	}{
		{true, []string{`crewlet_mailbox_waiting{seat="cto"} 4`, `crewlet_mailbox_waiting{seat="ceo"} 0`, `crewlet_mailbox_lag_seconds{seat="cto"} 90.`, `crewlet_mailbox_lag_seconds{seat="ceo"} 0`}},
		{false, []string{"crewlet_mailbox_waiting 5", "crewlet_mailbox_lag_seconds 90."}},
	} {
		reads := 0
		var fail error
		m := New()
		m.WatchCompany(func(context.Context) (Company, error) {
			reads++
			return co, fail
		}, tc.seatLabels, log)
		text := scrape(t, m)
		for _, want := range append(tc.want, `crewlet_seats{status="idle"} 3`, `crewlet_seats{status="absent"} 0`,
			`crewlet_tickets_open{phase="pending"} 2`, `crewlet_tickets_open{phase="asking"} 0`,
			"crewlet_credentials_quarantined 1", "crewlet_credentials_cooling 0", "crewlet_company_read_failures_total 0") {
			if !strings.Contains(text, want) {
				t.Errorf("seat labels %v: scrape lacks %q", tc.seatLabels, want)
			}
		}
		if !tc.seatLabels && strings.Contains(text, `seat="`) {
			t.Errorf("seat labels off: a series is labelled by seat")
		}
		scrape(t, m)
		if reads != 1 {
			t.Fatalf("%d reads for two scrapes in the window; want 1", reads)
		}
	}

	m := New()
	m.WatchCompany(func(context.Context) (Company, error) { return Company{}, errors.New("visibility unreachable") }, true, log)
	text := scrape(t, m)
	if !strings.Contains(text, "crewlet_company_read_failures_total 1") || strings.Contains(text, "crewlet_seats{") {
		t.Fatalf("after a failed read the scrape has:\n%s\nwant the failure counted and no company gauge", text)
	}
}
