package api

import (
	"strings"
	"testing"
	"time"

	"github.com/crewlet/crewlet"
)

// A seat's recorded health stands while the health duty runs; once no pass
// has checked it for three intervals (a minute at least) it is shown
// unknown, naming what it last was, so a duty that stopped with Temporal
// does not keep saying "ok".
func TestRecordedHealthGoesUnknownWhenNoPassChecksIt(t *testing.T) {
	now := time.Date(2026, 12, 5, 7, 0, 0, 0, time.UTC)
	since := now.Add(-time.Hour)
	for _, tc := range []struct {
		name     string
		interval time.Duration
		checked  time.Duration // before now
		want     crewlet.SeatHealth
	}{
		{"checked a pass ago", 30 * time.Second, 30 * time.Second, crewlet.HealthOK},
		{"three intervals ago", 30 * time.Second, 90 * time.Second, crewlet.HealthOK},
		{"past three intervals", 30 * time.Second, 91 * time.Second, crewlet.HealthUnknown},
		{"short interval: the floor holds", time.Second, 59 * time.Second, crewlet.HealthOK},
		{"short interval, past the floor", time.Second, 61 * time.Second, crewlet.HealthUnknown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			row := crewlet.SeatHealthRow{Seat: "cto", State: crewlet.HealthOK, Since: since, CheckedAt: now.Add(-tc.checked)}
			state, cause, at := shownHealth(row, tc.interval, now)
			if state != tc.want {
				t.Fatalf("health %s (%s); want %s", state, cause, tc.want)
			}
			if state == crewlet.HealthUnknown && (!strings.Contains(cause, "Last recorded: ok") || !at.Equal(row.CheckedAt)) {
				t.Fatalf("cause %q since %s; want the last recorded state named, since its last check %s", cause, at, row.CheckedAt)
			}
			if state == crewlet.HealthOK && !at.Equal(since) {
				t.Fatalf("since %s; want the recorded %s", at, since)
			}
		})
	}
}
