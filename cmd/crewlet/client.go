package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/wire"
)

// apiClient calls the crewlet REST API.
type apiClient struct {
	base  string
	token string
	// local says token is the local token an API on this machine minted,
	// read from its file: a new one after the API restarts.
	local bool
	http  *http.Client
	// err is why the client could not be set up (an unreadable --ca or
	// local token), returned by its first call.
	err error
}

func newAPIClient(base, token, ca string) *apiClient {
	c := &apiClient{base: strings.TrimRight(base, "/"), token: token}
	var tokenErr, caErr error
	if c.token == "" {
		c.token, tokenErr = readLocalToken(c.base)
		c.local = c.token != ""
	}
	c.http, caErr = apiHTTPClient(ca)
	c.err = errors.Join(tokenErr, caErr)
	return c
}

// refreshLocalToken reads the local token's file again, for a client
// refused with the token it read before, and reports whether it holds a
// new one: the API restarted and minted it.
func (c *apiClient) refreshLocalToken() bool {
	if !c.local {
		return false
	}
	token, err := readLocalToken(c.base)
	if err != nil || token == "" || token == c.token {
		return false
	}
	c.token = token
	return true
}

// apiError is an error response from the API.
type apiError struct {
	Status int
	Code   string `json:"error"`
	Detail string `json:"detail"`
}

func (e *apiError) Error() string { return fmt.Sprintf("%s (HTTP %d %s)", e.Detail, e.Status, e.Code) }

// call sends body as JSON to the route and decodes the answer into out
// (nil: the answer is not read).
func (c *apiClient) call(ctx context.Context, method, path string, body, out any) error {
	data, err := c.do(ctx, method, path, body)
	if err != nil {
		return err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode API response from %s: %w", path, err)
		}
	}
	return nil
}

// do sends body as JSON to the route and returns the answer's body, or the
// API's error.
func (c *apiClient) do(ctx context.Context, method, path string, body any) ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, fmt.Errorf("bad --api URL %q: %w", c.base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the crewlet API at %s (is `crewlet serve` running? set --api or CREWLET_API): %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read API response: %w", err)
	}
	if resp.StatusCode >= 300 {
		e := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Detail == "" {
			e.Code, e.Detail = http.StatusText(resp.StatusCode), strings.TrimSpace(string(data))
		}
		return nil, e
	}
	return data, nil
}

func seatPath(handle string, rest ...string) string {
	return "/seats/" + url.PathEscape(handle) + strings.Join(rest, "")
}

func (c *cli) seatsCmd() *cobra.Command {
	return group("seats", "the seats: list, show, events, usage, turns, memory, spawn",
		c.seatsLsCmd(), c.seatsShowCmd(), c.seatEventsCmd(), c.seatUsageCmd(), c.seatTurnsCmd(), c.seatMemoryCmd(), c.seatSpawnCmd())
}

func (c *cli) seatsLsCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "ls", Short: "list every seat and its status (GET /seats)",
		Example: "  crewlet seats ls\n  crewlet seats ls -o json | jq -r '.[].handle'", Args: noArgs,
	}, fixedPath("/seats"), printSeats)
}

func printSeats(w io.Writer, seats []api.SeatSummary) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HANDLE\tROLE\tKIND\tSTATUS\tHEALTH\tEPOCH\tNODE")
	for _, s := range seats {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Handle, dash(s.Role), s.Kind, s.Status, dash(string(s.Health)), s.Epoch, dash(s.Node))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func (c *cli) seatsShowCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "show HANDLE", Short: "show one seat: org entry, database row, live state (GET /seats/{handle})",
		Example: "  crewlet seats show cto", Args: exactArgs(1),
	}, func(args []string) (string, error) { return seatPath(args[0]), nil },
		func(w io.Writer, detail api.SeatDetail) error { return printJSON(w, detail) })
}

