package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
)

// runApprovals is `crewlet approvals ls|approve|deny`.
func runApprovals(ctx context.Context, args []string, stdout io.Writer) error {
	usage := "usage: crewlet approvals ls | approvals approve ID [--remember [--args] --until T] | approvals deny ID --reason TEXT"
	if len(args) == 0 {
		return usageError{usage}
	}
	switch args[0] {
	case "ls":
		return runApprovalsList(ctx, args[1:], stdout)
	case "approve":
		return runApprovalDecide(ctx, true, args[1:], stdout)
	case "deny":
		return runApprovalDecide(ctx, false, args[1:], stdout)
	}
	return usageError{fmt.Sprintf("unknown approvals command %q; use ls, approve or deny", args[0])}
}

// runApprovalsList is `crewlet approvals ls` (GET /approvals).
func runApprovalsList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("approvals ls", flag.ContinueOnError)
	base := apiFlag(fs)
	seat := fs.String("seat", "", "only this seat's calls")
	status := fs.String("status", "", "pending (the default), approved, denied, superseded or all")
	limit := fs.Int("limit", 50, "how many of the newest to show")
	if _, err := parseFlags(fs, args, 0, "crewlet approvals ls [--seat H] [--status S] [--limit N]"); err != nil {
		return err
	}
	q := url.Values{"limit": {fmt.Sprint(*limit)}}
	for k, v := range map[string]string{"seat": *seat, "status": *status} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var list []crewlet.Approval
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/approvals?"+q.Encode(), nil, &list); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSEAT\tTOOL\tSTATUS\tBY\tUNTIL\tARGS")
	for _, a := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Handle, a.Tool, a.Status, a.DecidedBy, a.Until.Format(time.RFC3339), crewlet.OneLine(a.Args, 59))
	}
	return tw.Flush()
}

// runApprovalDecide is `crewlet approvals approve|deny ID`
// (POST /approvals/{id}/approve|deny).
func runApprovalDecide(ctx context.Context, approve bool, args []string, stdout io.Writer) error {
	verb, synopsis := "deny", "crewlet approvals deny ID --reason TEXT"
	if approve {
		verb, synopsis = "approve", "crewlet approvals approve ID [--reason TEXT] [--remember [--args] --until T]"
	}
	fs := flag.NewFlagSet("approvals "+verb, flag.ContinueOnError)
	base := apiFlag(fs)
	reason := fs.String("reason", "", "why; a denial's reason is the model's tool result")
	var remember, args1 *bool
	var until *string
	if approve {
		remember = fs.Bool("remember", false, "let the seat call this tool again without asking until --until")
		args1 = fs.Bool("args", false, "with --remember: only with these exact arguments")
		until = fs.String("until", "", "with --remember: until when, RFC 3339 (2026-12-03T18:00:00Z) or a duration from now (8h)")
	}
	pos, err := parseFlags(fs, args, 1, synopsis)
	if err != nil {
		return err
	}
	body := wire.ApprovalDecision{Reason: *reason}
	if approve && *remember {
		t, err := parseUntil(*until)
		if err != nil {
			return usageError{fmt.Sprintf("--until: %v; usage: %s", err, synopsis)}
		}
		body.Remember = &wire.ApprovalRemember{Args: *args1, Until: t}
	} else if approve && (*args1 || *until != "") {
		return usageError{"--args and --until go with --remember; usage: " + synopsis}
	}
	var a crewlet.Approval
	if err := newAPIClient(*base).call(ctx, http.MethodPost, "/approvals/"+url.PathEscape(pos[0])+"/"+verb, body, &a); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "approval %s (%s's call of %s) %s by %s\n", a.ID, a.Handle, a.Tool, a.Status, a.DecidedBy)
	return nil
}

// parseUntil reads a time as RFC 3339 or as a duration from now.
func parseUntil(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, fmt.Errorf("required with --remember")
	}
	if d, err := time.ParseDuration(s); err == nil {
		return time.Now().Add(d), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time nor a duration", s)
	}
	return t, nil
}
