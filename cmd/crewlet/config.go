package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/wire"
)

func (c *cli) configCmd() *cobra.Command {
	return group("config", "the org file: check one, apply one as the next revision, show the active one",
		c.configCheckCmd(), c.configApplyCmd(), c.configShowCmd())
}

func (c *cli) configApplyCmd() *cobra.Command {
	var restart bool
	cmd := &cobra.Command{
		Use:     "apply FILE",
		Short:   "apply an org file as the next config revision and list each changed key as hot, deferred or cold (admin; POST /config)",
		Example: "  crewlet config apply crewlet.yaml\n  crewlet config apply crewlet.yaml --restart",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			return c.configApply(cmd.Context(), pos, restart)
		},
	}
	cmd.Flags().BoolVar(&restart, "restart", false, "the file changes keys that need a restart, and every process will be restarted")
	return cmd
}

func (c *cli) configApply(ctx context.Context, pos []string, restart bool) error {
	stdout := c.stdout
	doc, err := os.ReadFile(pos[0])
	if err != nil {
		return fmt.Errorf("read %s: %w", pos[0], err)
	}
	var report wire.ConfigReport
	req := wire.ConfigApplyRequest{Document: string(doc), Restart: restart}
	if err := c.client().call(ctx, http.MethodPost, "/config", req, &report); err != nil {
		return err
	}
	if report.Unchanged {
		fmt.Fprintf(stdout, "%s is revision %d already (applied by %s at %s); nothing applied\n",
			pos[0], report.Revision, report.AppliedBy, report.AppliedAt.Format(time.RFC3339))
		return nil
	}
	fmt.Fprintf(stdout, "applied %s as revision %d; every process takes it within a beat\n", pos[0], report.Revision)
	writeChanges(stdout, report.Changes)
	if len(report.NeedsRestart) > 0 {
		fmt.Fprintf(stdout, "restart every process to take: %s\n", strings.Join(report.NeedsRestart, ", "))
	}
	return nil
}

// writeChanges lists changed keys by class: what takes effect now, later,
// and only after a restart.
func writeChanges(w io.Writer, changes []config.Change) {
	if len(changes) == 0 {
		fmt.Fprintln(w, "no key changed")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CLASS\tKEY\tCHANGE\tTAKES EFFECT")
	for _, class := range []string{config.ClassHot, config.ClassDeferred, config.ClassCold} {
		for _, c := range changes {
			if c.Class != class {
				continue
			}
			when := c.When
			if class == config.ClassHot {
				when = "now (a turn: its next one)"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Class, c.Key, c.Kind, when)
		}
	}
	_ = tw.Flush()
}

func (c *cli) configShowCmd() *cobra.Command {
	var document bool
	cmd := readCommand(c, &cobra.Command{
		Use:     "show",
		Short:   "the active revision, who applied it, when, and which revision each process runs (GET /config)",
		Example: "  crewlet config show\n  crewlet config show --document > active.yaml\n  crewlet config show -o json | jq .revision",
		Args:    noArgs,
	}, fixedPath("/config"), func(w io.Writer, state wire.ConfigState) error { return c.printConfigState(w, state, document) })
	cmd.Flags().BoolVar(&document, "document", false, "print the active revision's org file only")
	return cmd
}

func (c *cli) printConfigState(stdout io.Writer, state wire.ConfigState, document bool) error {
	if len(state.Redacted) > 0 {
		// On stderr with --document, so a file it is written to holds the
		// document only.
		note := stdout
		if document {
			note = c.stderr
		}
		fmt.Fprintf(note, "shown as %s (inline values that may be secrets; an apply still holding them is refused): %s\n", config.RedactedValue, strings.Join(state.Redacted, ", "))
	}
	if document {
		_, err := io.WriteString(stdout, state.Document)
		return err
	}
	fmt.Fprintf(stdout, "revision %d, applied by %s at %s (digest %.12s)\n", state.Revision, state.AppliedBy,
		state.AppliedAt.Format(time.RFC3339), state.Digest)
	writeChanges(stdout, state.Changes)
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROCESS\tKIND\tREVISION\tNEEDS RESTART FOR\tPROBLEM")
	for _, p := range state.Processes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", p.Process, p.Kind, p.Revision, dash(strings.Join(p.NeedsRestart, ", ")), dash(p.Problem))
	}
	return tw.Flush()
}
