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
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/wire"
)

// runAsk opens a ticket (POST /tickets) and, with --wait, prints its reply.
func runAsk(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("ask", flag.ContinueOnError)
	base := apiFlag(fs)
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the ticket to end (at most 10m); 0 returns once it is open")
	from := fs.String("from", "", "ask as this human seat (its inbox gets the notice)")
	conv := fs.String("conversation", "", "the conversation the ticket belongs to")
	pos, err := parseFlags(fs, args, 2, "crewlet ask TARGET TASK [--wait D] [--from SEAT] [--conversation ID]  (TARGET: a seat or role:NAME)")
	if err != nil {
		return err
	}
	req := api.OpenTicketRequest{To: pos[0], Task: pos[1], From: *from, Conversation: *conv}
	if *wait > 0 {
		req.Wait = wait.String()
	}
	var t crewlet.Ticket
	if err := newAPIClient(*base).call(ctx, http.MethodPost, "/tickets", req, &t); err != nil {
		return err
	}
	switch t.Phase {
	case crewlet.TicketDone:
		fmt.Fprintf(stdout, "%s (ticket %s): %s\n", t.To, t.ID, t.Reply)
	case crewlet.TicketPending, crewlet.TicketAsking:
		fmt.Fprintf(stdout, "ticket %s to %s is %s; `crewlet tickets show %s` follows it\n", t.ID, t.To, t.Phase, t.ID)
	default:
		return fmt.Errorf("ticket %s to %s %s: %s", t.ID, t.To, t.Phase, t.Reason)
	}
	return nil
}

func ticketPath(id string, rest string) string { return "/tickets/" + url.PathEscape(id) + rest }

// runTicketsList is `crewlet tickets ls` (GET /tickets).
func runTicketsList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tickets ls", flag.ContinueOnError)
	base := apiFlag(fs)
	from := fs.String("from", "", "only tickets this seat or person opened")
	to := fs.String("to", "", "only tickets this seat serves")
	phase := fs.String("phase", "", "only tickets in this phase (pending, asking, done, failed, cancelled, expired)")
	open := fs.Bool("open", false, "only pending and asking tickets")
	limit := fs.Int("limit", 50, "how many of the newest to show")
	if _, err := parseFlags(fs, args, 0, "crewlet tickets ls [--from H] [--to H] [--phase P] [--open] [--limit N]"); err != nil {
		return err
	}
	q := url.Values{"limit": {fmt.Sprint(*limit)}}
	for k, v := range map[string]string{"from": *from, "to": *to, "phase": *phase} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *open {
		q.Set("open", "true")
	}
	var tickets []crewlet.Ticket
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/tickets?"+q.Encode(), nil, &tickets); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tFROM\tTO\tPHASE\tOPENED\tTASK")
	for _, t := range tickets {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.From, t.To, t.Phase, t.CreatedAt.Format(time.RFC3339), crewlet.OneLine(t.Task, 59))
	}
	return tw.Flush()
}

// runTicketShow is `crewlet tickets show ID` (GET /tickets/{id}).
func runTicketShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tickets show", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet tickets show ID")
	if err != nil {
		return err
	}
	var t crewlet.Ticket
	if err := newAPIClient(*base).call(ctx, http.MethodGet, ticketPath(pos[0], ""), nil, &t); err != nil {
		return err
	}
	return printJSON(stdout, t)
}

// runTicketAnswer is `crewlet tickets answer ID TEXT` (POST /tickets/{id}/answer).
func runTicketAnswer(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tickets answer", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 2, "crewlet tickets answer ID TEXT")
	if err != nil {
		return err
	}
	var t crewlet.Ticket
	if err := newAPIClient(*base).call(ctx, http.MethodPost, ticketPath(pos[0], "/answer"), api.AnswerTicketRequest{Text: pos[1]}, &t); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "answered on ticket %s; %s goes on with it\n", t.ID, t.To)
	return nil
}

// runTicketCancel is `crewlet tickets cancel ID` (POST /tickets/{id}/cancel).
func runTicketCancel(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("tickets cancel", flag.ContinueOnError)
	base := apiFlag(fs)
	reason := fs.String("reason", "", "why, for the delegator")
	by := fs.String("by", "", "who cancels it")
	pos, err := parseFlags(fs, args, 1, "crewlet tickets cancel ID [--reason TEXT] [--by NAME]")
	if err != nil {
		return err
	}
	var t crewlet.Ticket
	if err := newAPIClient(*base).call(ctx, http.MethodPost, ticketPath(pos[0], "/cancel"), api.CancelTicketRequest{Reason: *reason, By: *by}, &t); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ticket %s cancelled: %s\n", t.ID, t.Reason)
	return nil
}

// runAudit is `crewlet audit` (GET /audit, admin).
func runAudit(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("audit", flag.ContinueOnError)
	base := apiFlag(fs)
	principal := fs.String("principal", "", "only this principal's actions")
	outcome := fs.String("outcome", "", "only allowed, denied or failed actions")
	limit := fs.Int("limit", 50, "how many of the newest to show")
	if _, err := parseFlags(fs, args, 0, "crewlet audit [--principal NAME] [--outcome O] [--limit N]"); err != nil {
		return err
	}
	q := url.Values{"limit": {fmt.Sprint(*limit)}}
	if *principal != "" {
		q.Set("principal", *principal)
	}
	if *outcome != "" {
		q.Set("outcome", *outcome)
	}
	var rows []wire.AuditEntry
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/audit?"+q.Encode(), nil, &rows); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AT\tPRINCIPAL\tROLE\tACTION\tTARGET\tOUTCOME\tSTATUS\tREQUEST\tREASON")
	for _, e := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", e.At.UTC().Format(time.RFC3339), e.Principal, e.Role, e.Action,
			e.Target, e.Outcome, e.Status, e.RequestID, crewlet.OneLine(e.Reason, 79))
	}
	return tw.Flush()
}
