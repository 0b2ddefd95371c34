package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"

	"github.com/crewlet/crewlet/internal/wire"
)

// runSeatSpawn is `crewlet seats spawn ROLE` (POST /seats/spawn).
func runSeatSpawn(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("seats spawn", flag.ContinueOnError)
	base := apiFlag(fs)
	pos, err := parseFlags(fs, args, 1, "crewlet seats spawn ROLE [--api URL]")
	if err != nil {
		return err
	}
	var seat wire.SpawnedSeat
	if err := newAPIClient(*base).call(ctx, http.MethodPost, "/seats/spawn", wire.SpawnRequest{Role: pos[0]}, &seat); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "spawned %s (role %s); it is reaped once idle with nothing open\n", seat.Handle, seat.Role)
	return nil
}

// runPools is `crewlet pools` (GET /pools).
func runPools(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pools", flag.ContinueOnError)
	base := apiFlag(fs)
	if _, err := parseFlags(fs, args, 0, "crewlet pools [--api URL]"); err != nil {
		return err
	}
	var pools []wire.PoolView
	if err := newAPIClient(*base).call(ctx, http.MethodGet, "/pools", nil, &pools); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROLE\tMAX\tLIVE\tFREE\tRECLAIMABLE\tREAP AFTER\tSEATS")
	for _, p := range pools {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", p.Role, p.MaxSeats, p.Live, p.Free, p.Reclaimable, p.IdleReapAfter, dash(strings.Join(p.Seats, ", ")))
	}
	return tw.Flush()
}
