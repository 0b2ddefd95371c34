package api_test

import (
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/profiles"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/views"
)

// withServices gives s its services over its org and store, with no
// Temporal and no Redis: what a test of the API's own checks and of its
// Postgres reads needs.
func withServices(s *api.Server) *api.Server {
	seats := seatclient.New(nil, s.Org)
	s.Seats = seats
	s.Delivery = delivery.New(s.Org, nil, seats, nil, nil, s.Log)
	s.Views = views.New(s.Org, seats, s.Store, nil)
	if s.Store != nil {
		s.Tickets = tickets.New(s.Org, s.Store, s.Delivery, seats, nil, nil, s.Log)
		s.Profiles = profiles.New(seats, s.Store, s.Org, nil, s.Log)
		s.Approvals = &approvals.Service{Org: s.Org, Store: s.Store, Seats: seats, Log: s.Log}
	}
	return s
}
