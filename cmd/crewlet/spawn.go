package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/crewlet/crewlet/internal/wire"
)

func (c *cli) seatSpawnCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "spawn ROLE",
		Short:   "spawn a seat of ROLE from its pool; print its handle (POST /seats/spawn)",
		Example: "  crewlet seats spawn engineer",
		Args:    exactArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			var seat wire.SpawnedSeat
			if err := c.client().call(cmd.Context(), http.MethodPost, "/seats/spawn", wire.SpawnRequest{Role: pos[0]}, &seat); err != nil {
				return err
			}
			fmt.Fprintf(c.stdout, "spawned %s (role %s); it is reaped once idle with nothing open\n", seat.Handle, seat.Role)
			return nil
		},
	}
}

func (c *cli) poolsCmd() *cobra.Command {
	return readCommand(c, &cobra.Command{
		Use: "pools", Short: "each role's spawn pool: max, live, free, reclaimable, its seats (GET /pools)",
		Example: "  crewlet pools", Args: noArgs,
	}, fixedPath("/pools"), printPools)
}

func printPools(w io.Writer, pools []wire.PoolView) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tMAX\tLIVE\tFREE\tRECLAIMABLE\tREAP AFTER\tSEATS")
	for _, p := range pools {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Role, p.MaxSeats, p.Live, p.Free, p.Reclaimable, p.IdleReapAfter, dash(strings.Join(p.Seats, ", ")))
	}
	return tw.Flush()
}
