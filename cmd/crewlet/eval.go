package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/wire"
)

// evalCmd is `crewlet eval`: datasets of recorded turns, and runs that
// replay a dataset with a change and score it
// (docs/operations.md, "Try a change before it runs").
func (c *cli) evalCmd() *cobra.Command {
	dataset := group("dataset", "datasets of finished turns: create, list, show, delete",
		c.datasetCreateCmd(), c.datasetListCmd(), c.datasetShowCmd(), c.datasetDeleteCmd())
	return group("eval", "replay datasets of finished turns with a change and score them",
		dataset, c.evalRunCmd(), c.evalRunsCmd(), c.evalShowCmd())
}

func (c *cli) datasetCreateCmd() *cobra.Command {
	var seat, role, since, until, turnsFile string
	var limit int
	var turns []string
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "freeze finished turns as a dataset: a seat's or role's in a window, or by id; at most 1000 (POST /evals/datasets)",
		Example: "  crewlet eval dataset create last-week --seat cto --since 168h\n" +
			"  crewlet eval dataset create picked --turn turn/cto/ev-1 --turn turn/cto/ev-2\n" +
			"  crewlet eval dataset create from-file --turns turns.txt",
		Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var err error
			req := wire.DatasetRequest{Name: pos[0], DatasetSelector: wire.DatasetSelector{Seat: seat, Role: role, Limit: limit, Turns: turns}}
			if since != "" {
				if req.Since, err = timeAgo(since); err != nil {
					return usageErrorf(cmd, "--since: %v", err)
				}
			}
			if until != "" {
				if req.Until, err = timeAgo(until); err != nil {
					return usageErrorf(cmd, "--until: %v", err)
				}
			}
			if turnsFile != "" {
				b, err := os.ReadFile(turnsFile)
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
			if err := c.client().call(cmd.Context(), http.MethodPost, "/evals/datasets", req, &d); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "dataset %s: %d turns\n", d.Name, d.Size)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&seat, "seat", "", "the finished turns of this seat")
	f.StringVar(&role, "role", "", "the finished turns of this role's seats")
	f.StringVar(&since, "since", "", "turns started at or after this time (RFC 3339, or a duration ago: 24h)")
	f.StringVar(&until, "until", "", "turns started before this time (RFC 3339, or a duration ago); now when unset")
	f.IntVar(&limit, "limit", 0, "keep the newest N turns of the window (at most 1000)")
	f.StringArrayVar(&turns, "turn", nil, "a turn id (turn/HANDLE/WORK_KEY); repeat it")
	f.StringVar(&turnsFile, "turns", "", "a file of turn ids, one a line")
	return cmd
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

func (c *cli) datasetListCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "list", Aliases: []string{"ls"}, Short: "the datasets (GET /evals/datasets)",
		Example: "  crewlet eval dataset list", Args: noArgs,
	}, fixedPath("/evals/datasets"), printDatasets)
}

func printDatasets(w io.Writer, ds []wire.Dataset) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
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

func datasetPath(args []string) (string, error) {
	return "/evals/datasets/" + url.PathEscape(args[0]), nil
}

func (c *cli) datasetShowCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "show NAME", Short: "one dataset's turn ids (GET /evals/datasets/{name})",
		Example: "  crewlet eval dataset show last-week", Args: exactArgs(1),
	}, datasetPath, printDataset)
}

func printDataset(w io.Writer, d wire.Dataset) error {
	fmt.Fprintf(w, "dataset %s: %d turns, %s; created by %s at %s\n", d.Name, d.Size, selectorLine(d.Selector), d.CreatedBy, d.CreatedAt.Format(time.RFC3339))
	for _, t := range d.Turns {
		fmt.Fprintln(w, t)
	}
	return nil
}

func (c *cli) datasetDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use: "delete NAME", Short: "delete a dataset (DELETE /evals/datasets/{name})",
		Example: "  crewlet eval dataset delete last-week", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			path, _ := datasetPath(pos)
			if err := c.client().call(cmd.Context(), http.MethodDelete, path, nil, nil); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "dataset %s deleted\n", pos[0])
			return nil
		},
	}
}

