package config

import (
	"strings"
	"testing"
	"time"
)

const scheduleOrg = `
company: { name: acme, timezone: Europe/Berlin }
maintenance: { ledger_retention: 24h }
profiles: { p: { provider: scripted } }
roles: { eng: { charter: works as eng, profile: p }, lonely: { profile: p } }
seats:
  - { handle: cto, role: eng }
  - { handle: alice, kind: human }
  - { handle: bob, kind: human, role: lonely }
`

func TestSchedulesValid(t *testing.T) {
	c, err := Parse([]byte(scheduleOrg + `
schedules:
  - { name: standup, cron: "0 9 * * 1-5", to: cto, text: "Post the daily plan." }
  - { name: build, every: 1h, to: "role:eng", text: "Check the build.", jitter: 5m, overlap: buffer_one, catchup_window: 24h, timezone: UTC, paused: true }
  - { name: remind, cron: "@weekly", to: alice, text: "Read the weekly report." }
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if len(c.Schedules) != 3 {
		t.Fatalf("schedules = %+v, want 3", c.Schedules)
	}
	standup, build := c.Schedules[0], c.Schedules[1]
	if standup.Overlap != OverlapSkip || standup.CatchupWindow != DefaultCatchupWindow || c.ScheduleZone(standup) != "Europe/Berlin" {
		t.Errorf("standup defaults: overlap %q, catchup %s, zone %q; want skip, %s, the company's Europe/Berlin",
			standup.Overlap, standup.CatchupWindow, c.ScheduleZone(standup), DefaultCatchupWindow)
	}
	want := Schedule{Name: "build", Every: time.Hour, To: "role:eng", Text: "Check the build.", Jitter: 5 * time.Minute,
		Overlap: OverlapBufferOne, CatchupWindow: 24 * time.Hour, Timezone: "UTC", Paused: true}
	if build != want {
		t.Errorf("build = %+v\nwant %+v", build, want)
	}
	if s, ok := c.ScheduleNamed("remind"); !ok || s.To != "alice" {
		t.Errorf("ScheduleNamed(remind) = %+v, %v", s, ok)
	}
}

func TestScheduleProblems(t *testing.T) {
	c, err := Parse([]byte(scheduleOrg + `
schedules:
  - { name: a, to: cto, text: x }
  - { name: b, cron: "0 9 * * 1-5", every: 1h, to: cto, text: x }
  - { name: c, cron: "61 * * * *", to: cto, text: x }
  - { name: d, cron: "CRON_TZ=UTC 0 9 * * *", to: cto, text: x }
  - { name: e, every: 500ms, to: cto, text: x }
  - { name: f, every: 1h, timezone: Mars/Olympus, to: cto, text: x }
  - { name: g, every: 1h, to: ctoo, text: x }
  - { name: h, every: 1h, to: "role:ghost", text: x }
  - { name: i, every: 1h, to: "role:lonely", text: x }
  - { name: j, every: 1h, to: "spawn:eng", text: x }
  - { name: k, every: 1h, to: cto, text: "  " }
  - { name: l, every: 1m, to: cto, text: x, jitter: 1m }
  - { name: m, every: 1h, to: cto, text: x, overlap: queue }
  - { name: n, every: 1h, to: cto, text: x, catchup_window: 48h }
  - { name: o, every: 1h, to: cto, text: x, catchup_window: 1s }
  - { name: a, every: 1h, to: cto, text: x }
  - { name: Bad, every: 1h, to: cto, text: x, colour: red }
  - { every: 1h, text: x }
  - { name: p, every: 1h, to: cto, text: x, timezone: Local }
`))
	if err == nil {
		t.Fatalf("Parse = %+v, nil; want every problem", c)
	}
	want := []string{
		`schedules[0]: needs cron ("0 9 * * 1-5") or every ("1h"); set exactly one`,
		`schedules[1]: has both cron and every; set exactly one`,
		`schedules[2].cron: invalid cron "61 * * * *"`,
		`schedules[3].cron: "CRON_TZ=UTC 0 9 * * *" names a zone; put it in timezone`,
		`schedules[4].every: 500ms is out of range; must be between 1s and 8760h`,
		`schedules[5].timezone: unknown time zone "Mars/Olympus"`,
		`schedules[6].to: unknown seat "ctoo"; name a seat of the org or role:NAME; did you mean "cto"?`,
		`schedules[7].to: unknown role "ghost"; known roles: eng, lonely`,
		`schedules[8].to: role "lonely" has no agent seat to route a fire to`,
		`schedules[9].to: "spawn:eng": role "eng" has no pool to spawn seats from; add pools: [{role: eng, max_seats: N}], or name a seat or role:eng`,
		`schedules[10].text: required; the message each fire sends`,
		`schedules[11].jitter: 1m is not shorter than every (1m)`,
		`schedules[12].overlap: unknown policy "queue"; must be one of: skip, buffer_one, allow`,
		`schedules[13].catchup_window: 48h is longer than maintenance.ledger_retention (24h); a fire caught up after its ledger row is gone could be answered twice`,
		`schedules[14].catchup_window: 1s is out of range; must be at least 10s`,
		`schedules[15].name: duplicate name "a" (also schedules[0])`,
		`schedules[16].name: invalid name "Bad"`,
		`schedules[16].colour: unknown key`,
		`schedules[17].name: required`,
		`schedules[17].to: required; a seat handle or role:NAME`,
		`schedules[18].timezone: "Local" differs from host to host`,
	}
	msg := err.Error()
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error lacks %q", w)
		}
	}
	if t.Failed() {
		t.Logf("got:\n%s", msg)
	}
}

// A human seat is a valid target: the fire is a reminder in the person's
// inbox.
func TestScheduleToHumanSeat(t *testing.T) {
	if _, err := Parse([]byte(scheduleOrg + `
schedules: [ { name: remind, every: 24h, to: bob, text: "Timesheets." } ]
`)); err != nil {
		t.Fatalf("Parse: %v", err)
	}
}

// "schedules" is reserved as a handle: a fire's mail is sent under it.
func TestScheduleSenderReserved(t *testing.T) {
	_, err := Parse([]byte(`
company: { name: acme }
seats: [ { handle: schedules, kind: human } ]
`))
	if err == nil || !strings.Contains(err.Error(), `seats[0].handle: "schedules" is reserved`) {
		t.Fatalf("Parse = %v; want the handle refused as reserved", err)
	}
}
