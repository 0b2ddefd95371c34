package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/wire"
)

const (
	datasetCreateSynopsis = "crewlet eval dataset create NAME (--seat H | --role R) --since T [--until T] [--limit N] | NAME --turn ID... | NAME --turns FILE"
	evalRunSynopsis       = "crewlet eval run DATASET [--charter FILE] [--profile P] [--model M] [--revision N] [--live-read-only] [--check KIND[:ARG]]... [--checks FILE] [--concurrency K]"
	evalShowSynopsis      = "crewlet eval show RUN [--turn ID] [--json]"
)

// runEval is `crewlet eval`: datasets of recorded turns, and runs that
// replay a dataset with a change and score it
// (docs/operations.md, "Try a change before it runs").
func runEval(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{"usage: crewlet eval dataset create|list|show|delete, eval run, eval runs, eval show RUN"}
	}
	switch args[0] {
	case "dataset":
		if len(args) < 2 {
			return usageError{"usage: crewlet eval dataset create|list|show|delete"}
		}
		switch args[1] {
		case "create":
			return runDatasetCreate(ctx, args[2:], stdout)
		case "list", "ls":
			return runDatasetList(ctx, args[2:], stdout)
		case "show":
			return runDatasetShow(ctx, args[2:], stdout)
		case "delete":
			return runDatasetDelete(ctx, args[2:], stdout)
		}
		return usageError{fmt.Sprintf("unknown eval dataset command %q; use create, list, show or delete", args[1])}
	case "run":
		return runEvalRun(ctx, args[1:], stdout)
	case "runs":
		return runEvalRuns(ctx, args[1:], stdout)
	case "show":
		return runEvalShow(ctx, args[1:], stdout)
	}
	return usageError{fmt.Sprintf("unknown eval command %q; use dataset, run, runs or show", args[0])}
}

// repeated is a flag given any number of times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

func runDatasetCreate(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("eval dataset create", flag.ContinueOnError)
	base := apiFlag(fs)
	seat := fs.String("seat", "", "the finished turns of this seat")
	role := fs.String("role", "", "the finished turns of this role's seats")
	since := fs.String("since", "", "turns started at or after this time (RFC 3339, or a duration ago: 24h)")
	until := fs.String("until", "", "turns started before this time (RFC 3339, or a duration ago); now when unset")
	limit := fs.Int("limit", 0, "keep the newest N turns of the window (at most 1000)")
	var turns repeated
	fs.Var(&turns, "turn", "a turn id (turn/HANDLE/WORK_KEY); repeat it")
	turnsFile := fs.String("turns", "", "a file of turn ids, one a line")
	pos, err := parseFlags(fs, args, 1, datasetCreateSynopsis)
	if err != nil {
		return err
	}
	req := wire.DatasetRequest{Name: pos[0], DatasetSelector: wire.DatasetSelector{Seat: *seat, Role: *role, Limit: *limit, Turns: turns}}
	if *since != "" {
		if req.Since, err = timeAgo(*since); err != nil {
			return usageError{"--since: " + err.Error()}
		}
	}
	if *until != "" {
		if req.Until, err = timeAgo(*until); err != nil {
			return usageError{"--until: " + err.Error()}
		}
	}
	if *turnsFile != "" {
		b, err := os.ReadFile(*turnsFile)
		if err != nil {
			return fmt.Errorf("read --turns: %w", err)
		}
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
				req.Turns = append(req.Turns, line)
			}
		}
	}
	var d wire.Dataset
	if err := newAPIClient(*base).call(ctx, http.MethodPost, "/evals/datasets", req, &d); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dataset %s: %d turns\n", d.Name, d.Size)
	return nil
}

// timeAgo reads a time as RFC 3339 or as a duration before now.
func timeAgo(s string) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration ago", s)
	}
	return t, nil
}

func runDatasetList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("eval dataset list", flag.ContinueOnError)
	base := apiFlag(fs)
	if _, err := parseFlags(fs, args, 0, "crewlet eval dataset list"); err != nil {
		return err
	}
	var ds []wire.Dataset
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/evals/datasets", nil, &ds); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tTURNS\tCHOSEN BY\tCREATED BY\tCREATED")
	for _, d := range ds {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", d.Name, d.Size, selectorLine(d.Selector), d.CreatedBy, d.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func selectorLine(s wire.DatasetSelector) string {
	if len(s.Turns) > 0 {
		return fmt.Sprintf("%d turn ids", len(s.Turns))
	}
	who := "seat " + s.Seat
	if s.Role != "" {
		who = "role " + s.Role
	}
	line := fmt.Sprintf("%s since %s", who, s.Since.Format(time.RFC3339))
	if !s.Until.IsZero() {
		line += " until " + s.Until.Format(time.RFC3339)
	}
	if s.Limit > 0 {
		line += fmt.Sprintf(" (newest %d)", s.Limit)
	}
	return line
}

func runDatasetShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("eval dataset show", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet eval dataset show NAME")
	if err != nil {
		return err
	}
	var d wire.Dataset
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/evals/datasets/"+url.PathEscape(pos[0]), nil, &d); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dataset %s: %d turns, %s; created by %s at %s\n", d.Name, d.Size, selectorLine(d.Selector), d.CreatedBy, d.CreatedAt.Format(time.RFC3339))
	for _, t := range d.Turns {
		fmt.Fprintln(stdout, t)
	}
	return nil
}

func runDatasetDelete(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("eval dataset delete", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet eval dataset delete NAME")
	if err != nil {
		return err
	}
	if err := newAPIClient(*base).call(ctx, http.MethodDelete, "/evals/datasets/"+url.PathEscape(pos[0]), nil, nil); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "dataset %s deleted\n", pos[0])
	return nil
}

func runEvalRun(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("eval run", flag.ContinueOnError)
	base := apiFlag(fs)
	charterFile := fs.String("charter", "", "a file whose text replaces the role's charter")
	profile := fs.String("profile", "", "run every round on this profile of the org")
	modelName := fs.String("model", "", "replace the model of the profile each round runs on")
	revision := fs.Int64("revision", 0, "run on this config revision's org")
	liveReadOnly := fs.Bool("live-read-only", false, "run a new call to an MCP tool its server marks read-only for real instead of answering it 'no recorded result'; writes and crewlet's own tools never run")
	var checkFlags repeated
	fs.Var(&checkFlags, "check", "a check: contains:TEXT, regex:PATTERN, json_schema:FILE, same_tools or judge:PROFILE:RUBRIC; repeat it")
	checksFile := fs.String("checks", "", "a YAML file of checks: a list of {kind, name, text, pattern, schema, profile, rubric}")
	concurrency := fs.Int("concurrency", 0, "replays at once (default 8, at most 32)")
	pos, err := parseFlags(fs, args, 1, evalRunSynopsis)
	if err != nil {
		return err
	}
	req := struct {
		Dataset     string        `json:"dataset"`
		Change      replay.Change `json:"change"`
		Checks      []evals.Check `json:"checks,omitempty"`
		Concurrency int           `json:"concurrency,omitempty"`
	}{Dataset: pos[0], Change: replay.Change{Profile: *profile, Model: *modelName, Revision: *revision, LiveReadOnly: *liveReadOnly}, Concurrency: *concurrency}
	if *charterFile != "" {
		text, err := os.ReadFile(*charterFile)
		if err != nil {
			return fmt.Errorf("read --charter: %w", err)
		}
		if strings.TrimSpace(string(text)) == "" {
			return fmt.Errorf("--charter %s is blank; write the charter to try in it", *charterFile)
		}
		req.Change.Charter = string(text)
	}
	for _, f := range checkFlags {
		c, err := parseCheck(f)
		if err != nil {
			return usageError{"--check " + f + ": " + err.Error()}
		}
		req.Checks = append(req.Checks, c)
	}
	if *checksFile != "" {
		cs, err := readChecks(*checksFile)
		if err != nil {
			return err
		}
		req.Checks = append(req.Checks, cs...)
	}
	var run wire.EvalRun
	if err := newAPIClient(*base).call(ctx, http.MethodPost, "/evals/runs", req, &run); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "eval run %s started: %d turns of %s, %d at once; `crewlet eval show %s` reports it\n",
		run.ID, run.Totals.Turns, run.Dataset, run.Concurrency, run.ID)
	return nil
}

