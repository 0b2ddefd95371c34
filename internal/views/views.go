// Package views answers what the API, the CLI and the metrics read about the
// company: a seat's live state (its workflow's and its turn's), its token
// usage against its budgets, its recorded turns, and the company's gauges.
// It changes nothing; writes go through the services (delivery, tickets,
// profiles, the seat client).
package views

import (
	"context"
	"time"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
)

// Reader reads the state of one org's company.
type Reader struct {
	org     config.Source
	seats   *seatclient.Client
	store   *store.Store
	mailbox *mailbox.Mailbox
	// Now is the clock usage windows are read on; tests set it.
	Now func() time.Time
}

// New returns the reader of org's company.
func New(org config.Source, seats *seatclient.Client, st *store.Store, mb *mailbox.Mailbox) *Reader {
	return &Reader{org: org, seats: seats, store: st, mailbox: mb, Now: time.Now}
}

// State asks the seat's workflow what it is doing, and its running turn how
// far it got.
func (v *Reader) State(ctx context.Context, handle string) (crewlet.SeatState, error) {
	s, err := v.org.Now().SeatNamed(handle)
	if err != nil {
		return crewlet.SeatState{}, err
	}
	if s.Kind != string(crewlet.SeatAgent) {
		return crewlet.SeatState{}, crewlet.Errorf(crewlet.EINVALID, "%s is a human seat; it has a mailbox but no workflow", handle)
	}
	st, err := v.seats.State(ctx, handle)
	if err != nil {
		return crewlet.SeatState{}, err
	}
	// A seat that runs its turns inline answers for its turn; a Turn child
	// workflow answers for itself. COMPAT(node-liveness@5)
	if st.Turn != nil && st.Turn.Progress == nil {
		st.Turn.Progress = v.seats.TurnProgress(ctx, st.Turn.ID)
	}
	return st, nil
}
