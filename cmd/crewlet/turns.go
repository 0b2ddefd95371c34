package main

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/wire"
)

func (c *cli) seatUsageCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use:     "usage HANDLE",
		Short:   "tokens used and caps per day/week/month, seat and company; the hold if any (GET /seats/{handle}/usage)",
		Example: "  crewlet seats usage cto\n  crewlet seats usage cto -o json | jq .hold",
		Args:    exactArgs(1),
	}, func(args []string) (string, error) { return seatPath(args[0], "/usage"), nil }, printSeatUsage)
}

func printSeatUsage(w io.Writer, u crewlet.SeatUsage) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCOPE\tWINDOW\tUSED\tCAP\tRESETS AT\tSPENT\tUSD CAP\tUNPRICED")
	for _, win := range u.Windows {
		tokenCap, moneyCap := "-", "-"
		if win.Cap > 0 {
			tokenCap = fmt.Sprint(win.Cap)
		}
		if win.CapNanoUSD > 0 {
			moneyCap = usd(win.CapNanoUSD)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%d\n", win.Scope, win.Window, win.Used, tokenCap, win.ResetsAt.Format(time.RFC3339),
			usd(win.UsedNanoUSD), moneyCap, win.UnpricedTokens)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, win := range u.Windows {
		if a := win.Ask; a != nil {
			fmt.Fprintf(w, "asked %s (ticket %s) at %s of the %s %s cap of %s: %s\n", a.To, a.Ticket, usd(a.UsedNanoUSD), win.Scope, win.Window, usd(a.CapNanoUSD), a.Decision)
		}
	}
	if h := u.Hold; h != nil && h.Unit == crewlet.UnitNanoUSD {
		// A money hold's cap and used are nano-dollars: its reason says them.
		fmt.Fprintf(w, "held: %s\n", h.Reason)
	} else if h != nil {
		fmt.Fprintf(w, "held: the %s %s cap of %d tokens is reached (%d used); turns wait until %s (%s)\n",
			h.Scope, h.Window, h.Cap, h.Used, h.ResetsAt.Format(time.RFC3339), u.Timezone)
	} else {
		fmt.Fprintf(w, "not held; windows run on %s\n", u.Timezone)
	}
	return nil
}

func (c *cli) seatTurnsCmd() *cobra.Command {
	var limit int
	cmd := readCommand(c, &cobra.Command{
		Use:     "turns HANDLE",
		Short:   "a seat's newest turns: id, status, rounds, start, note (GET /seats/{handle}/turns)",
		Example: "  crewlet seats turns cto --limit 5",
		Args:    exactArgs(1),
	}, func(args []string) (string, error) {
		return seatPath(args[0], "/turns") + fmt.Sprintf("?limit=%d", limit), nil
	}, printTurnRows)
	cmd.Flags().IntVar(&limit, "limit", 20, fmt.Sprintf("how many of the newest turns to show (1 to %d)", wire.MaxTurns))
	return cmd
}

func printTurnRows(w io.Writer, turns []wire.TurnRow) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tROUNDS\tSTARTED\tNOTE")
	for _, t := range turns {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", t.TurnID, t.Status, t.Rounds, t.StartedAt.Format(time.RFC3339), dash(crewlet.OneLine(t.Note, 0)))
	}
	return tw.Flush()
}

func (c *cli) turnCmd() *cobra.Command {
	return group("turn", "one turn of a seat", c.turnShowCmd())
}

// turnPath is a turn's route from its id, turn/HANDLE/WORK_KEY.
func turnPath(cmd *cobra.Command, id string) (string, error) {
	handle, workKey, ok := crewlet.ParseTurnID(id)
	if !ok {
		return "", usageErrorf(cmd, "turn id %q is not turn/HANDLE/WORK_KEY; `crewlet seats turns HANDLE` lists them", id)
	}
	return "/turns/" + url.PathEscape(handle) + "/" + url.PathEscape(workKey), nil
}

func (c *cli) turnShowCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "show TURN-ID",
		Short:   "a turn's model transcript per thread and its charter receipts (GET /turns/{handle}/{work_key})",
		Example: "  crewlet turn show turn/cto/ev-0123\n  crewlet turn show turn/cto/ev-0123 -o json | jq '.messages | length'",
		Args:    exactArgs(1),
	}
	out := outputFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, pos []string) error {
		asJSON, err := out.json(cmd)
		if err != nil {
			return err
		}
		path, err := turnPath(cmd, pos[0])
		if err != nil {
			return err
		}
		var v wire.TurnView
		client := c.client()
		if err := client.call(cmd.Context(), http.MethodGet, path, nil, &v); err != nil {
			return err
		}
		// A large turn comes in pages of messages (docs/operations.md, "Large reads").
		for next := v.Next; next != 0; {
			var page wire.TurnView
			if err := client.call(cmd.Context(), http.MethodGet, path+"?from="+strconv.Itoa(next), nil, &page); err != nil {
				return err
			}
			v.Messages = append(v.Messages, page.Messages...)
			next = page.Next
		}
		v.Next = 0
		if asJSON {
			return printJSON(c.stdout, v)
		}
		printTurn(c.stdout, v)
		return nil
	}
	return cmd
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
