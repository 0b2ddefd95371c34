package config

import (
	"fmt"
	"net/url"
	"strings"
)

// A2A configures crewlet's A2A server
// (docs/operations.md, "Talk to crewlet from other agents").
type A2A struct {
	Push A2APush `mapstructure:"push"`
}

// A2APush configures the webhooks of A2A push notifications. Every key is
// hot: a webhook URL is checked when it is set and at each delivery.
type A2APush struct {
	// Allow lists URL prefixes ("http://127.0.0.1:9000/hooks/") a webhook
	// may start with to be posted to although its host is a loopback,
	// private, link-local or unspecified address, which is refused
	// otherwise: a client's webhook must not reach what only crewlet's
	// own network reaches.
	Allow []string `mapstructure:"allow"`
}

// check adds the problems of the a2a section.
func (a A2A) check(add addFunc) {
	first := map[string]int{}
	for i, entry := range a.Push.Allow {
		at := fmt.Sprintf("a2a.push.allow[%d]", i)
		u, err := url.Parse(entry)
		switch {
		case strings.TrimSpace(entry) == "":
			add(at, "empty; write a URL prefix a webhook may start with, e.g. %q", "http://127.0.0.1:9000/hooks/")
			continue
		case err == nil && u.User != nil:
			add(at, "must not hold credentials; a webhook's credentials are its config's, not the allow list's")
		case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "":
			add(at, "%q is not a URL prefix; write an http or https URL with a host and, if you like, a path (no query or fragment), e.g. %q", entry, "http://127.0.0.1:9000/hooks/")
		}
		if j, dup := first[entry]; dup {
			add(at, "duplicate entry %q (also a2a.push.allow[%d])", entry, j)
		} else {
			first[entry] = i
		}
	}
}
