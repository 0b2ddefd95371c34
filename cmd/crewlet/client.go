package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/mailbox"
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

// apiFlag adds the flags of every client command, --api, --token and
// --ca, and returns --api.
func apiFlag(fs *flag.FlagSet) *string {
	fs.StringVar(&apiToken, "token", os.Getenv("CREWLET_TOKEN"), "bearer token for the API (default $CREWLET_TOKEN; without one, the local token of an API on this machine that minted one)")
	fs.StringVar(&apiCA, "ca", os.Getenv("CREWLET_CA"), "PEM file of the CA that signed an https API's certificate (default $CREWLET_CA; empty: the system's roots)")
	return fs.String("api", envOr("CREWLET_API", "http://127.0.0.1:8080"), "API base URL")
}

// apiToken and apiCA are the --token and --ca of the command being run:
// one command a process.
var apiToken, apiCA string

func newAPIClient(base string) *apiClient {
	c := &apiClient{base: strings.TrimRight(base, "/"), token: apiToken}
	var tokenErr, caErr error
	if c.token == "" {
		c.token, tokenErr = readLocalToken(c.base)
		c.local = c.token != ""
	}
	c.http, caErr = apiHTTPClient(apiCA)
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

func (c *apiClient) call(ctx context.Context, method, path string, body, out any) error {
	if c.err != nil {
		return c.err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("bad --api URL %q: %w", c.base, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach the crewlet API at %s (is `crewlet serve` running? set --api or CREWLET_API): %w", c.base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("read API response: %w", err)
	}
	if resp.StatusCode >= 300 {
		e := &apiError{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Detail == "" {
			e.Code, e.Detail = http.StatusText(resp.StatusCode), strings.TrimSpace(string(data))
		}
		return e
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("decode API response from %s: %w", path, err)
		}
	}
	return nil
}

func seatPath(handle string, rest ...string) string {
	return "/seats/" + url.PathEscape(handle) + strings.Join(rest, "")
}

func runSeatsList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("seats ls", flag.ContinueOnError)
	base := apiFlag(fs)
	if _, err := parseFlags(fs, args, 0, "crewlet seats ls [--api URL]"); err != nil {
		return err
	}
	var seats []api.SeatSummary
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/seats", nil, &seats); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
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

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func runSeatsShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("seats show", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet seats show HANDLE [--api URL]")
	if err != nil {
		return err
	}
	var detail api.SeatDetail
	if err := newAPIClient(*base).call(ctx, http.MethodGet, seatPath(pos[0]), nil, &detail); err != nil {
		return err
	}
	return printJSON(stdout, detail)
}

func runSend(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("send", flag.ContinueOnError)
	base := apiFlag(fs)
	wait := fs.Duration("wait", 30*time.Second, "how long to wait for the reply; 0 returns once the message is queued")
	from := fs.String("from", "", "send as this seat (its mailbox gets the reply)")
	conv := fs.String("conversation", "", "continue this conversation")
	pos, err := parseFlags(fs, args, 2, "crewlet send HANDLE TEXT [--wait DURATION] [--from SEAT] [--conversation ID]")
	if err != nil {
		return err
	}
	c := newAPIClient(*base)
	var msg crewlet.Message
	req := api.SendMessageRequest{Text: pos[1], From: *from, Conversation: *conv}
	if err := c.call(ctx, http.MethodPost, seatPath(pos[0], "/messages"), req, &msg); err != nil {
		return err
	}
	if *wait <= 0 {
		fmt.Fprintf(stdout, "queued %s in conversation %s\n", msg.EventID, msg.Conversation)
		return nil
	}
	reply, err := waitForReply(ctx, c, msg, *wait)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s\n", reply.From, reply.Body)
	return nil
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

func runInbox(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("inbox", flag.ContinueOnError)
	base := apiFlag(fs)
	limit := fs.Int("limit", 20, "how many of the newest messages to show (a page, with --all)")
	all := fs.Bool("all", false, "show every message, paging back to the oldest")
	pos, err := parseFlags(fs, args, 1, "crewlet inbox HANDLE [--limit N] [--all] [--api URL]")
	if err != nil {
		return err
	}
	var msgs []crewlet.Message
	c := newAPIClient(*base)
	for before := ""; ; {
		var page []crewlet.Message
		path := seatPath(pos[0], "/inbox") + fmt.Sprintf("?limit=%d", *limit)
		if before != "" {
			path += "&before=" + url.QueryEscape(before)
		}
		if err := c.call(ctx, http.MethodGet, path, nil, &page); err != nil {
			return err
		}
		msgs = append(page, msgs...)
		if !*all || len(page) == 0 {
			break
		}
		// The first entry's stream id is the cursor of the page before.
		before = page[0].StreamID
	}
	for _, m := range msgs {
		fmt.Fprintf(stdout, "%s  %s → %s  [%s]  %s\n", m.SentAt.Format(time.RFC3339), m.From, m.To, m.Type, m.Body)
	}
	return nil
}

func runConversation(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("conversation", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet conversation ID [--api URL]")
	if err != nil {
		return err
	}
	c := newAPIClient(*base)
	var conv api.Conversation
	for after := int64(0); ; {
		var page api.Conversation
		if err := c.call(ctx, http.MethodGet, conversationPath(pos[0], after), nil, &page); err != nil {
			return err
		}
		conv.Messages, conv.Summaries = append(conv.Messages, page.Messages...), page.Summaries
		if page.Next == "" || len(page.Messages) == 0 {
			break
		}
		after = page.Messages[len(page.Messages)-1].Seq
	}
	// A summary is printed after the last message it covers, as what it
	// is: what that seat's model reads instead of the messages before it.
	summaries := map[string][]wire.Summary{}
	for _, s := range conv.Summaries {
		summaries[s.ThroughID] = append(summaries[s.ThroughID], s)
	}
	for _, m := range conv.Messages {
		fmt.Fprintf(stdout, "%s  %s → %s: %s\n", m.SentAt.Format(time.RFC3339), m.From, m.To, m.Body)
		for _, s := range summaries[m.ID] {
			fmt.Fprintf(stdout, "  [compaction summary by %s (profile %s) of its %d exchanges up to here: %s]\n", s.Seat, s.Profile, s.Covered, s.Text)
		}
	}
	return nil
}

func runSignal(ctx context.Context, signal string, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet(signal, flag.ContinueOnError)
	base := apiFlag(fs)
	by := fs.String("by", "", "who is asking, recorded with the hold (default: the token's principal; $USER without a token or with the local token)")
	var body func() any
	synopsis := "crewlet " + signal + " HANDLE [--by NAME]"
	switch signal {
	case "pause":
		stopTurn := fs.Bool("stop-turn", false, "stop the turn in flight at its next round boundary")
		reason := fs.String("reason", "", "why the seat is paused")
		synopsis = "crewlet pause HANDLE [--stop-turn] [--reason TEXT] [--by NAME]"
		body = func() any { return crewlet.PauseRequest{StopTurn: *stopTurn, Reason: *reason, By: *by} }
	case "resume":
		body = func() any { return crewlet.ResumeRequest{By: *by} }
	case "drain":
		reason := fs.String("reason", "", "why the seat is drained")
		synopsis = "crewlet drain HANDLE [--reason TEXT] [--by NAME]"
		body = func() any { return crewlet.DrainRequest{Reason: *reason, By: *by} }
	}
	pos, err := parseFlags(fs, args, 1, synopsis)
	if err != nil {
		return err
	}
	c := newAPIClient(*base)
	if *by == "" && (c.token == "" || c.local) {
		// A token acts as its principal, which the API refuses to see
		// renamed; without one, or with the local token (its holder names
		// who acts), $USER is the best name at hand.
		*by = os.Getenv("USER")
	}
	var resp api.SignalResponse
	if err := c.call(ctx, http.MethodPost, seatPath(pos[0], "/"+signal), body(), &resp); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: %s sent\n", resp.Handle, resp.Signal)
	return nil
}

func runNodesList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("nodes ls", flag.ContinueOnError)
	base := apiFlag(fs)
	all := fs.Bool("all", false, "include nodes that stopped or stopped beating")
	if _, err := parseFlags(fs, args, 0, "crewlet nodes ls [--all] [--api URL]"); err != nil {
		return err
	}
	path := "/nodes"
	if *all {
		path += "?all=true"
	}
	var view api.NodesView
	if err := newAPIClient(*base).call(ctx, http.MethodGet, path, nil, &view); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INCARNATION\tLABELS\tSEATS\tSHARE\tDRAINING\tLIVE\tHEARTBEAT\tUNPROVEN")
	for _, n := range view.Nodes {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%v\t%v\t%.1fs ago\t%s\n", n.Incarnation, dash(labelsText(n.Labels)), len(n.SeatsHeld),
			dash(sharesText(n.FairShare)), n.Draining, n.Live, n.HeartbeatAgeSeconds, dash(unprovenText(n.UnprovenSeconds)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(view.Unplaceable) > 0 {
		fmt.Fprintf(stdout, "unplaceable (no live node can run them): %s\n", strings.Join(view.Unplaceable, ", "))
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

func runNodesDrain(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("nodes drain", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet nodes drain ID [--api URL]")
	if err != nil {
		return err
	}
	var resp api.DrainNodeResponse
	if err := newAPIClient(*base).call(ctx, http.MethodPost, "/nodes/"+url.PathEscape(pos[0])+"/drain", nil, &resp); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "draining %s; its seats move and it exits\n", strings.Join(resp.Draining, ", "))
	return nil
}

func runSeatEvents(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("seats events", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet seats events HANDLE [--api URL]")
	if err != nil {
		return err
	}
	var events []wire.SeatEvent
	if err := newAPIClient(*base).call(ctx, http.MethodGet, seatPath(pos[0], "/events"), nil, &events); err != nil {
		return err
	}
	for _, e := range events {
		detail, _ := json.Marshal(e.Detail)
		fmt.Fprintf(stdout, "%s  %-22s %s  %s\n", e.RecordedAt.Format(time.RFC3339), e.Kind, dash(e.EventID), detail)
	}
	return nil
}

func runDeadLettersList(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("deadletters ls", flag.ContinueOnError)
	base := apiFlag(fs)
	if _, err := parseFlags(fs, args, 0, "crewlet deadletters ls [--api URL]"); err != nil {
		return err
	}
	var dls []mailbox.DeadLetter
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/deadletters", nil, &dls); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSEAT\tDELIVERIES\tEVENT\tREASON")
	for _, d := range dls {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", d.ID, d.Seat, d.Deliveries, d.Message.EventID, d.Reason)
	}
	return tw.Flush()
}

func runDeadLetterRequeue(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("deadletters requeue", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet deadletters requeue ID [--api URL]")
	if err != nil {
		return err
	}
	var dl mailbox.DeadLetter
	if err := newAPIClient(*base).call(ctx, http.MethodPost, "/deadletters/"+url.PathEscape(pos[0])+"/requeue", nil, &dl); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requeued %s to %s as %s\n", dl.Message.EventID, dl.Seat, dl.Message.StreamID)
	return nil
}
