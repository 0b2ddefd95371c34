package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/wire"
)

func runConfigApply(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("config apply", flag.ContinueOnError)
	base := apiFlag(fs)
	restart := fs.Bool("restart", false, "the file changes keys that need a restart, and every process will be restarted")
	pos, err := parseFlags(fs, args, 1, "crewlet config apply FILE [--restart] [--api URL]")
	if err != nil {
		return err
	}
	doc, err := os.ReadFile(pos[0])
	if err != nil {
		return fmt.Errorf("read %s: %w", pos[0], err)
	}
	var report wire.ConfigReport
	req := wire.ConfigApplyRequest{Document: string(doc), Restart: *restart}
	if err := newAPIClient(*base).call(ctx, http.MethodPost, "/config", req, &report); err != nil {
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

func runConfigShow(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("config show", flag.ContinueOnError)
	base := apiFlag(fs)
	document := fs.Bool("document", false, "print the active revision's org file only")
	if _, err := parseFlags(fs, args, 0, "crewlet config show [--document] [--api URL]"); err != nil {
		return err
	}
	var state wire.ConfigState
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/config", nil, &state); err != nil {
		return err
	}
	if len(state.Redacted) > 0 {
		// On stderr with --document, so a file it is written to holds the
		// document only.
		note := stdout
		if *document {
			note = stderr
		}
		fmt.Fprintf(note, "shown as %s (inline values that may be secrets; an apply still holding them is refused): %s\n", config.RedactedValue, strings.Join(state.Redacted, ", "))
	}
	if *document {
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
