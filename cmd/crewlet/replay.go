package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/replay"
)

// replayCmd re-runs a recorded turn with a changed setting and prints the
// recorded and the replayed turn side by side, or with --policy holds
// recorded tool calls to a candidate org file
// (docs/operations.md, "Try a change before it runs").
func (c *cli) replayCmd() *cobra.Command {
	var charterFile, profile, modelName, policyFile, dataset string
	var revision int64
	var liveReadOnly bool
	cmd := &cobra.Command{
		Use: "replay TURN-ID | replay --policy FILE (--dataset NAME | TURN-ID...)",
		Short: "run a finished turn again with a changed charter, profile, model or config revision (POST /turns/{handle}/{work_key}/replay); " +
			"with --policy, hold recorded tool calls to a candidate org file (POST /evals/policy)",
		Long: `Run a finished turn again with a changed charter, profile, model or config revision: its
recorded and replayed answers side by side, each tool call answered from the record (matched)
or never run (diverged); with --live-read-only, a new call to an MCP tool its server marks
read-only runs for real on a worker node (live); writes nothing of the seat's, charged to
evals.budget (POST /turns/{handle}/{work_key}/replay).

With --policy FILE, hold the recorded tool calls of a dataset's turns or of the turns named to a
candidate org file: each one's approval gate and may now (allowed, gated, refused) beside what
it met when it ran; no model called, nothing written (POST /evals/policy).`,
		Example: "  crewlet replay turn/cto/ev-0123 --charter new-charter.md\n" +
			"  crewlet replay turn/cto/ev-0123 --profile fast -o json\n" +
			"  crewlet replay --policy candidate.yaml --dataset last-week",
		Args: cobra.ArbitraryArgs,
	}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		asJSON, err := out.json(cmd)
		if err != nil {
			return err
		}
		if policyFile != "" {
			if charterFile != "" || profile != "" || modelName != "" || revision != 0 || liveReadOnly {
				return usageErrorf(cmd, "--policy holds recorded calls to a candidate org and replays nothing: leave out --charter, --profile, --model, --revision and --live-read-only")
			}
			if (dataset == "") == (len(pos) == 0) {
				return usageErrorf(cmd, "give --dataset NAME or turn ids, one of the two")
			}
			return c.policyWhatIf(cmd, policyFile, dataset, pos, asJSON)
		}
		if dataset != "" || len(pos) != 1 {
			return usageErrorf(cmd, "replay takes one TURN-ID, or --policy FILE with --dataset or turn ids")
		}
		path, err := turnPath(cmd, pos[0])
		if err != nil {
			return err
		}
		change := replay.Change{Profile: profile, Model: modelName, Revision: revision, LiveReadOnly: liveReadOnly}
		if change.Charter, err = readCharter(charterFile); err != nil {
			return err
		}
		raw, err := c.client().do(cmd.Context(), http.MethodPost, path+"/replay", change)
		if err != nil {
			return err
		}
		if asJSON {
			return printRawJSON(c.stdout, raw)
		}
		var report replay.Report
		if err := json.Unmarshal(raw, &report); err != nil {
			return fmt.Errorf("decode API response from %s/replay: %w", path, err)
		}
		printReplay(c.stdout, report)
		return nil
	}
	f := cmd.Flags()
	f.StringVar(&charterFile, "charter", "", "a file whose text replaces the role's charter")
	f.StringVar(&profile, "profile", "", "run every round on this profile of the org")
	f.StringVar(&modelName, "model", "", "replace the model of the profile each round runs on")
	f.Int64Var(&revision, "revision", 0, "run on this config revision's org (`crewlet config show` names the active one)")
	f.BoolVar(&liveReadOnly, "live-read-only", false, "run a new call to an MCP tool its server marks read-only for real, on a worker node, instead of answering it 'no recorded result'; writes and crewlet's own tools never run")
	f.StringVar(&policyFile, "policy", "", "hold the recorded tool calls to this candidate org file's approvals and may, calling no model")
	f.StringVar(&dataset, "dataset", "", "with --policy: the dataset whose turns to hold to it")
	jsonAliasFlag(cmd)
	return cmd
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
	fmt.Fprintf(w, "cost: recorded %s, replayed %s (at the prices now)%s\n", usd(r.Recorded.NanoUSD), usd(r.Replayed.NanoUSD),
		unpricedNote(r.Recorded.Unpriced+r.Replayed.Unpriced))
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

// policyWhatIf sends the candidate org file with the turns to hold to it,
// and prints each recorded tool call's fate under it beside what happened
// when it ran (docs/operations.md, "Try a change before it runs").
func (c *cli) policyWhatIf(cmd *cobra.Command, file, dataset string, turns []string, asJSON bool) error {
	text, err := os.ReadFile(file)
	if err != nil {
		return fmt.Errorf("read --policy: %w", err)
	}
	req := replay.PolicyRequest{Org: string(text), Dataset: dataset, Turns: turns}
	raw, err := c.client().do(cmd.Context(), http.MethodPost, "/evals/policy", req)
	if err != nil {
		return err
	}
	if asJSON {
		return printRawJSON(c.stdout, raw)
	}
	var report replay.PolicyReport
	if err := json.Unmarshal(raw, &report); err != nil {
		return fmt.Errorf("decode API response from /evals/policy: %w", err)
	}
	printPolicy(c.stdout, report)
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

// readCharter is the text of a --charter file, "" when none is named; a
// blank file is refused, since an empty charter is no change to try.
func readCharter(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	text, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read --charter: %w", err)
	}
	if strings.TrimSpace(string(text)) == "" {
		return "", fmt.Errorf("--charter %s is blank; write the charter to try in it", path)
	}
	return string(text), nil
}
