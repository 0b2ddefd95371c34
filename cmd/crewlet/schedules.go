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
	"time"

	"github.com/crewlet/crewlet/internal/wire"
)

const schedulesUsage = "usage: crewlet schedules ls | show NAME | trigger NAME | pause NAME | unpause NAME | backfill NAME --from T --to T"

func runSchedules(ctx context.Context, args []string, stdout io.Writer) error {
	if len(args) == 0 {
		return usageError{schedulesUsage}
	}
	switch args[0] {
	case "ls":
		return runSchedulesList(ctx, args[1:], stdout)
	case "show":
		return runScheduleShow(ctx, args[1:], stdout)
	case "trigger":
		return runScheduleTrigger(ctx, args[1:], stdout)
	case "pause", "unpause":
		return runSchedulePause(ctx, args[0], args[1:], stdout)
	case "backfill":
		return runScheduleBackfill(ctx, args[1:], stdout)
	}
	return usageError{fmt.Sprintf("unknown schedules command %q; use ls, show, trigger, pause, unpause or backfill", args[0])}
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

func runSchedulesList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("schedules ls", flag.ContinueOnError)
	base := apiFlag(fs)
	if _, err := parseFlags(fs, args, 0, "crewlet schedules ls [--api URL]"); err != nil {
		return err
	}
	var list []wire.Schedule
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/schedules", nil, &list); err != nil {
		return err
	}
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

func runScheduleShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("schedules show", flag.ContinueOnError)
	base := apiFlag(fs)
	limit := fs.Int("limit", 20, "the most recorded fires to list")
	pos, err := parseFlags(fs, args, 1, "crewlet schedules show NAME [--limit N] [--api URL]")
	if err != nil {
		return err
	}
	var d wire.ScheduleDetail
	if err := newAPIClient(*base).call(ctx, http.MethodGet, fmt.Sprintf("%s?limit=%d", schedulePath(pos[0]), *limit), nil, &d); err != nil {
		return err
	}
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

func runScheduleTrigger(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("schedules trigger", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet schedules trigger NAME [--api URL]")
	if err != nil {
		return err
	}
	var out wire.ScheduleAction
	if err := newAPIClient(*base).call(ctx, http.MethodPost, schedulePath(pos[0], "/trigger"), nil, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schedule %s fires now (under its overlap policy)\n", out.Name)
	return nil
}

func runSchedulePause(ctx context.Context, verb string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("schedules "+verb, flag.ContinueOnError)
	base := apiFlag(fs)
	reason := fs.String("reason", "", "why, recorded in the schedule's note")
	pos, err := parseFlags(fs, args, 1, "crewlet schedules "+verb+" NAME [--reason TEXT] [--api URL]")
	if err != nil {
		return err
	}
	var out wire.ScheduleAction
	if err := newAPIClient(*base).call(ctx, http.MethodPost, schedulePath(pos[0], "/"+verb), wire.ScheduleNote{Reason: *reason}, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schedule %s %s\n", out.Name, out.Action)
	return nil
}

func runScheduleBackfill(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("schedules backfill", flag.ContinueOnError)
	base := apiFlag(fs)
	from := fs.String("from", "", "the range's start, RFC 3339 (2026-01-02T09:00:00Z)")
	to := fs.String("to", "", "the range's end, RFC 3339; not in the future")
	synopsis := "crewlet schedules backfill NAME --from T --to T [--api URL]"
	pos, err := parseFlags(fs, args, 1, synopsis)
	if err != nil {
		return err
	}
	var body wire.ScheduleBackfill
	if body.From, err = time.Parse(time.RFC3339, *from); err != nil {
		return usageError{fmt.Sprintf("--from %q is not an RFC 3339 time; usage: %s", *from, synopsis)}
	}
	if body.To, err = time.Parse(time.RFC3339, *to); err != nil {
		return usageError{fmt.Sprintf("--to %q is not an RFC 3339 time; usage: %s", *to, synopsis)}
	}
	var out wire.ScheduleAction
	if err := newAPIClient(*base).call(ctx, http.MethodPost, schedulePath(pos[0], "/backfill"), body, &out); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schedule %s: the fires due from %s to %s run now, one after another\n", out.Name, body.From.Format(time.RFC3339), body.To.Format(time.RFC3339))
	return nil
}