func (c *cli) evalRunCmd() *cobra.Command {
	var charterFile, profile, modelName, checksFile string
	var revision int64
	var liveReadOnly bool
	var concurrency int
	var checkFlags []string
	cmd := &cobra.Command{
		Use: "run DATASET",
		Short: "replay every turn of the dataset with the change, K at once, as one durable workflow, and score each with the checks; " +
			"charged to evals.budget (POST /evals/runs)",
		Long: `Replay every turn of the dataset with the change, --concurrency at once (8), as one durable
workflow, and score each with the checks: contains:TEXT, regex:PATTERN, json_schema:FILE,
same_tools, judge:PROFILE:RUBRIC; charged to evals.budget (POST /evals/runs).`,
		Example: "  crewlet eval run last-week --charter new-charter.md --check same_tools --check contains:invoice\n" +
			"  crewlet eval run last-week --profile fast --checks checks.yaml --concurrency 4",
		Args: exactArgs(1),
	}
	f := cmd.Flags()
	f.StringVar(&charterFile, "charter", "", "a file whose text replaces the role's charter")
	f.StringVar(&profile, "profile", "", "run every round on this profile of the org")
	f.StringVar(&modelName, "model", "", "replace the model of the profile each round runs on")
	f.Int64Var(&revision, "revision", 0, "run on this config revision's org")
	f.BoolVar(&liveReadOnly, "live-read-only", false, "run a new call to an MCP tool its server marks read-only for real instead of answering it 'no recorded result'; writes and crewlet's own tools never run")
	f.StringArrayVar(&checkFlags, "check", nil, "a check: contains:TEXT, regex:PATTERN, json_schema:FILE, same_tools or judge:PROFILE:RUBRIC; repeat it")
	f.StringVar(&checksFile, "checks", "", "a YAML file of checks: a list of {kind, name, text, pattern, schema, profile, rubric}")
	f.IntVar(&concurrency, "concurrency", 0, "replays at once (default 8, at most 32)")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		req := struct {
			Dataset     string        `json:"dataset"`
			Change      replay.Change `json:"change"`
			Checks      []evals.Check `json:"checks,omitempty"`
			Concurrency int           `json:"concurrency,omitempty"`
		}{Dataset: pos[0], Change: replay.Change{Profile: profile, Model: modelName, Revision: revision, LiveReadOnly: liveReadOnly}, Concurrency: concurrency}
		var err error
		if req.Change.Charter, err = readCharter(charterFile); err != nil {
			return err
		}
		for _, f := range checkFlags {
			c, err := parseCheck(f)
			if err != nil {
				return usageErrorf(cmd, "--check %s: %v", f, err)
			}
			req.Checks = append(req.Checks, c)
		}
		if checksFile != "" {
			cs, err := readChecks(checksFile)
			if err != nil {
				return err
			}
			req.Checks = append(req.Checks, cs...)
		}
		var run wire.EvalRun
		if err := c.client().call(cmd.Context(), http.MethodPost, "/evals/runs", req, &run); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "eval run %s started: %d turns of %s, %d at once; `crewlet eval show %s` reports it\n",
			run.ID, run.Totals.Turns, run.Dataset, run.Concurrency, run.ID)
		return nil
	}
	return cmd
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

func (c *cli) evalRunsCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "runs", Short: "the eval runs with their totals (GET /evals/runs)",
		Example: "  crewlet eval runs", Args: noArgs,
	}, fixedPath("/evals/runs"), printEvalRuns)
}

func printEvalRuns(w io.Writer, runs []wire.EvalRun) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tDATASET\tSTATUS\tSCORED\tPASS RATE\tTOKENS IN/OUT\tBY\tSTARTED")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%.0f%%\t%d/%d\t%s\t%s\n", r.ID, r.Dataset, r.Status, r.Totals.Scored, r.Totals.Turns,
			100*r.Totals.PassRate, r.Totals.InputTokens, r.Totals.OutputTokens, r.Principal, r.CreatedAt.Format(time.RFC3339))
	}
	return tw.Flush()
}

func (c *cli) evalShowCmd() *cobra.Command {
	var turn string
	cmd := readCommand(c, &cobra.Command{
		Use: "show RUN", Short: "a run's report: per turn the checks and the recorded and replayed answers; pass rate, tokens, divergences (GET /evals/runs/{run})",
		Example: "  crewlet eval show ev-0123\n  crewlet eval show ev-0123 --turn turn/cto/ev-1 -o json", Args: exactArgs(1),
	}, func(args []string) (string, error) {
		path := "/evals/runs/" + url.PathEscape(args[0])
		if turn != "" {
			path += "?turn=" + url.QueryEscape(turn)
		}
		return path, nil
	}, func(w io.Writer, run wire.EvalRun) error { printEvalRun(w, run); return nil })
	cmd.Flags().StringVar(&turn, "turn", "", "one turn, with its whole replay report")
	jsonAliasFlag(cmd)
	return cmd
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
	fmt.Fprintf(w, "cost: %s (replays and judges, charged to evals.budget); the recorded turns cost %s%s\n",
		usd(t.NanoUSD), usd(t.RecordedNanoUSD), unpricedNote(t.UnpricedTokens))
}
