// Package model holds crewlet's model providers.
package model

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
)

// Scripted answers from fixed rules: the first rule whose regexp matches the
// incoming text replies with its template; with no match it echoes the text
// under the seat's handle. It is deterministic, for local runs and tests.
type Scripted struct {
	rules []scriptedRule
	delay time.Duration
	probe *Probe
}

type scriptedRule struct {
	match *regexp.Regexp
	reply *template.Template
	fail  string
}

// ReplyData is what a scripted reply template can use.
type ReplyData struct {
	Text         string
	From         string
	Handle       string
	Role         string
	Conversation string
	Groups       []string
}

// NewScripted compiles a scripted profile. The config package validated it,
// so an error here means a caller skipped validation.
func NewScripted(p config.Profile, probe *Probe) (*Scripted, error) {
	s := &Scripted{delay: p.Delay, probe: probe}
	for i, r := range p.Rules {
		re, err := regexp.Compile(r.Match)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].match: %w", i, err)
		}
		tmpl, err := template.New("reply").Option("missingkey=error").Parse(r.Reply)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].reply: %w", i, err)
		}
		s.rules = append(s.rules, scriptedRule{match: re, reply: tmpl, fail: r.Fail})
	}
	return s, nil
}

// Complete answers p after the profile's delay.
func (s *Scripted) Complete(ctx context.Context, p crewlet.Prompt) (crewlet.Completion, error) {
	if s.probe != nil {
		s.probe.record(p.Seat, p.Trigger.EventID, "start")
		defer s.probe.record(p.Seat, p.Trigger.EventID, "end")
	}
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return crewlet.Completion{}, ctx.Err()
		case <-t.C:
		}
	}
	data := ReplyData{
		Text: p.Trigger.Body, From: p.Trigger.From, Handle: p.Seat, Role: p.Role,
		Conversation: p.Trigger.Conversation,
	}
	for _, r := range s.rules {
		groups := r.match.FindStringSubmatch(p.Trigger.Body)
		if groups == nil {
			continue
		}
		if r.fail != "" {
			return crewlet.Completion{}, fmt.Errorf("scripted failure: %s", r.fail)
		}
		data.Groups = groups
		var b strings.Builder
		if err := r.reply.Execute(&b, data); err != nil {
			return crewlet.Completion{}, crewlet.Errorf(crewlet.EINVALID, "scripted reply template for %q failed: %v", r.match, err)
		}
		return crewlet.Completion{Text: b.String()}, nil
	}
	return crewlet.Completion{Text: fmt.Sprintf("[%s] %s", p.Seat, p.Trigger.Body)}, nil
}

// New builds the model a profile names. probe may be nil.
func New(p config.Profile, probe *Probe) (crewlet.Model, error) {
	switch p.Provider {
	case "scripted":
		return NewScripted(p, probe)
	default:
		return nil, crewlet.Errorf(crewlet.EINVALID, "unsupported provider %q; supported providers: scripted", p.Provider)
	}
}

// Probe records when each scripted completion ran, on which node, as JSON
// lines appended to a file. Tests use it to prove that no seat ever ran two
// turns at once across nodes, without trusting logs. It is enabled by the
// CREWLET_SCRIPTED_PROBE environment variable and is off otherwise.
type Probe struct {
	mu   sync.Mutex
	file *os.File
	node string
}

// ProbeRecord is one line of the probe file: a completion started or ended.
// A start with no end is a completion its process died in.
type ProbeRecord struct {
	Seat    string    `json:"seat"`
	EventID string    `json:"event_id"`
	Node    string    `json:"node"`
	Phase   string    `json:"phase"`
	At      time.Time `json:"at"`
}

// OpenProbe opens the probe file named by CREWLET_SCRIPTED_PROBE for node, or
// returns nil when the variable is unset.
func OpenProbe(node string) (*Probe, error) {
	path := os.Getenv("CREWLET_SCRIPTED_PROBE")
	if path == "" {
		return nil, nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open scripted probe: %w", err)
	}
	return &Probe{file: f, node: node}, nil
}

func (p *Probe) record(seat, eventID, phase string) {
	line, err := json.Marshal(ProbeRecord{Seat: seat, EventID: eventID, Node: p.node, Phase: phase, At: time.Now()})
	if err != nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	_, _ = p.file.Write(append(line, '\n'))
}
