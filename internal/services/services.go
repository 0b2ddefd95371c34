// Package services builds crewlet's service graph: every service a server
// process runs, each built once over the process's clients, each given what
// it uses through its constructor. `crewlet serve`, `worker` and `api`
// compose from one Graph, so a process that runs both a node and the API
// runs one ticket service, one reconciler, one profile service.
package services

import (
	"log/slog"

	"go.temporal.io/sdk/client"

	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/profiles"
	"github.com/crewlet/crewlet/internal/reconcile"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/spawn"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/views"
)

// Clients are what a process connects to once; the graph holds them for
// the services and for the processes' own loops. A nil Mailbox or Temporal
// builds services that do without (API tests reading Postgres only);
// Metrics may be nil.
type Clients struct {
	Store    *store.Store
	Mailbox  *mailbox.Mailbox
	Temporal client.Client
	Metrics  *metrics.Metrics
}

// Graph is a process's services, each built once.
type Graph struct {
	Clients
	// Org is the org the services read, once per operation.
	Org config.Source
	// Seats is the one door to the seats' workflows.
	Seats      *seatclient.Client
	Delivery   *delivery.Service
	Reconciler *reconcile.Reconciler
	Spawn      *spawn.Service
	Tickets    *tickets.Service
	Profiles   *profiles.Service
	Approvals  *approvals.Service
	Views      *views.Reader
}

// New builds the graph of org over c. The services log to log; a process
// that runs a node passes its node's logger, so their lines name the node as
// the node's own do.
func New(org config.Source, c Clients, log *slog.Logger) *Graph {
	g := &Graph{Clients: c, Org: org}
	g.Seats = seatclient.New(c.Temporal, org)
	g.Delivery = delivery.New(org, c.Mailbox, g.Seats, c.Store, c.Metrics, log)
	g.Reconciler = reconcile.New(c.Store, c.Mailbox, g.Seats, g.Delivery, log)
	g.Spawn = &spawn.Service{Org: org, Store: c.Store, Mailbox: c.Mailbox, Seats: g.Seats, Prepare: g.Reconciler.PrepareSeats, Log: log}
	g.Tickets = tickets.New(org, c.Store, g.Delivery, g.Seats, g.Spawn.Spawn, c.Metrics, log)
	g.Profiles = profiles.New(g.Seats, c.Store, org, c.Metrics, log)
	g.Approvals = &approvals.Service{Org: org, Store: c.Store, Seats: g.Seats, Log: log}
	g.Views = views.New(org, g.Seats, c.Store, c.Mailbox)
	return g
}
