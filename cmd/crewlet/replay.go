package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/replay"
)

const (
	replaySynopsis = "crewlet replay TURN-ID [--charter FILE] [--profile P] [--model M] [--revision N] [--live-read-only] [--json] [--api URL]"
	policySynopsis = "crewlet replay --policy FILE (--dataset NAME | TURN-ID...) [--json] [--api URL]"
)

// runReplay re-runs a recorded turn with a changed setting and prints the
// recorded and the replayed turn side by side
// (docs/operations.md, "Try a change before it runs").
func runReplay(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("replay", flag.ContinueOnError)
	base := apiFlag(fs)
	charterFile := fs.String("charter", "", "a file whose text replaces the role's charter")
	profile := fs.String("profile", "", "run every round on this profile of the org")
	modelName := fs.String("model", "", "replace the model of the profile each round runs on")
	revision := fs.Int64("revision", 0, "run on this config revision's org (`crewlet config show` names the active one)")
	liveReadOnly := fs.Bool("live-read-only", false, "run a new call to an MCP tool its server marks read-only for real, on a worker node, instead of answering it 'no recorded result'; writes and crewlet's own tools never run")
	policyFile := fs.String("policy", "", "hold the recorded tool calls to this candidate org file's approvals and may, calling no model")
	dataset := fs.String("dataset", "", "with --policy: the dataset whose turns to hold to it")
	asJSON := fs.Bool("json", false, "print the report as its JSON")
	pos, err := parseFlags(fs, args, anyPositional, replaySynopsis)
	if err != nil {
		return err
	}
	if *policyFile != "" {
		if *charterFile != "" || *profile != "" || *modelName != "" || *revision != 0 || *liveReadOnly {
			return usageError{"--policy holds recorded calls to a candidate org and replays nothing: leave out --charter, --profile, --model, --revision and --live-read-only; usage: " + policySynopsis}
		}
		if (*dataset == "") == (len(pos) == 0) {
			return usageError{"give --dataset NAME or turn ids, one of the two; usage: " + policySynopsis}
		}
		return runPolicyWhatIf(ctx, *base, *policyFile, *dataset, pos, *asJSON, stdout)
	}
	if *dataset != "" || len(pos) != 1 {
		return usageError{"usage: " + replaySynopsis + "\n   or: " + policySynopsis}
	}
	handle, workKey, ok := crewlet.ParseTurnID(pos[0])
	if !ok {
		return usageError{fmt.Sprintf("turn id %q is not turn/HANDLE/WORK_KEY; `crewlet seats turns HANDLE` lists them", pos[0])}
	}
	change := replay.Change{Profile: *profile, Model: *modelName, Revision: *revision, LiveReadOnly: *liveReadOnly}
	if *charterFile != "" {
		text, err := os.ReadFile(*charterFile)
		if err != nil {
			return fmt.Errorf("read --charter: %w", err)
		}
		if strings.TrimSpace(string(text)) == "" {
			return fmt.Errorf("--charter %s is blank; write the charter to try in it", *charterFile)
		}
		change.Charter = string(text)
	}
	var report replay.Report
	path := "/turns/" + url.PathEscape(handle) + "/" + url.PathEscape(workKey) + "/replay"
	if err := newAPIClient(*base).call(ctx, http.MethodPost, path, change, &report); err != nil {
		return err
	}
	if *asJSON {
		return printJSON(stdout, report)
	}
	printReplay(stdout, report)
	return nil
}

// printReplay writes a replay's header, then per thread the recorded and
// replayed answers side by side and each side's rounds with their tool
// calls, and the totals.
func printReplay(w io.Writer, r replay.Report) {
	fmt.Fprintf(w, "%s  replayed%s (config revision %d)\n", r.Turn, changeLine(r.Change), r.Revision)
	for i, th := range r.Threads {
		same := "differs"
		if th.Same {
			same = "same, byte for byte"
		}
		fmt.Fprintf(w, "\nthread %d (trigger %s): %s\n", i, th.Trigger, same)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "\tRECORDED\tREPLAYED")
		replayed := th.Replayed
		if th.Stopped != "" {
			replayed = "(" + th.Stopped + ")"
		}
		fmt.Fprintf(tw, "answer\t%s\t%s\n", dash(crewlet.OneLine(th.Recorded, 60)), dash(crewlet.OneLine(replayed, 60)))
		fmt.Fprintf(tw, "rounds\t%d\t%d\n", len(th.RecordedRounds), len(th.Rounds))
		if err := tw.Flush(); err != nil {
			return
		}
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SIDE\tROUND\tPROFILE\tTOKENS IN/OUT\tANSWER OR CALLS")
		for _, rr := range th.RecordedRounds {
			fmt.Fprintf(tw, "recorded\t%d\t%s\t%d/%d\t%s\n", rr.Round, dash(rr.Profile), rr.Tokens.Input, rr.Tokens.Output, roundLine(rr.Answer, rr.Calls))
		}
		for _, rd := range th.Rounds {
			line := roundLine(rd.Answer, rd.Calls)
			if !rd.SystemAsRecorded {
				line += " [system prompt changed]"
			}
			fmt.Fprintf(tw, "replayed\t%d\t%s\t%d/%d\t%s\n", rd.Round, rd.Profile, rd.Tokens.Input, rd.Tokens.Output, line)
		}
		if err := tw.Flush(); err != nil {
			return
		}
	}
	fmt.Fprintf(w, "\ntool calls: %d matched, %d diverged (never run)", r.Matched, r.Diverged)
	if r.Change.LiveReadOnly {
		fmt.Fprintf(w, ", %d live (read-only, run for real)", r.Live)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "tokens in/out: recorded %d/%d, replayed %d/%d (charged to evals.budget)\n",
		r.Recorded.Input, r.Recorded.Output, r.Replayed.Input, r.Replayed.Output)
	fmt.Fprintf(w, "cost: %s\n", r.Cost)
	for _, g := range r.NotReconstructed {
		fmt.Fprintf(w, "not reconstructed: %s\n", g)
	}
}

