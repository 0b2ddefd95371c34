package seatclient_test

import (
	"context"
	"strings"
	"testing"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/seatclient"
)

// A payload the seat would drop is refused before it is sent, with the
// check the workflow runs: the client has no Temporal connection here, so a
// payload that got past its check would panic on the nil client.
func TestSignalsAreCheckedBeforeTheyLeave(t *testing.T) {
	c := seatclient.New(nil, &config.Config{})
	ctx := context.Background()
	long := strings.Repeat("x", crewlet.MaxReasonBytes+1)
	for _, tc := range []struct {
		name string
		send func() error
	}{
		{"pause with a reason over its bound", func() error { return c.Pause(ctx, "cto", crewlet.PauseRequest{Reason: long}) }},
		{"resume by a name with a space", func() error { return c.Resume(ctx, "cto", crewlet.ResumeRequest{By: "olga k"}) }},
		{"drain with a NUL in its reason", func() error { return c.Drain(ctx, "cto", crewlet.DrainRequest{Reason: "a\x00b"}) }},
		{"move excluding a node with a quote", func() error {
			return c.Move(ctx, "cto", crewlet.MoveRequest{ExcludeNode: `n1"`, By: "rebalance"})
		}},
		{"host_lost naming no node", func() error { return c.HostLost(ctx, "cto", crewlet.HostLostRequest{By: "n2:0a1b2c3d"}) }},
		{"stop by invalid UTF-8", func() error { return c.Stop(ctx, "cto", crewlet.StopRequest{By: "a\xff"}) }},
		{"ticket change naming no ticket", func() error { return c.TicketChanged(ctx, "turn/cto/k", "") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.send()
			if crewlet.ErrorCode(err) != crewlet.EINVALID {
				t.Fatalf("got %v; want %s before anything is sent", err, crewlet.EINVALID)
			}
		})
	}
}
