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

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/wire"
)

// askCmd opens a ticket (POST /tickets) and, with --wait, prints its reply.
func (c *cli) askCmd() *cobra.Command {
	var wait time.Duration
	var from, conv string
	cmd := &cobra.Command{
		Use:   "ask TARGET TASK",
		Short: "open a ticket to a seat or role:NAME and print its reply; --wait 0 returns once it is open (POST /tickets)",
		Example: "  crewlet ask cto \"review the launch plan\" --from alice\n" +
			"  crewlet ask role:engineer \"fix the flaky test\" --wait 0",
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, pos []string) error {
			req := api.OpenTicketRequest{To: pos[0], Task: pos[1], From: from, Conversation: conv}
			if wait > 0 {
				req.Wait = wait.String()
			}
			var t crewlet.Ticket
			if err := c.client().call(cmd.Context(), http.MethodPost, "/tickets", req, &t); err != nil {
				return err
			}
			switch t.Phase {
			case crewlet.TicketDone:
				fmt.Fprintf(c.stdout, "%s (ticket %s): %s\n", t.To, t.ID, t.Reply)
			case crewlet.TicketPending, crewlet.TicketAsking:
				fmt.Fprintf(c.stdout, "ticket %s to %s is %s; `crewlet tickets show %s` follows it\n", t.ID, t.To, t.Phase, t.ID)
			default:
				return fmt.Errorf("ticket %s to %s %s: %s", t.ID, t.To, t.Phase, t.Reason)
			}
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the ticket to end (at most 10m); 0 returns once it is open")
	cmd.Flags().StringVar(&from, "from", "", "ask as this human seat (its inbox gets the notice)")
	cmd.Flags().StringVar(&conv, "conversation", "", "the conversation the ticket belongs to")
	return cmd
}

func ticketPath(id string, rest string) string { return "/tickets/" + url.PathEscape(id) + rest }

func (c *cli) ticketsCmd() *cobra.Command {
	return group("tickets", "the tickets seats and people open: list, show, answer, cancel",
		c.ticketsLsCmd(), c.ticketShowCmd(), c.ticketCostCmd(), c.ticketAnswerCmd(), c.ticketCancelCmd())
}

func (c *cli) ticketsLsCmd() *cobra.Command {
	var from, to, phase string
	var open bool
	var limit int
	cmd := readCommand(c, &cobra.Command{
		Use: "ls", Short: "tickets, newest first (GET /tickets)",
		Example: "  crewlet tickets ls --open\n  crewlet tickets ls --from alice -o json", Args: noArgs,
	}, func([]string) (string, error) {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		for k, v := range map[string]string{"from": from, "to": to, "phase": phase} {
			if v != "" {
				q.Set(k, v)
			}
		}
		if open {
			q.Set("open", "true")
		}
		return "/tickets?" + q.Encode(), nil
	}, printTickets)
	cmd.Flags().StringVar(&from, "from", "", "only tickets this seat or person opened")
	cmd.Flags().StringVar(&to, "to", "", "only tickets this seat serves")
	cmd.Flags().StringVar(&phase, "phase", "", "only tickets in this phase (pending, asking, done, failed, cancelled, expired)")
	cmd.Flags().BoolVar(&open, "open", false, "only pending and asking tickets")
	cmd.Flags().IntVar(&limit, "limit", 50, "how many of the newest to show")
	return cmd
}

func printTickets(w io.Writer, tickets []api.ListedTicket) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFROM\tTO\tPHASE\tOPENED\tCOST\tTASK")
	for _, t := range tickets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.From, t.To, t.Phase, t.CreatedAt.Format(time.RFC3339), costText(t.Cost), crewlet.OneLine(t.Task, 59))
	}
	return tw.Flush()
}

func (c *cli) ticketShowCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "show ID", Short: "one ticket (GET /tickets/{id})",
		Example: "  crewlet tickets show tk-0123", Args: exactArgs(1),
	}, func(args []string) (string, error) { return ticketPath(args[0], ""), nil },
		func(w io.Writer, t api.TicketView) error { return printJSON(w, t) })
}

