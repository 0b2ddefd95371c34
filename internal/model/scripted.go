// Package model holds crewlet's model providers.
package model

import (
	"context"
	"fmt"
	"regexp"
	"strings"
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
}

type scriptedRule struct {
	match *regexp.Regexp
	reply *template.Template
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
func NewScripted(p config.Profile) (*Scripted, error) {
	s := &Scripted{delay: p.Delay}
	for i, r := range p.Rules {
		re, err := regexp.Compile(r.Match)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].match: %w", i, err)
		}
		tmpl, err := template.New("reply").Option("missingkey=error").Parse(r.Reply)
		if err != nil {
			return nil, fmt.Errorf("rules[%d].reply: %w", i, err)
		}
		s.rules = append(s.rules, scriptedRule{match: re, reply: tmpl})
	}
	return s, nil
}

// Complete answers p after the profile's delay.
func (s *Scripted) Complete(ctx context.Context, p crewlet.Prompt) (crewlet.Completion, error) {
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
		data.Groups = groups
		var b strings.Builder
		if err := r.reply.Execute(&b, data); err != nil {
			return crewlet.Completion{}, crewlet.Errorf(crewlet.EINVALID, "scripted reply template for %q failed: %v", r.match, err)
		}
		return crewlet.Completion{Text: b.String()}, nil
	}
	return crewlet.Completion{Text: fmt.Sprintf("[%s] %s", p.Seat, p.Trigger.Body)}, nil
}

// New builds the model a profile names.
func New(p config.Profile) (crewlet.Model, error) {
	switch p.Provider {
	case "scripted":
		return NewScripted(p)
	default:
		return nil, crewlet.Errorf(crewlet.EINVALID, "unsupported provider %q; supported providers: scripted", p.Provider)
	}
}