// parseCheck reads a --check: KIND or KIND:ARG (judge:PROFILE:RUBRIC).
func parseCheck(s string) (evals.Check, error) {
	kind, arg, _ := strings.Cut(s, ":")
	c := evals.Check{Kind: kind}
	switch kind {
	case evals.Contains:
		c.Text = arg
	case evals.Regex:
		c.Pattern = arg
	case evals.JSONSchema:
		b, err := os.ReadFile(arg)
		if err != nil {
			return c, fmt.Errorf("read the schema: %w", err)
		}
		c.Schema = b
	case evals.SameTools:
	case evals.Judge:
		profile, rubric, ok := strings.Cut(arg, ":")
		if !ok {
			return c, fmt.Errorf("a judge check is judge:PROFILE:RUBRIC")
		}
		c.Profile, c.Rubric = profile, rubric
	default:
		return c, fmt.Errorf("kind %q is not one of %s", kind, strings.Join(evals.Kinds, ", "))
	}
	return c, nil
}

// readChecks reads a YAML list of checks; a json_schema check's schema is
// YAML too, sent as JSON.
func readChecks(file string) ([]evals.Check, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read --checks: %w", err)
	}
	var doc []map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("--checks %s is not a YAML list of checks: %w", file, err)
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("--checks %s: %w", file, err)
	}
	var out []evals.Check
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("--checks %s: %w; a check's keys are kind, name, text, pattern, schema, profile, rubric", file, err)
	}
	return out, nil
}

func runEvalRuns(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("eval runs", flag.ContinueOnError)
	base := apiFlag(fs)
	if _, err := parseFlags(fs, args, 0, "crewlet eval runs"); err != nil {
		return err
	}
	var runs []wire.EvalRun
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/evals/runs", nil, &runs); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tDATASET\tSTATUS\tSCORED\tPASS RATE\tTOKENS IN/OUT\tBY\tSTARTED")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%.0f%%\t%d/%d\t%s\t%s\n", r.ID, r.Dataset, r.Status, r.Totals.Scored, r.Totals.Turns,
			100*r.Totals.PassRate, r.Totals.InputTokens, r.Totals.OutputTokens, r.Principal, r.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func runEvalShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("eval show", flag.ContinueOnError)
	base := apiFlag(fs)
	turn := fs.String("turn", "", "one turn, with its whole replay report")
	asJSON := fs.Bool("json", false, "print the report as its JSON")
	pos, err := parseFlags(fs, args, 1, evalShowSynopsis)
	if err != nil {
		return err
	}
	path := "/evals/runs/" + url.PathEscape(pos[0])
	if *turn != "" {
		path += "?turn=" + url.QueryEscape(*turn)
	}
	var run wire.EvalRun
	if err := newAPIClient(*base).call(ctx, http.MethodGet, path, nil, &run); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, run)
	}
	printEvalRun(stdout, run)
	return nil
}

// printEvalRun writes a run's header, a line per turn (its status, each
// check, the recorded and replayed answers) and the totals.
func printEvalRun(w io.Writer, r wire.EvalRun) {
	var change replay.Change
	_ = json.Unmarshal(r.Change, &change)
	fmt.Fprintf(w, "eval run %s of %s%s: %s\n\n", r.ID, r.Dataset, changeLine(change), r.Status)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TURN\tRESULT\tCHECKS\tRECORDED\tREPLAYED")
	for _, res := range r.Results {
		result := res.Status
		if res.Passed != nil {
			result = map[bool]string{true: "pass", false: "FAIL"}[*res.Passed]
		}
		var checks []string
		for _, c := range res.Checks {
			mark := "ok"
			if !c.Pass {
				mark = "FAIL"
				if c.Reason != "" {
					mark += " (" + crewlet.OneLine(c.Reason, 50) + ")"
				}
			}
			checks = append(checks, c.Check+" "+mark)
		}
		if res.Error != "" {
			checks = append(checks, crewlet.OneLine(res.Error, 60))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", res.Turn, result, dash(strings.Join(checks, ", ")),
			dash(crewlet.OneLine(res.Recorded, 40)), dash(crewlet.OneLine(res.Replayed, 40)))
	}
	if err := tw.Flush(); err != nil {
		return
	}
	t := r.Totals
	fmt.Fprintf(w, "\nturns: %d (%d scored, %d passed, %d failed to replay, %d refused, %d pending)\n", t.Turns, t.Scored, t.Passed, t.Failed, t.Refused, t.Pending)
	fmt.Fprintf(w, "pass rate: %.1f%%\n", 100*t.PassRate)
	fmt.Fprintf(w, "tool calls diverged: %d (never run)\n", t.Diverged)
	fmt.Fprintf(w, "tokens in/out: %d/%d (charged to evals.budget)\n", t.InputTokens, t.OutputTokens)
	fmt.Fprintf(w, "cost: %s\n", t.Cost)
}
