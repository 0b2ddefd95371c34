// Package evals holds eval datasets and the checks that score a replayed
// turn (docs/architecture.md, "Replay"): a dataset freezes recorded turns,
// an eval run replays each with one change (workflows.EvalRun) and scores
// each replay with the run's checks.
package evals

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/model"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// Check kinds.
const (
	// Contains passes when the replayed answer contains Text.
	Contains = "contains"
	// Regex passes when the replayed answer matches Pattern.
	Regex = "regex"
	// JSONSchema passes when the replayed answer parses as JSON and
	// validates against Schema.
	JSONSchema = "json_schema"
	// SameTools passes when the replay asked for the same tool calls, in
	// the same order, as the recorded turn: by tool name and argument hash.
	SameTools = "same_tools"
	// Judge passes when Profile, shown the replayed answer and Rubric,
	// answers PASS.
	Judge = "judge"
)

// Kinds are the check kinds, in the order the docs list them.
var Kinds = []string{Contains, Regex, JSONSchema, SameTools, Judge}

// MaxChecks is the most checks one run takes.
const MaxChecks = 20

// Check is one way to score a replay. A run's checks all pass for its turn
// to pass.
type Check struct {
	Kind string `json:"kind"`
	// Name tells the check apart in a report; the kind when empty.
	Name    string          `json:"name,omitempty"`
	Text    string          `json:"text,omitempty"`
	Pattern string          `json:"pattern,omitempty"`
	Schema  json.RawMessage `json:"schema,omitempty"`
	Profile string          `json:"profile,omitempty"`
	Rubric  string          `json:"rubric,omitempty"`
}

// Label is the check's name in a report.
func (c Check) Label() string {
	if c.Name != "" {
		return c.Name
	}
	return c.Kind
}

// Validate says, all at once, what is wrong with checks against org.
func Validate(checks []Check, org *config.Config) error {
	if len(checks) > MaxChecks {
		return crewlet.Errorf(crewlet.EINVALID, "%d checks; at most %d", len(checks), MaxChecks)
	}
	var problems []string
	for i, c := range checks {
		at := fmt.Sprintf("check %d (%s)", i+1, c.Kind)
		switch c.Kind {
		case Contains:
			if c.Text == "" {
				problems = append(problems, at+": text is empty; say what the answer must contain")
			}
		case Regex:
			if _, err := regexp.Compile(c.Pattern); err != nil || c.Pattern == "" {
				problems = append(problems, fmt.Sprintf("%s: pattern %q is not a regular expression (Go's RE2 syntax)", at, c.Pattern))
			}
		case JSONSchema:
			if _, err := resolveSchema(c.Schema); err != nil {
				problems = append(problems, fmt.Sprintf("%s: schema is not a JSON Schema: %v", at, err))
			}
		case SameTools:
		case Judge:
			if _, ok := org.Profiles[c.Profile]; !ok {
				problems = append(problems, fmt.Sprintf("%s: profile %q is not in the org; `crewlet profiles` lists them", at, c.Profile))
			}
			if c.Rubric == "" {
				problems = append(problems, at+": rubric is empty; say what a passing answer does")
			}
		default:
			problems = append(problems, fmt.Sprintf("check %d: kind %q is not one of %s", i+1, c.Kind, strings.Join(Kinds, ", ")))
		}
	}
	if problems != nil {
		return crewlet.Errorf(crewlet.EINVALID, "%s", strings.Join(problems, "; "))
	}
	return nil
}

func resolveSchema(raw json.RawMessage) (*jsonschema.Resolved, error) {
	if len(raw) == 0 {
		return nil, fmt.Errorf("none given")
	}
	var s jsonschema.Schema
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, err
	}
	return s.Resolve(nil)
}

// Grader scores replays; a judge check asks a profile of Org for its
// verdict.
type Grader struct {
	Org config.Source
	// Model builds a judge's model; nil builds it as turns do.
	Model func(name string, p config.Profile) (crewlet.ChatModel, error)
}

// JudgeSystem is the system prompt a judge gets.
const JudgeSystem = "You grade an answer another agent gave against a rubric. Reply with PASS or FAIL as your first word, then one sentence saying why."

// Score runs each check against report; the judges' model calls are
// returned as charges for the caller to record with the result.
func (g Grader) Score(ctx context.Context, checks []Check, report replay.Report, principal string) ([]wire.CheckResult, []store.EvalCharge, error) {
	out := make([]wire.CheckResult, 0, len(checks))
	var charges []store.EvalCharge
	for _, c := range checks {
		res := wire.CheckResult{Check: c.Label(), Pass: true}
		if c.Kind == SameTools {
			res.Pass, res.Reason = sameTools(report)
			out = append(out, res)
			continue
		}
		if len(report.Threads) == 0 {
			// Nothing answered, so nothing to check: a pass here would
			// count a check that never ran.
			res.Pass, res.Reason = false, NoAnswerToCheck
		}
		for _, th := range report.Threads {
			pass, reason, charge, err := g.one(ctx, c, th, report, principal)
			if err != nil {
				return nil, nil, err
			}
			if charge != nil {
				charges = append(charges, *charge)
			}
			if !pass {
				res.Pass, res.Reason = false, reason
				if len(report.Threads) > 1 {
					res.Reason = "trigger " + th.Trigger + ": " + reason
				}
				break
			}
			res.Reason = reason
		}
		out = append(out, res)
	}
	return out, charges, nil
}