// changeLine says what a replay changed, ", with" first; "" for nothing.
func changeLine(c replay.Change) string {
	var parts []string
	if c.Charter != "" {
		parts = append(parts, "a changed charter")
	}
	if c.Profile != "" {
		parts = append(parts, "profile "+c.Profile)
	}
	if c.Model != "" {
		parts = append(parts, "model "+c.Model)
	}
	if c.Revision != 0 {
		parts = append(parts, fmt.Sprintf("revision %d's org", c.Revision))
	}
	if c.LiveReadOnly {
		parts = append(parts, "read-only tools run live")
	}
	if len(parts) == 0 {
		return ", nothing changed"
	}
	return ", with " + strings.Join(parts, ", ")
}

// roundLine is a round's calls, each with its outcome, or its answer.
func roundLine(answer string, calls []replay.Call) string {
	if len(calls) == 0 {
		return crewlet.OneLine(answer, 60)
	}
	var parts []string
	for _, c := range calls {
		s := c.Name + " " + crewlet.OneLine(string(c.Args), 40)
		if c.Outcome != "" {
			s += " → " + c.Outcome
		}
		if c.Approval != "" {
			s += " (approval " + c.Approval + ")"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// runPolicyWhatIf sends the candidate org file with the turns to hold to
// it, and prints each recorded tool call's fate under it beside what
// happened when it ran (docs/operations.md, "Try a change before it runs").
func runPolicyWhatIf(ctx context.Context, base, file, dataset string, turns []string, asJSON bool, stdout io.Writer) error {
	text, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read --policy: %w", err)
	}
	var report replay.PolicyReport
	req := replay.PolicyRequest{Org: string(text), Dataset: dataset, Turns: turns}
	if err := newAPIClient(base).call(ctx, http.MethodPost, "/evals/policy", req, &report); err != nil {
		return err
	}
	if asJSON {
		return printJSON(stdout, report)
	}
	printPolicy(stdout, report)
	return nil
}

// printPolicy writes a row per recorded tool call, what it met when it ran
// and what it would meet now, then the totals.
func printPolicy(w io.Writer, r replay.PolicyReport) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TURN\tCALL\tWHEN IT RAN\tUNDER THE CANDIDATE")
	for _, t := range r.Turns {
		for _, c := range t.Calls {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Turn, c.Name+" "+crewlet.OneLine(string(c.Args), 40), ranLine(c), nowLine(c))
		}
	}
	if err := tw.Flush(); err != nil {
		return
	}
	n := r.Totals
	fmt.Fprintf(w, "\ntool calls: %d; gated %d (%d newly), refused %d (%d newly); no longer gated %d, no longer refused %d\n",
		n.Calls, n.Gated, n.NewlyGated, n.Refused, n.NewlyRefused, n.NoLongerGated, n.NoLongerRefused)
}

func ranLine(c replay.PolicyCall) string {
	switch {
	case c.WasGated:
		return "gated: " + c.Decision
	case c.WasRefused:
		return "refused"
	}
	return "ran"
}

func nowLine(c replay.PolicyCall) string {
	switch c.Now {
	case replay.Gated:
		p := c.Policy
		return fmt.Sprintf("gated: roles.%s approvals %s, approvers %s, timeout %s", p.Role, strings.Join(p.Tools, ","), strings.Join(p.Approvers, ","), p.Timeout)
	case replay.Refused:
		return crewlet.OneLine(c.Reason, 100)
	}
	return c.Now
}
