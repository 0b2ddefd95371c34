package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet/internal/events"
)

// watchReconnect is how long watch waits before it reconnects a dropped
// stream.
const watchReconnect = time.Second

// watchCmd prints a seat's or a conversation's live events as they come,
// one line each, and reconnects a dropped stream from the last event it
// printed, until Ctrl-C.
func (c *cli) watchCmd() *cobra.Command {
	var conversation, after string
	cmd := &cobra.Command{
		Use: "watch HANDLE | watch --conversation ID",
		Short: "print a seat's or a conversation's live events as they come, one line each; reconnects from the last one on a dropped connection, " +
			"Ctrl-C stops (GET /seats/{handle}/stream, GET /conversations/{id}/stream)",
		Example: "  crewlet watch cto\n  crewlet watch --conversation conv-1234 -o json",
		Args: func(cmd *cobra.Command, args []string) error {
			if conversation != "" {
				return exactArgs(0)(cmd, args)
			}
			return exactArgs(1)(cmd, args)
		},
	}
	out := outputFlag(cmd)
	jsonAliasFlag(cmd)
	cmd.Flags().StringVar(&conversation, "conversation", "", "watch this conversation instead of a seat")
	cmd.Flags().StringVar(&after, "after", "", "start after this event id (from an earlier watch) instead of now")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		asJSON, err := out.json(cmd)
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		path := "/conversations/" + url.PathEscape(conversation) + "/stream"
		if len(pos) == 1 {
			path = seatPath(pos[0], "/stream")
		}
		client := c.client()
		if client.err != nil {
			return client.err
		}
		client.http.Timeout = 0 // a stream has no end to time out on
		last := after
		for {
			err := client.watch(ctx, path, &last, func(ev events.Event) {
				printEvent(c.stdout, ev, asJSON)
			})
			var ae *apiError
			switch {
			case ctx.Err() != nil:
				return nil
			case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized && client.refreshLocalToken():
				// The API restarted with a new local token; go on with it.
			case errors.As(err, &ae) && ae.Status != http.StatusServiceUnavailable:
				return err
			}
			fmt.Fprintf(c.stderr, "crewlet: stream dropped (%v); reconnecting after %s\n", err, last)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(watchReconnect):
			}
		}
	}
	return cmd
}

// watch reads one connection of a stream, from after *last, calling each
// event and moving *last past it, until the stream ends.
func (c *apiClient) watch(ctx context.Context, path string, last *string, each func(events.Event)) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return fmt.Errorf("bad --api URL %q: %w", c.base, err)
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last != "" {
		req.Header.Set("Last-Event-ID", *last)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the crewlet API at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		e := &apiError{Status: resp.StatusCode}
		data, _ := io.ReadAll(resp.Body)
		if json.Unmarshal(data, e) != nil || e.Detail == "" {
			e.Code, e.Detail = http.StatusText(resp.StatusCode), strings.TrimSpace(string(data))
		}
		return e
	}
	return readSSE(resp.Body, func(id, data string) {
		var ev events.Event
		if json.Unmarshal([]byte(data), &ev) != nil {
			return
		}
		ev.ID = id
		*last = id
		each(ev)
	})
}

// readSSE calls each for every event of a Server-Sent Events body that
// has data, with its id; comments and the retry field are skipped.
func readSSE(body io.Reader, each func(id, data string)) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	var id string
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if len(data) > 0 {
				each(id, strings.Join(data, "\n"))
			}
			id, data = "", nil
		case strings.HasPrefix(line, "id: "):
			id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return io.ErrUnexpectedEOF
}

// printEvent prints one event on a line: time, seat, kind and what it
// says.
func printEvent(w io.Writer, ev events.Event, asJSON bool) {
	if asJSON {
		data, _ := json.Marshal(ev)
		fmt.Fprintf(w, "%s\n", data)
		return
	}
	d := ev.Data
	var what string
	switch ev.Kind {
	case events.TurnStarted:
		what = fmt.Sprintf("%d triggers", d.Triggers)
		if len(d.Conversations) > 0 {
			what += " in " + strings.Join(d.Conversations, ", ")
		}
	case events.RoundStarted:
		what = fmt.Sprintf("thread %d round %d on %s, %d tokens so far", d.Thread, d.Round, d.Profile, d.TokensSoFar)
	case events.ModelDelta:
		what = fmt.Sprintf("%q", d.Text)
	case events.ModelOutput:
		what = fmt.Sprintf("round %d: %q", d.Round, d.Text)
		if len(d.Tools) > 0 {
			what += " calls " + strings.Join(d.Tools, ", ")
		}
	case events.ToolStarted:
		what = fmt.Sprintf("%s %s", d.Tool, d.Args)
	case events.ToolFinished:
		what = fmt.Sprintf("%s %s: %q", d.Tool, d.Outcome, d.Result)
	case events.TicketOpened, events.TicketSettled:
		what = fmt.Sprintf("%s %s %s", d.Ticket, d.To, d.Phase)
	case events.ApprovalWaiting:
		what = fmt.Sprintf("%s %s for %s", d.Approval, d.Tool, strings.Join(d.Approvers, ", "))
	case events.ApprovalDecided:
		what = fmt.Sprintf("%s %s by %s %s", d.Approval, d.Decision, d.By, d.Reason)
	case events.AnswerSent:
		what = fmt.Sprintf("to %s: %q", d.To, d.Text)
	case events.TurnFinished:
		what = fmt.Sprintf("%s after %d rounds %s", d.Status, d.Rounds, d.Note)
	}
	if d.Redacted {
		what += " [words withheld]"
	}
	fmt.Fprintf(w, "%s  %s  %-14s %s  (id %s)\n", ev.Time.Local().Format("15:04:05.000"), ev.Seat, ev.Kind, strings.TrimSpace(what), ev.ID)
}
