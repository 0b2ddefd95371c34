package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
)

func runSeatUsage(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("seats usage", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet seats usage HANDLE [--api URL]")
	if err != nil {
		return err
	}
	var u crewlet.SeatUsage
	if err := newAPIClient(*base).call(ctx, http.MethodGet, seatPath(pos[0], "/usage"), nil, &u); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tWINDOW\tUSED\tCAP\tRESETS AT")
	for _, w := range u.Windows {
		limit := "-"
		if w.Cap > 0 {
			limit = fmt.Sprint(w.Cap)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", w.Scope, w.Window, w.Used, limit, w.ResetsAt.Format(time.RFC3339))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if h := u.Hold; h != nil && h.Unit == crewlet.UnitNanoUSD {
		// A money hold's cap and used are nano-dollars: its reason says them.
		fmt.Fprintf(stdout, "held: %s\n", h.Reason)
	} else if h != nil {
		fmt.Fprintf(stdout, "held: the %s %s cap of %d tokens is reached (%d used); turns wait until %s (%s)\n",
			h.Scope, h.Window, h.Cap, h.Used, h.ResetsAt.Format(time.RFC3339), u.Timezone)
	} else {
		fmt.Fprintf(stdout, "not held; windows run on %s\n", u.Timezone)
	}
	return nil
}

func runSeatTurns(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("seats turns", flag.ContinueOnError)
	base := apiFlag(fs)
	limit := fs.Int("limit", 20, fmt.Sprintf("how many of the newest turns to show (1 to %d)", wire.MaxTurns))
	pos, err := parseFlags(fs, args, 1, "crewlet seats turns HANDLE [--limit N] [--api URL]")
	if err != nil {
		return err
	}
	var turns []wire.TurnRow
	path := seatPath(pos[0], "/turns") + fmt.Sprintf("?limit=%d", *limit)
	if err := newAPIClient(*base).call(ctx, http.MethodGet, path, nil, &turns); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tROUNDS\tSTARTED\tNOTE")
	for _, t := range turns {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", t.TurnID, t.Status, t.Rounds, t.StartedAt.Format(time.RFC3339), dash(crewlet.OneLine(t.Note, 0)))
	}
	return tw.Flush()
}

func runTurnShow(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("turn show", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet turn show TURN-ID [--api URL]")
	if err != nil {
		return err
	}
	handle, workKey, ok := crewlet.ParseTurnID(pos[0])
	if !ok {
		return usageError{fmt.Sprintf("turn id %q is not turn/HANDLE/WORK_KEY; `crewlet seats turns HANDLE` lists them", pos[0])}
	}
	var v wire.TurnView
	path := "/turns/" + url.PathEscape(handle) + "/" + url.PathEscape(workKey)
	client := newAPIClient(*base)
	if err := client.call(ctx, http.MethodGet, path, nil, &v); err != nil {
		return err
	}
	// A large turn comes in pages of messages (docs/operations.md, "Large reads").
	for next := v.Next; next != 0; {
		var page wire.TurnView
		if err := client.call(ctx, http.MethodGet, path+"?from="+strconv.Itoa(next), nil, &page); err != nil {
			return err
		}
		v.Messages = append(v.Messages, page.Messages...)
		next = page.Next
	}
	printTurn(stdout, v)
	return nil
}

// printTurn writes a turn's header, each thread's transcript and the
// receipts of its model calls.
func printTurn(w io.Writer, v wire.TurnView) {
	t := v.Turn
	fmt.Fprintf(w, "%s  %s, %d rounds (max %d), epoch %d\n", t.TurnID, t.Status, t.Rounds, t.MaxRounds, t.Epoch)
	fmt.Fprintf(w, "started %s", t.StartedAt.Format(time.RFC3339))
	if t.FinishedAt != nil {
		fmt.Fprintf(w, ", finished %s", t.FinishedAt.Format(time.RFC3339))
	}
	fmt.Fprintln(w)
	if t.StoppedBy != "" {
		fmt.Fprintf(w, "stopped by %s\n", t.StoppedBy)
	}
	if t.Note != "" {
		fmt.Fprintf(w, "note: %s\n", t.Note)
	}

	byThread := map[int][]wire.TurnMessage{}
	for _, m := range v.Messages {
		byThread[m.Thread] = append(byThread[m.Thread], m)
	}
	threads := make([]int, 0, len(byThread))
	for th := range byThread {
		threads = append(threads, th)
	}
	sort.Ints(threads)
	for _, th := range threads {
		fmt.Fprintf(w, "\nthread %d%s\n", th, triggerOf(t, th))
		names := map[string]string{}
		for _, m := range byThread[th] {
			fmt.Fprintf(w, "  %s\n", indent(messageLine(m.Message, names)))
		}
	}

	if len(v.Receipts) == 0 {
		return
	}
	fmt.Fprintln(w, "\nreceipts:")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ROUND\tPROFILE\tSHA256\tBYTES\tTOKENS IN\tOUT")
	for _, r := range v.Receipts {
		fmt.Fprintf(tw, "  %d\t%s\t%s\t%d\t%d\t%d\n", r.Round, dash(r.Profile), dash(short(r.SystemSHA256, 12)), r.SystemBytes, r.InputTokens, r.OutputTokens)
	}
	_ = tw.Flush()
}

// triggerOf names the mail a thread answers.
func triggerOf(t wire.TurnRow, thread int) string {
	if thread < 0 || thread >= len(t.Threads) || t.Threads[thread] < 0 || t.Threads[thread] >= len(t.Mail) {
		return ""
	}
	m := t.Mail[t.Threads[thread]]
	return fmt.Sprintf(" (answers %s from %s)", m.EventID, m.From)
}

// messageLine renders one model message; names remembers the tool name of
// each call so the result line can say which tool answered.
func messageLine(m crewlet.ChatMessage, names map[string]string) string {
	switch m.Role {
	case "assistant":
		line := "[assistant]"
		if m.Content != "" {
			line += " " + m.Content
		}
		if len(m.ToolCalls) > 0 {
			calls := make([]string, len(m.ToolCalls))
			for i, c := range m.ToolCalls {
				names[c.ID] = c.Name
				calls[i] = fmt.Sprintf("%s(%s)", c.Name, c.Args)
			}
			line += " -> tool_calls " + strings.Join(calls, ", ")
		}
		return line
	case "tool":
		name := names[m.ToolCallID]
		if name == "" {
			name = dash(m.ToolCallID)
		}
		prefix := "[tool " + name + "]"
		if m.IsError {
			prefix += " error:"
		}
		return prefix + " " + m.Content
	}
	return "[" + m.Role + "] " + m.Content
}

// indent keeps a multi-line message under its own bullet.
func indent(s string) string { return strings.ReplaceAll(s, "\n", "\n    ") }

func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