func (c *cli) sendCmd() *cobra.Command {
	var wait time.Duration
	var from, conv string
	cmd := &cobra.Command{
		Use:   "send HANDLE TEXT",
		Short: "send a message and print the reply; --wait 0 returns at once (POST /seats/{handle}/messages, then GET /conversations/{id})",
		Example: "  crewlet send cto \"what ships this week?\"\n" +
			"  crewlet send cto \"and the docs?\" --conversation conv-1234 --wait 2m\n" +
			"  crewlet send cto \"nightly report\" --wait 0",
		Args: exactArgs(2),
		RunE: func(cmd *cobra.Command, pos []string) error {
			ctx := cmd.Context()
			client := c.client()
			var msg crewlet.Message
			req := api.SendMessageRequest{Text: pos[1], From: from, Conversation: conv}
			if err := client.call(ctx, http.MethodPost, seatPath(pos[0], "/messages"), req, &msg); err != nil {
				return err
			}
			if wait <= 0 {
				fmt.Fprintf(c.stdout, "queued %s in conversation %s\n", msg.EventID, msg.Conversation)
				return nil
			}
			reply, err := waitForReply(ctx, client, msg, wait)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "%s: %s\n", reply.From, reply.Body)
			return nil
		},
	}
	cmd.Flags().DurationVar(&wait, "wait", 30*time.Second, "how long to wait for the reply; 0 returns once the message is queued")
	cmd.Flags().StringVar(&from, "from", "", "send as this seat (its mailbox gets the reply)")
	cmd.Flags().StringVar(&conv, "conversation", "", "continue this conversation")
	return cmd
}

// waitForReply polls the conversation until the reply to msg is recorded,
// reading on from the last message it saw.
func waitForReply(ctx context.Context, c *apiClient, msg crewlet.Message, wait time.Duration) (crewlet.Message, error) {
	deadline := time.Now().Add(wait)
	after := int64(0)
	for {
		var conv api.Conversation
		err := c.call(ctx, http.MethodGet, conversationPath(msg.Conversation, after), nil, &conv)
		if ae, ok := err.(*apiError); err != nil && !(ok && ae.Status == http.StatusNotFound) {
			return crewlet.Message{}, err
		}
		for _, m := range conv.Messages {
			if m.InReplyTo == msg.EventID {
				return crewlet.Message{EventID: m.ID, From: m.From, Body: m.Body}, nil
			}
			after = m.Seq
		}
		if conv.Next != "" {
			continue
		}
		if time.Now().After(deadline) {
			return crewlet.Message{}, fmt.Errorf("no reply from %s within %s; the message is queued (event %s, conversation %s): `crewlet seats show %s` says what the seat is doing",
				msg.To, wait, msg.EventID, msg.Conversation, msg.To)
		}
		select {
		case <-ctx.Done():
			return crewlet.Message{}, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// conversationPath is GET /conversations/{id} from after on, a full page.
func conversationPath(id string, after int64) string {
	return fmt.Sprintf("/conversations/%s?limit=1000&after=%d", url.PathEscape(id), after)
}

func (c *cli) inboxCmd() *cobra.Command {
	var limit int
	var all bool
	cmd := &cobra.Command{
		Use:     "inbox HANDLE",
		Short:   "show a seat's newest mail (every page with --all), how people read a human seat (GET /seats/{handle}/inbox)",
		Example: "  crewlet inbox alice\n  crewlet inbox alice --all -o json",
		Args:    exactArgs(1),
	}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		asJSON, err := out.json(cmd)
		if err != nil {
			return err
		}
		msgs := []crewlet.Message{}
		client := c.client()
		for before := ""; ; {
			var page []crewlet.Message
			path := seatPath(pos[0], "/inbox") + fmt.Sprintf("?limit=%d", limit)
			if before != "" {
				path += "&before=" + url.QueryEscape(before)
			}
			if err := client.call(cmd.Context(), http.MethodGet, path, nil, &page); err != nil {
				return err
			}
			msgs = append(page, msgs...)
			if !all || len(page) == 0 {
				break
			}
			// The first entry's stream id is the cursor of the page before.
			before = page[0].StreamID
		}
		if asJSON {
			return printJSON(c.stdout, msgs)
		}
		for _, m := range msgs {
			fmt.Fprintf(c.stdout, "%s  %s → %s  [%s]  %s\n", m.SentAt.Format(time.RFC3339), m.From, m.To, m.Type, m.Body)
		}
		return nil
	}
	cmd.Flags().IntVar(&limit, "limit", 20, "how many of the newest messages to show (a page, with --all)")
	cmd.Flags().BoolVar(&all, "all", false, "show every message, paging back to the oldest")
	return cmd
}

func (c *cli) conversationCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "conversation ID",
		Short:   "print a conversation's transcript, every page of it (GET /conversations/{id})",
		Example: "  crewlet conversation conv-1234\n  crewlet conversation conv-1234 -o json | jq '.messages | length'",
		Args:    exactArgs(1),
	}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		asJSON, err := out.json(cmd)
		if err != nil {
			return err
		}
		client := c.client()
		// Empty lists print as [], as the API sends them.
		conv := api.Conversation{Messages: []store.TranscriptEntry{}, Summaries: []wire.Summary{}}
		for after := int64(0); ; {
			var page api.Conversation
			if err := client.call(cmd.Context(), http.MethodGet, conversationPath(pos[0], after), nil, &page); err != nil {
				return err
			}
			conv.ID, conv.Messages, conv.Summaries = page.ID, append(conv.Messages, page.Messages...), page.Summaries
			if page.Next == "" || len(page.Messages) == 0 {
				break
			}
			after = page.Messages[len(page.Messages)-1].Seq
		}
		if asJSON {
			return printJSON(c.stdout, conv)
		}
		printConversation(c.stdout, conv)
		return nil
	}
	return cmd
}

