package main

import (
	"fmt"
	"io"
	"net/url"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/wire"
)

func (c *cli) seatMemoryCmd() *cobra.Command {
	var kind, before string
	var limit int
	cmd := readCommand(c, &cobra.Command{
		Use:   "memory HANDLE",
		Short: "a seat's diary, episodes and counterparties, newest first; --kind pages one list (GET /seats/{handle}/memory)",
		Example: "  crewlet seats memory cto\n" +
			"  crewlet seats memory cto --kind diary --limit 5 --before 42",
		Args: exactArgs(1),
	}, func(args []string) (string, error) {
		q := url.Values{"limit": {fmt.Sprint(limit)}}
		if kind != "" {
			q.Set("kind", kind)
		}
		if before != "" {
			q.Set("before", before)
		}
		return seatPath(args[0], "/memory") + "?" + q.Encode(), nil
	}, func(w io.Writer, v api.MemoryView) error { return printMemory(w, v, limit) })
	cmd.Flags().StringVar(&kind, "kind", "", "show one list, diary, episodes or counterparties, and page it with --before")
	cmd.Flags().IntVar(&limit, "limit", 20, fmt.Sprintf("how many of the newest items per list (1 to %d)", wire.MaxMemoryPage))
	cmd.Flags().StringVar(&before, "before", "", "the page after this cursor (the --before a previous page printed); needs --kind")
	return cmd
}

// printMemory writes each list of a seat's memory, and how to read the
// page after it; limit is the --limit the page was read with.
func printMemory(stdout io.Writer, v api.MemoryView, limit int) error {
	var lists []memoryList
	if p := v.Diary; p != nil {
		lists = append(lists, memoryList{"DIARY", api.MemoryDiary, len(p.Items), p.Next, func(tw io.Writer) {
			fmt.Fprintln(tw, "  ID\tRECORDED\tWORK KEY\tCONTENT")
			for _, d := range p.Items {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", d.ID, d.RecordedAt.Format(time.RFC3339), dash(d.WorkKey), crewlet.OneLine(d.Content, 0))
			}
		}})
	}
	if p := v.Episodes; p != nil {
		lists = append(lists, memoryList{"EPISODES", api.MemoryEpisodes, len(p.Items), p.Next, func(tw io.Writer) {
			fmt.Fprintln(tw, "  ID\tRECORDED\tTURN\tSUMMARY")
			for _, e := range p.Items {
				fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\n", e.ID, e.RecordedAt.Format(time.RFC3339), e.TurnID, crewlet.OneLine(e.Summary, 0))
			}
		}})
	}
	if p := v.Counterparties; p != nil {
		lists = append(lists, memoryList{"COUNTERPARTIES", api.MemoryCounterparties, len(p.Items), p.Next, func(tw io.Writer) {
			fmt.Fprintln(tw, "  COUNTERPARTY\tINTERACTIONS\tFIRST SEEN\tLAST SEEN")
			for _, c := range p.Items {
				fmt.Fprintf(tw, "  %s\t%d\t%s\t%s\n", c.Counterparty, c.InteractionCount, c.FirstSeen.Format(time.RFC3339), c.LastSeen.Format(time.RFC3339))
			}
		}})
	}
	limitArg := ""
	if limit != 20 {
		limitArg = fmt.Sprintf(" --limit %d", limit)
	}
	for i, l := range lists {
		if i > 0 {
			fmt.Fprintln(stdout)
		}
		fmt.Fprintln(stdout, l.title)
		if l.n == 0 {
			fmt.Fprintln(stdout, "  (none)")
			continue
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		l.rows(tw)
		if err := tw.Flush(); err != nil {
			return err
		}
		if l.next != "" {
			fmt.Fprintf(stdout, "  more: crewlet seats memory %s --kind %s%s --before %s\n", v.Seat, l.kind, limitArg, l.next)
		}
	}
	return nil
}

// memoryList is one section of `seats memory`: a title, its rows, and the
// cursor of the page after it.
type memoryList struct {
	title, kind string
	n           int
	next        string
	rows        func(io.Writer)
}
