package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet/internal/wire"
)

func (c *cli) schedulesCmd() *cobra.Command {
	return group("schedules", "the org's schedules: list, show, trigger, pause, unpause, backfill",
		c.schedulesLsCmd(), c.scheduleShowCmd(), c.scheduleTriggerCmd(), c.schedulePauseCmd("pause"), c.schedulePauseCmd("unpause"), c.scheduleBackfillCmd())
}

func schedulePath(name string, rest ...string) string {
	return "/schedules/" + url.PathEscape(name) + strings.Join(rest, "")
}

// scheduleWhen is a schedule's spec as one word: its cron or its interval.
func scheduleWhen(s wire.Schedule) string {
	if s.Cron != "" {
		return s.Cron
	}
	return "every " + s.Every
}

func nextFire(s wire.Schedule) string {
	if len(s.NextFires) == 0 {
		return "-"
	}
	return s.NextFires[0].Local().Format(time.RFC3339)
}

// shownNextFires is how many of the next fires `schedules show` prints.
const shownNextFires = 3

func (c *cli) schedulesLsCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "ls", Short: "the org's schedules: when, target, overlap, paused, fires, skipped, next fire (GET /schedules)",
		Example: "  crewlet schedules ls", Args: noArgs,
	}, fixedPath("/schedules"), printSchedules)
}

func printSchedules(stdout io.Writer, list []wire.Schedule) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tWHEN\tZONE\tTO\tOVERLAP\tPAUSED\tFIRES\tSKIPPED\tNEXT")
	for _, s := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%v\t%d\t%d\t%s\n", s.Name, scheduleWhen(s), s.Timezone, s.To, s.Overlap, s.Paused, s.Fires, s.Skipped, nextFire(s))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, s := range list {
		if s.Error != "" {
			fmt.Fprintf(stdout, "%s: %s\n", s.Name, s.Error)
		}
	}
	return nil
}

func (c *cli) scheduleShowCmd() *cobra.Command {
	var limit int
	cmd := readCommand(c, &cobra.Command{
		Use: "show NAME", Short: "one schedule and its fire history: recent, running and recorded fires, skips (GET /schedules/{name})",
		Example: "  crewlet schedules show nightly-report --limit 5", Args: exactArgs(1),
	}, func(args []string) (string, error) {
		return fmt.Sprintf("%s?limit=%d", schedulePath(args[0]), limit), nil
	}, printSchedule)
	cmd.Flags().IntVar(&limit, "limit", 20, "the most recorded fires to list")
	return cmd
}

func printSchedule(stdout io.Writer, d wire.ScheduleDetail) error {
	fmt.Fprintf(stdout, "schedule %s (%s)\n  when:     %s (%s)", d.Name, d.ID, scheduleWhen(d.Schedule), d.Timezone)
	if d.Jitter != "" {
		fmt.Fprintf(stdout, ", jitter %s", d.Jitter)
	}
	fmt.Fprintf(stdout, "\n  to:       %s\n  text:     %s\n  overlap:  %s, catch-up window %s\n", d.To, d.Text, d.Overlap, d.CatchupWindow)
	fmt.Fprintf(stdout, "  paused:   %v", d.Paused)
	if d.Note != "" {
		fmt.Fprintf(stdout, " (%s)", d.Note)
	}
	fmt.Fprintf(stdout, "\n  fires:    %d started, %d skipped for overlap, %d missed the catch-up window\n", d.Fires, d.Skipped, d.MissedCatchup)
	if d.Error != "" {
		fmt.Fprintf(stdout, "  temporal: %s\n", d.Error)
	}
	for i, t := range d.NextFires {
		if i == shownNextFires {
			break
		}
		fmt.Fprintf(stdout, "  next:     %s\n", t.Local().Format(time.RFC3339))
	}
	for _, id := range d.Running {
		fmt.Fprintf(stdout, "  running:  %s\n", id)
	}
	if len(d.History) > 0 {
		fmt.Fprintln(stdout, "history (newest first):")
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  FIRE TIME\tSEAT\tANSWERED\tSKIPPED BEFORE\tEVENT")
		for _, f := range d.History {
			answered := "-"
			if f.HandledAt != nil {
				answered = f.HandledAt.Sub(f.FiredAt).Round(time.Millisecond).String() + " after"
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%s\n", f.FireTime.Local().Format(time.RFC3339), f.Seat, answered, f.SkippedBefore, f.EventID)
		}
		return tw.Flush()
	}
	return nil
}

func (c *cli) scheduleTriggerCmd() *cobra.Command {
	return &cobra.Command{
		Use: "trigger NAME", Short: "fire a schedule now (POST /schedules/{name}/trigger)",
		Example: "  crewlet schedules trigger nightly-report", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var out wire.ScheduleAction
			if err := c.client().call(cmd.Context(), http.MethodPost, schedulePath(pos[0], "/trigger"), nil, &out); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "schedule %s fires now (under its overlap policy)\n", out.Name)
			return nil
		},
	}
}

func (c *cli) schedulePauseCmd(verb string) *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use: verb + " NAME", Short: "stop a schedule's fires (POST /schedules/{name}/pause)",
		Example: "  crewlet schedules pause nightly-report --reason \"holiday\"", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var out wire.ScheduleAction
			if err := c.client().call(cmd.Context(), http.MethodPost, schedulePath(pos[0], "/"+verb), wire.ScheduleNote{Reason: reason}, &out); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "schedule %s %s\n", out.Name, out.Action)
			return nil
		},
	}
	if verb == "unpause" {
		cmd.Short, cmd.Example = "restart a schedule's fires (POST /schedules/{name}/unpause)", "  crewlet schedules unpause nightly-report"
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded in the schedule's note")
	return cmd
}

func (c *cli) scheduleBackfillCmd() *cobra.Command {
	var from, to string
	cmd := &cobra.Command{
		Use: "backfill NAME", Short: "run the fires due in a past range, each answered once (POST /schedules/{name}/backfill)",
		Example: "  crewlet schedules backfill nightly-report --from 2026-01-02T00:00:00Z --to 2026-01-05T00:00:00Z", Args: exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var body wire.ScheduleBackfill
			var err error
			if body.From, err = time.Parse(time.RFC3339, from); err != nil {
				return usageErrorf(cmd, "--from %q is not an RFC 3339 time", from)
			}
			if body.To, err = time.Parse(time.RFC3339, to); err != nil {
				return usageErrorf(cmd, "--to %q is not an RFC 3339 time", to)
			}
			var out wire.ScheduleAction
			if err := c.client().call(cmd.Context(), http.MethodPost, schedulePath(pos[0], "/backfill"), body, &out); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "schedule %s: the fires due from %s to %s run now, one after another\n", out.Name, body.From.Format(time.RFC3339), body.To.Format(time.RFC3339))
			return nil
		},
	}
	cmd.Flags().StringVar(&from, "from", "", "the range's start, RFC 3339 (2026-01-02T09:00:00Z)")
	cmd.Flags().StringVar(&to, "to", "", "the range's end, RFC 3339; not in the future")
	return cmd
}