func printConversation(w io.Writer, conv api.Conversation) {
	// A summary is printed after the last message it covers, as what it
	// is: what that seat's model reads instead of the messages before it.
	summaries := map[string][]wire.Summary{}
	for _, s := range conv.Summaries {
		summaries[s.ThroughID] = append(summaries[s.ThroughID], s)
	}
	for _, m := range conv.Messages {
		fmt.Fprintf(w, "%s  %s → %s: %s\n", m.SentAt.Format(time.RFC3339), m.From, m.To, m.Body)
		for _, s := range summaries[m.ID] {
			fmt.Fprintf(w, "  [compaction summary by %s (profile %s) of its %d exchanges up to here: %s]\n", s.Seat, s.Profile, s.Covered, s.Text)
		}
	}
}

// signalCmd is `crewlet pause|resume|drain HANDLE`.
func (c *cli) signalCmd(signal string) *cobra.Command {
	var by, reason string
	var stopTurn bool
	cmd := &cobra.Command{Use: signal + " HANDLE", Args: exactArgs(1)}
	var body func() any
	switch signal {
	case "pause":
		cmd.Short = "pause a seat (POST /seats/{handle}/pause)"
		cmd.Example = "  crewlet pause cto --reason \"budget review\"\n  crewlet pause cto --stop-turn"
		cmd.Flags().BoolVar(&stopTurn, "stop-turn", false, "stop the turn in flight at its next round boundary")
		cmd.Flags().StringVar(&reason, "reason", "", "why the seat is paused")
		body = func() any { return crewlet.PauseRequest{StopTurn: stopTurn, Reason: reason, By: by} }
	case "resume":
		cmd.Short = "resume a paused or drained seat (POST /seats/{handle}/resume)"
		cmd.Example = "  crewlet resume cto"
		body = func() any { return crewlet.ResumeRequest{By: by} }
	case "drain":
		cmd.Short = "drain a seat: it finishes its turn and takes no more mail (POST /seats/{handle}/drain)"
		cmd.Example = "  crewlet drain cto --reason \"moving to the new node\""
		cmd.Flags().StringVar(&reason, "reason", "", "why the seat is drained")
		body = func() any { return crewlet.DrainRequest{Reason: reason, By: by} }
	}
	cmd.Flags().StringVar(&by, "by", "", "who is asking, recorded with the hold (default: the token's principal; $USER without a token or with the local token)")
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		client := c.client()
		if by == "" && (client.token == "" || client.local) {
			// A token acts as its principal, which the API refuses to see
			// renamed; without one, or with the local token (its holder names
			// who acts), $USER is the best name at hand.
			by = os.Getenv("USER")
		}
		var resp api.SignalResponse
		if err := client.call(cmd.Context(), http.MethodPost, seatPath(pos[0], "/"+signal), body(), &resp); err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "%s: %s sent\n", resp.Handle, resp.Signal)
		return nil
	}
	return cmd
}

func (c *cli) nodesCmd() *cobra.Command {
	return group("nodes", "the worker nodes: list, drain", c.nodesLsCmd(), c.nodesDrainCmd())
}

