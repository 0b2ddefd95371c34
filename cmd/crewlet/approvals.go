package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
)

func (c *cli) approvalsCmd() *cobra.Command {
	return group("approvals", "gated tool calls: list, approve, deny", c.approvalsLsCmd(), c.approvalDecideCmd(true), c.approvalDecideCmd(false))
}

func (c *cli) approvalsLsCmd() *cobra.Command {
	var seat, status string
	var limit int
	cmd := readCommand(c, &cobra.Command{
		Use: "ls", Short: "tool calls waiting for a decision (GET /approvals)",
		Example: "  crewlet approvals ls\n  crewlet approvals ls --seat cto --status all -o json", Args: noArgs,
	}, func([]string) (string, error) {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		for k, v := range map[string]string{"seat": seat, "status": status} {
			if v != "" {
				q.Set(k, v)
			}
		}
		return "/approvals?" + q.Encode(), nil
	}, printApprovals)
	cmd.Flags().StringVar(&seat, "seat", "", "only this seat's calls")
	cmd.Flags().StringVar(&status, "status", "", "pending (the default), approved, denied, superseded or all")
	cmd.Flags().IntVar(&limit, "limit", 50, "how many of the newest to show")
	return cmd
}

func printApprovals(w io.Writer, list []crewlet.Approval) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSEAT\tTOOL\tSTATUS\tBY\tUNTIL\tARGS")
	for _, a := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Handle, a.Tool, a.Status, a.DecidedBy, a.Until.Format(time.RFC3339), crewlet.OneLine(a.Args, 59))
	}
	return tw.Flush()
}

// approvalDecideCmd is `crewlet approvals approve|deny ID`.
func (c *cli) approvalDecideCmd(approve bool) *cobra.Command {
	var reason, until string
	var remember, sameArgs bool
	cmd := &cobra.Command{
		Use:     "deny ID",
		Short:   `deny a gated tool call; the model gets "denied by YOU: TEXT" (POST /approvals/{id}/deny)`,
		Example: "  crewlet approvals deny ap-0123 --reason \"wrong customer\"",
		Args:    exactArgs(1),
	}
	verb := "deny"
	if approve {
		verb = "approve"
		cmd.Use = "approve ID"
		cmd.Short = "approve a gated tool call, and with --remember stop asking until --until (POST /approvals/{id}/approve)"
		cmd.Example = "  crewlet approvals approve ap-0123\n  crewlet approvals approve ap-0123 --remember --until 8h"
		cmd.Flags().BoolVar(&remember, "remember", false, "let the seat call this tool again without asking until --until")
		cmd.Flags().BoolVar(&sameArgs, "args", false, "with --remember: only with these exact arguments")
		cmd.Flags().StringVar(&until, "until", "", "with --remember: until when, RFC 3339 (2026-12-03T18:00:00Z) or a duration from now (8h)")
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why; a denial's reason is the model's tool result")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		body := wire.ApprovalDecision{Reason: reason}
		if remember {
			t, err := parseUntil(until)
			if err != nil {
				return usageErrorf(cmd, "--until: %v", err)
			}
			body.Remember = &wire.ApprovalRemember{Args: sameArgs, Until: t}
		} else if sameArgs || until != "" {
			return usageErrorf(cmd, "--args and --until go with --remember")
		}
		var a crewlet.Approval
		if err := c.client().call(cmd.Context(), http.MethodPost, "/approvals/"+url.PathEscape(pos[0])+"/"+verb, body, &a); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "approval %s (%s's call of %s) %s by %s\n", a.ID, a.Handle, a.Tool, a.Status, a.DecidedBy)
		return nil
	}
	return cmd
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
