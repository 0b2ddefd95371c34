package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
)

// runProfiles prints every profile: its load, free slots, and whether a
// quarantine, a cooling-off or the model gate keeps it from taking turns.
func runProfiles(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("profiles", flag.ContinueOnError)
	base := apiFlag(fs)
	if _, err := parseFlags(fs, args, 0, "crewlet profiles [--api URL]"); err != nil {
		return err
	}
	var view api.ProfilesView
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/profiles", nil, &view); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "PROFILE\tPROVIDER\tMODEL\tCREDENTIAL\tWEIGHT\tMAX_LOAD\tLIVE\tFREE\tSTATE")
	for _, p := range view.Profiles {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%d\t%s\t%s\n", p.Name, p.Provider, dash(p.Model), p.Credential, p.Weight,
			countText(p.MaxLoad), p.Live, countText(p.Free), profileState(p))
	}
	return tw.Flush()
}

// countText shows an optional count, "unlimited" when there is none.
func countText(n *int) string {
	if n == nil {
		return "unlimited"
	}
	return fmt.Sprint(*n)
}

// profileState says in one cell what keeps a profile from taking turns.
func profileState(p crewlet.ProfileStatus) string {
	var parts []string
	if q := p.Quarantine; q != nil {
		parts = append(parts, fmt.Sprintf("quarantined %ds (attempt %d): %s", q.SecondsLeft, q.Attempt, crewlet.OneLine(q.Reason, 60)))
	}
	if c := p.CoolingOff; c != nil {
		parts = append(parts, fmt.Sprintf("cooling off %ds: %s", c.SecondsLeft, crewlet.OneLine(c.Reason, 60)))
	}
	if p.Disabled {
		parts = append(parts, "model disabled")
	}
	if p.AnsweredModel != "" {
		parts = append(parts, "answered by "+p.AnsweredModel)
	}
	if len(parts) == 0 {
		return "ok"
	}
	return strings.Join(parts, "; ")
}

// runModelSwitch switches a model off or back on for the whole fleet.
func runModelSwitch(ctx context.Context, action string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("models "+action, flag.ContinueOnError)
	base := apiFlag(fs)
	reason := fs.String("reason", "", "why (recorded with the switch)")
	by := fs.String("by", "", "who is asking; defaults to the token's principal")
	pos, err := parseFlags(fs, args, 1, "crewlet models "+action+" MODEL [--reason TEXT] [--by NAME]")
	if err != nil {
		return err
	}
	var sw crewlet.ModelSwitch
	path := "/models/" + url.PathEscape(pos[0]) + "/" + action
	if err := newAPIClient(*base).call(ctx, http.MethodPost, path, api.ModelSwitchRequest{Reason: *reason, By: *by}, &sw); err != nil {
		return err
	}
	state := "enabled"
	if sw.Disabled {
		state = "disabled; its profiles take no new turn and turns on them fail over"
	}
	fmt.Fprintf(stdout, "model %s %s (by %s)\n", sw.Model, state, sw.By)
	return nil
}
