package config

import (
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/crewlet/crewlet"
)

// maxHealthNotify bounds the health webhooks.
const maxHealthNotify = 16

// check adds the problems of the health section.
func (h Health) check(add addFunc, checkDuration func(path string, val, lo, hi time.Duration)) {
	checkDuration("health.interval", h.Interval, time.Second, time.Hour)
	checkDuration("health.establishing_after", h.EstablishingAfter, time.Second, 24*time.Hour)
	if h.GoneAfter < 0 || h.GoneAfter > time.Hour {
		add("health.gone_after", "%s is out of range; must be between 0s and 1h", shortDuration(h.GoneAfter))
	}
	checkDuration("health.turn_overrun", h.TurnOverrun, time.Second, 24*time.Hour)
	checkDuration("health.oldest_unread", h.OldestUnread, time.Second, 720*time.Hour)
	checkDuration("health.dead_letter_window", h.DeadLetterWindow, time.Second, 720*time.Hour)
	for _, n := range []struct {
		path    string
		val, hi int
	}{
		{"health.backlog", h.Backlog, 10_000_000},
		{"health.failing_turns", h.FailingTurns, 100},
		{"health.dead_letters", h.DeadLetters, 100_000},
	} {
		if n.val < 1 || n.val > n.hi {
			add(n.path, "%d is out of range; must be between 1 and %d", n.val, n.hi)
		}
	}
	if len(h.Notify) > maxHealthNotify {
		add("health.notify", "%d webhooks; at most %d", len(h.Notify), maxHealthNotify)
	}
	states := make([]string, len(crewlet.HealthStates))
	for i, s := range crewlet.HealthStates {
		states[i] = string(s)
	}
	for i, n := range h.Notify {
		at := fmt.Sprintf("health.notify[%d]", i)
		u, err := url.Parse(n.URL)
		switch {
		case n.URL == "":
			add(at+".url", "required: an http or https URL")
		case err == nil && u.User != nil:
			// Not shown: it holds a password or a token.
			add(at+".url", "must not hold credentials; send them as a header with headers_from")
		case err != nil && strings.Contains(n.URL, "@"):
			add(at+".url", "invalid URL; want an http or https URL, without credentials")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "":
			add(at+".url", "invalid URL %q; want an http or https URL", n.URL)
		case u.Scheme == "http" && !LoopbackHost(u.Hostname()):
			add(at+".url", "%q is plain http to another machine: the notification and its headers would cross the network in clear text; use https (http is taken for a loopback address only)", n.URL)
		}
		for j, s := range n.States {
			if !slices.Contains(states, s) {
				add(fmt.Sprintf("%s.states[%d]", at, j), "unknown state %q; valid states: %s", s, strings.Join(states, ", "))
			}
		}
		for _, header := range sortedKeys(n.HeadersFrom) {
			hp := at + ".headers_from." + header
			if !headerNameRE.MatchString(header) {
				add(hp, "invalid header name %q; want letters, digits and '-'", header)
				continue
			}
			checkEnvFrom(add, hp, n.HeadersFrom[header])
		}
	}
}
