package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
)

// profilesCmd prints every profile: its load, free slots, and whether a
// quarantine, a cooling-off or the model gate keeps it from taking turns.
func (c *cli) profilesCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "profiles", Short: "model profiles: load, free slots, quarantine, cooling-off, model gate (GET /profiles)",
		Example: "  crewlet profiles\n  crewlet profiles -o json | jq '.profiles[].name'", Args: noArgs,
	}, fixedPath("/profiles"), printProfiles)
}

func printProfiles(w io.Writer, view api.ProfilesView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
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

func (c *cli) modelsCmd() *cobra.Command {
	return group("models", "switch a model off or on fleet-wide", c.modelSwitchCmd("disable"), c.modelSwitchCmd("enable"))
}

// modelSwitchCmd switches a model off or back on for the whole fleet.
func (c *cli) modelSwitchCmd(action string) *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:     action + " MODEL",
		Short:   "switch a model off fleet-wide: its profiles take no new turn (POST /models/{id}/disable)",
		Example: "  crewlet models disable gpt-4o --reason \"provider incident\"",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var sw crewlet.ModelSwitch
			path := "/models/" + url.PathEscape(pos[0]) + "/" + action
			if err := c.client().call(cmd.Context(), http.MethodPost, path, api.ModelSwitchRequest{Reason: reason, By: by}, &sw); err != nil {
				return err
			}
			state := "enabled"
			if sw.Disabled {
				state = "disabled; its profiles take no new turn and turns on them fail over"
			}
			fmt.Fprintf(c.stdout, "model %s %s (by %s)\n", sw.Model, state, sw.By)
			return nil
		},
	}
	if action == "enable" {
		cmd.Short = "switch it back on; turns waiting for it run (POST /models/{id}/enable)"
		cmd.Example = "  crewlet models enable gpt-4o"
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why (recorded with the switch)")
	cmd.Flags().StringVar(&by, "by", "", "who is asking; defaults to the token's principal")
	return cmd
}
