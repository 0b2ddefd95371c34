package views

import (
	"context"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/metrics"
)

// seatStatuses are the live statuses a seat is counted under, each reported
// even at zero so a status that empties reads 0 rather than vanishing.
var seatStatuses = []crewlet.SeatStatus{crewlet.StatusEstablishing, crewlet.StatusIdle, crewlet.StatusRunning,
	crewlet.StatusPaused, crewlet.StatusDraining, crewlet.StatusDrained, crewlet.StatusMoving, crewlet.StatusStopped, crewlet.StatusUnplaceable, crewlet.StatusAbsent}

// seatsByHealth counts the agent seats by recorded health, each state
// reported even at zero.
func (v *Reader) seatsByHealth(ctx context.Context, agents []string) (map[string]int, error) {
	counts, err := v.store.SeatsByHealth(ctx, agents)
	if err != nil {
		return nil, err
	}
	for _, s := range crewlet.HealthStates {
		counts[string(s)] += 0
	}
	counts[string(crewlet.HealthUnknown)] += 0
	return counts, nil
}

// Company reads the company's state for the metrics gauges: each agent
// seat's live status (from Temporal visibility, one list of the running
// seats), the open tickets by phase and the credentials out (Postgres), and
// each agent seat's mailbox backlog (Redis).
func (v *Reader) Company(ctx context.Context) (metrics.Company, error) {
	statuses, err := v.seats.Statuses(ctx)
	if err != nil {
		return metrics.Company{}, err
	}
	co := metrics.Company{SeatsByStatus: make(map[string]int, len(seatStatuses))}
	for _, s := range seatStatuses {
		co.SeatsByStatus[string(s)] = 0
	}
	var agents []string
	for _, s := range v.org.Now().AgentSeats() {
		agents = append(agents, s.Handle)
		status, ok := statuses[s.Handle]
		if !ok {
			status = crewlet.StatusAbsent
		}
		co.SeatsByStatus[string(status)]++
	}
	if co.SeatsByHealth, err = v.seatsByHealth(ctx, agents); err != nil {
		return metrics.Company{}, err
	}
	if co.OpenTickets, err = v.store.OpenTicketsByPhase(ctx); err != nil {
		return metrics.Company{}, err
	}
	if co.Quarantined, co.Cooling, err = v.store.CredentialsOut(ctx, time.Now()); err != nil {
		return metrics.Company{}, err
	}
	if co.Mailboxes, err = v.mailbox.Backlogs(ctx, agents); err != nil {
		return metrics.Company{}, err
	}
	return co, nil
}