// ticketCostCmd prints what a ticket cost down its chain of delegation.
func (c *cli) ticketCostCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "cost ID", Short: "what a ticket cost: its serving turns and every sub-ticket under it, as a tree (GET /tickets/{id})",
		Example: "  crewlet tickets cost t-0123abcd4567\n  crewlet tickets cost t-0123abcd4567 -o json | jq .cost_chain", Args: exactArgs(1),
	}, func(args []string) (string, error) { return ticketPath(args[0], ""), nil }, printTicketCost)
}

func printTicketCost(w io.Writer, v api.TicketView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TICKET\tTO\tPHASE\tOWN\tWITH SUB-TICKETS\tROUNDS")
	for _, l := range v.CostChain {
		own := costText(l.Own)
		if l.Remote {
			own = "remote (not counted)"
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%d\n", strings.Repeat("  ", l.Depth), l.Ticket, l.To, l.Phase, own, costText(l.Total), l.Total.Rounds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	t := v.Cost
	fmt.Fprintf(w, "\ncost: %s over %d model calls (tokens in %d, of them cached %d; out %d)%s\n",
		usd(t.NanoUSD), t.Rounds, t.InputTokens, t.CachedTokens, t.OutputTokens, unpricedNote(t.UnpricedTokens))
	if v.ChainTruncated {
		fmt.Fprintln(w, "the chain is longer than shown: the cost counts the tickets listed only")
	}
	return nil
}

// costText is a cost in dollars, with a mark when some of it is unpriced.
func costText(c crewlet.Cost) string {
	if c.UnpricedTokens > 0 {
		return usd(c.NanoUSD) + "+unpriced"
	}
	return usd(c.NanoUSD)
}

func (c *cli) ticketAnswerCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "answer ID TEXT",
		Short:   "answer the question on a ticket you delegated (POST /tickets/{id}/answer)",
		Example: "  crewlet tickets answer tk-0123 \"use the staging database\"",
		Args:    exactArgs(2),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var t crewlet.Ticket
			if err := c.client().call(cmd.Context(), http.MethodPost, ticketPath(pos[0], "/answer"), api.AnswerTicketRequest{Text: pos[1]}, &t); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "answered on ticket %s; %s goes on with it\n", t.ID, t.To)
			return nil
		},
	}
}

func (c *cli) ticketCancelCmd() *cobra.Command {
	var reason, by string
	cmd := &cobra.Command{
		Use:     "cancel ID",
		Short:   "cancel an open ticket you delegated; an admin may any (POST /tickets/{id}/cancel)",
		Example: "  crewlet tickets cancel tk-0123 --reason \"no longer needed\"",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var t crewlet.Ticket
			if err := c.client().call(cmd.Context(), http.MethodPost, ticketPath(pos[0], "/cancel"), api.CancelTicketRequest{Reason: reason, By: by}, &t); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "ticket %s cancelled: %s\n", t.ID, t.Reason)
			return nil
		},
	}
	cmd.Flags().StringVar(&reason, "reason", "", "why, for the delegator")
	cmd.Flags().StringVar(&by, "by", "", "who cancels it")
	return cmd
}

func (c *cli) auditCmd() *cobra.Command {
	var principal, outcome string
	var limit int
	cmd := readCommand(c, &cobra.Command{
		Use: "audit", Short: "the API's audit log, newest first (admin; GET /audit)",
		Example: "  crewlet audit --principal vic\n  crewlet audit --outcome denied -o json", Args: noArgs,
	}, func([]string) (string, error) {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if principal != "" {
			q.Set("principal", principal)
		}
		if outcome != "" {
			q.Set("outcome", outcome)
		}
		return "/audit?" + q.Encode(), nil
	}, printAudit)
	cmd.Flags().StringVar(&principal, "principal", "", "only this principal's actions")
	cmd.Flags().StringVar(&outcome, "outcome", "", "only allowed, denied or failed actions")
	cmd.Flags().IntVar(&limit, "limit", 50, "how many of the newest to show")
	return cmd
}

func printAudit(w io.Writer, rows []wire.AuditEntry) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tPRINCIPAL\tROLE\tACTION\tTARGET\tOUTCOME\tSTATUS\tREQUEST\tREASON")
	for _, e := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Principal, e.Role, e.Action,
			e.Target, e.Outcome, e.Status, e.RequestID, crewlet.OneLine(e.Reason, 79))
	}
	return tw.Flush()
}