// NoAnswerToCheck is why an answer check fails on a turn that answered no
// trigger (a notice, mail that needed no reply).
const NoAnswerToCheck = "no answer to check: the recorded turn answered no trigger; leave such turns out of the dataset"

// one runs a check on one thread's replayed answer.
func (g Grader) one(ctx context.Context, c Check, th replay.Thread, report replay.Report, principal string) (bool, string, *store.EvalCharge, error) {
	answer := th.Replayed
	if th.Stopped != "" {
		return false, "the replay gave no answer: " + th.Stopped, nil, nil
	}
	switch c.Kind {
	case Contains:
		if strings.Contains(answer, c.Text) {
			return true, "", nil, nil
		}
		return false, fmt.Sprintf("the answer does not contain %q", c.Text), nil, nil
	case Regex:
		if regexp.MustCompile(c.Pattern).MatchString(answer) {
			return true, "", nil, nil
		}
		return false, fmt.Sprintf("the answer does not match %s", c.Pattern), nil, nil
	case JSONSchema:
		schema, err := resolveSchema(c.Schema)
		if err != nil {
			return false, "the schema is not a JSON Schema: " + err.Error(), nil, nil
		}
		var v any
		if err := json.Unmarshal([]byte(answer), &v); err != nil {
			return false, "the answer is not JSON: " + err.Error(), nil, nil
		}
		if err := schema.Validate(v); err != nil {
			return false, "the answer does not validate: " + err.Error(), nil, nil
		}
		return true, "", nil, nil
	case Judge:
		return g.judge(ctx, c, answer, report, principal)
	}
	return false, "", nil, crewlet.Errorf(crewlet.EINVALID, "check kind %q is not one of %s", c.Kind, strings.Join(Kinds, ", "))
}

func (g Grader) judge(ctx context.Context, c Check, answer string, report replay.Report, principal string) (bool, string, *store.EvalCharge, error) {
	profile, ok := g.Org.Now().Profiles[c.Profile]
	if !ok {
		return false, "", nil, crewlet.Errorf(crewlet.EINVALID, "judge profile %q is not in the org; `crewlet profiles` lists them", c.Profile)
	}
	build := g.Model
	if build == nil {
		build = func(name string, p config.Profile) (crewlet.ChatModel, error) { return model.New(name, p, nil) }
	}
	m, err := build(c.Profile, profile)
	if err != nil {
		return false, "", nil, crewlet.Errorf(crewlet.EINVALID, "judge profile %s cannot be built: %v", c.Profile, err)
	}
	resp, err := m.Chat(ctx, crewlet.ModelRequest{
		Seat: report.Seat, Role: report.Role, System: JudgeSystem, MaxTokens: profile.MaxTokens,
		Messages: []crewlet.ChatMessage{{Role: "user", Content: "Rubric: " + c.Rubric + "\n\nAnswer: " + answer}},
	})
	if err != nil {
		return false, "", nil, crewlet.Errorf(crewlet.EUNAVAILABLE, "judge profile %s did not answer: %s", c.Profile, crewlet.ErrorMessage(err))
	}
	cost := replay.Cost(g.Org.Now(), profile, resp, time.Now())
	charge := &store.EvalCharge{TurnID: report.Turn, Principal: principal, Profile: c.Profile,
		InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens, NanoUSD: cost.NanoUSD, UnpricedTokens: cost.Unpriced}
	verdict, reason, _ := strings.Cut(strings.TrimSpace(resp.Text), " ")
	reason = strings.TrimSpace(strings.TrimLeft(reason, ":.-— "))
	switch strings.ToUpper(strings.Trim(verdict, ":.,")) {
	case "PASS":
		return true, reason, charge, nil
	case "FAIL":
		return false, reason, charge, nil
	}
	return false, fmt.Sprintf("the judge answered neither PASS nor FAIL: %q", clip(resp.Text, 200)), charge, nil
}

// sameTools compares the replay's tool calls with the recorded turn's, in
// order, by tool name and argument hash.
func sameTools(report replay.Report) (bool, string) {
	var recorded, replayed []string
	for _, th := range report.Threads {
		for _, r := range th.RecordedRounds {
			for _, c := range r.Calls {
				recorded = append(recorded, c.Name+"#"+approvals.ArgsHash(c.Args))
			}
		}
		for _, r := range th.Rounds {
			for _, c := range r.Calls {
				replayed = append(replayed, c.Name+"#"+approvals.ArgsHash(c.Args))
			}
		}
	}
	if slices.Equal(recorded, replayed) {
		return true, ""
	}
	for i := range max(len(recorded), len(replayed)) {
		if i >= len(recorded) {
			return false, fmt.Sprintf("call %d (%s) was not made by the recorded turn", i+1, name(replayed[i]))
		}
		if i >= len(replayed) {
			return false, fmt.Sprintf("the recorded turn's call %d (%s) was not made by the replay", i+1, name(recorded[i]))
		}
		if recorded[i] != replayed[i] {
			return false, fmt.Sprintf("call %d: the recorded turn called %s, the replay %s (or with other arguments)", i+1, name(recorded[i]), name(replayed[i]))
		}
	}
	return false, ""
}

func name(call string) string {
	n, _, _ := strings.Cut(call, "#")
	return n
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