func (c *cli) nodesLsCmd() *cobra.Command {
	var all bool
	cmd := readCommand(c, &cobra.Command{
		Use: "ls", Short: "list worker nodes: labels, seats held, fair share, heartbeat age (GET /nodes)",
		Example: "  crewlet nodes ls\n  crewlet nodes ls --all -o json", Args: noArgs,
	}, func([]string) (string, error) {
		if all {
			return "/nodes?all=true", nil
		}
		return "/nodes", nil
	}, printNodes)
	cmd.Flags().BoolVar(&all, "all", false, "include nodes that stopped or stopped beating")
	return cmd
}

func printNodes(w io.Writer, view api.NodesView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INCARNATION\tLABELS\tSEATS\tSHARE\tDRAINING\tLIVE\tHEARTBEAT\tUNPROVEN")
	for _, n := range view.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%v\t%.1fs ago\t%s\n", n.Incarnation, dash(labelsText(n.Labels)), len(n.SeatsHeld),
			dash(sharesText(n.FairShare)), n.Draining, n.Live, n.HeartbeatAgeSeconds, dash(unprovenText(n.UnprovenSeconds)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(view.Unplaceable) > 0 {
		fmt.Fprintf(w, "unplaceable (no live node can run them): %s\n", strings.Join(view.Unplaceable, ", "))
	}
	return nil
}

func labelsText(m map[string]string) string {
	return joinSorted(m, func(k string) string { return k + "=" + m[k] })
}

func sharesText(m map[string]int) string {
	return joinSorted(m, func(k string) string {
		if k == "" {
			return fmt.Sprint(m[k])
		}
		return fmt.Sprintf("%s:%d", k, m[k])
	})
}

func unprovenText(m map[string]int64) string {
	return joinSorted(m, func(k string) string { return fmt.Sprintf("%s:%ds", k, m[k]) })
}

func joinSorted[V any](m map[string]V, format func(string) string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = format(k)
	}
	return strings.Join(parts, ",")
}

func (c *cli) nodesDrainCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "drain ID",
		Short:   "drain a node (incarnation or node id): its seats move, it exits (POST /nodes/{id}/drain)",
		Example: "  crewlet nodes drain n1",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var resp api.DrainNodeResponse
			if err := c.client().call(cmd.Context(), http.MethodPost, "/nodes/"+url.PathEscape(pos[0])+"/drain", nil, &resp); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "draining %s; its seats move and it exits\n", strings.Join(resp.Draining, ", "))
			return nil
		},
	}
}

func (c *cli) seatEventsCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "events HANDLE", Short: "a seat's event history: skipped triggers, dead letters, requeues (GET /seats/{handle}/events)",
		Example: "  crewlet seats events cto", Args: exactArgs(1),
	}, func(args []string) (string, error) { return seatPath(args[0], "/events"), nil }, printSeatEvents)
}

func printSeatEvents(w io.Writer, events []wire.SeatEvent) error {
	for _, e := range events {
		detail, _ := json.Marshal(e.Detail)
		fmt.Fprintf(w, "%s  %-22s %s  %s\n", e.RecordedAt.Format(time.RFC3339), e.Kind, dash(e.EventID), detail)
	}
	return nil
}

func (c *cli) deadLettersCmd() *cobra.Command {
	return group("deadletters", "mail the seats gave up on: list, requeue", c.deadLettersLsCmd(), c.deadLetterRequeueCmd())
}

func (c *cli) deadLettersLsCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "ls", Short: "mail the seats gave up on, with reason and delivery count (GET /deadletters)",
		Example: "  crewlet deadletters ls", Args: noArgs,
	}, fixedPath("/deadletters"), printDeadLetters)
}

func printDeadLetters(w io.Writer, dls []mailbox.DeadLetter) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSEAT\tDELIVERIES\tEVENT\tREASON")
	for _, d := range dls {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.ID, d.Seat, d.Deliveries, d.Message.EventID, d.Reason)
	}
	return tw.Flush()
}

func (c *cli) deadLetterRequeueCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "requeue ID",
		Short:   "put a dead letter back in its seat's mailbox with a fresh budget (POST /deadletters/{id}/requeue)",
		Example: "  crewlet deadletters requeue 1733480000000-0",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var dl mailbox.DeadLetter
			if err := c.client().call(cmd.Context(), http.MethodPost, "/deadletters/"+url.PathEscape(pos[0])+"/requeue", nil, &dl); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "requeued %s to %s as %s\n", dl.Message.EventID, dl.Seat, dl.Message.StreamID)
			return nil
		},
	}
}
