package config

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"

	"github.com/crewlet/crewlet"
)

// Seat returns the seat with the given handle.
func (c *Config) Seat(handle string) (Seat, bool) {
	for _, s := range c.Seats {
		if s.Handle == handle {
			return s, true
		}
	}
	return Seat{}, false
}

// SeatNamed returns the seat with the given handle, or ENOTFOUND naming the
// company and how to list its seats: what every service says of a handle
// the org does not have.
func (c *Config) SeatNamed(handle string) (Seat, error) {
	s, ok := c.Seat(handle)
	if !ok {
		return Seat{}, NoSeat(c, handle)
	}
	return s, nil
}

// SeatIn is SeatNamed on the org src runs, caught up with the active
// revision when the seat is not known yet (Known).
func SeatIn(ctx context.Context, src Source, handle string) (Seat, error) {
	s, org, ok := Known(ctx, src, func(c *Config) (Seat, bool) { return c.Seat(handle) })
	if !ok {
		return Seat{}, NoSeat(org, handle)
	}
	return s, nil
}

// NoSeat is the error of a handle org has no seat for.
func NoSeat(org *Config, handle string) error {
	return crewlet.Errorf(crewlet.ENOTFOUND, "no seat %q in company %s; `crewlet seats ls` lists them", handle, org.Company.Name)
}

// AgentSeat returns the seat with the given handle if it is an agent seat:
// one that runs turns.
func (c *Config) AgentSeat(handle string) (Seat, bool) {
	s, ok := c.Seat(handle)
	return s, ok && s.kind() == string(crewlet.SeatAgent)
}

// AgentSeats returns the seats that run turns, in file order.
func (c *Config) AgentSeats() []Seat {
	var out []Seat
	for _, s := range c.Seats {
		if s.kind() == string(crewlet.SeatAgent) {
			out = append(out, s)
		}
	}
	return out
}

// Handles returns every seat handle, in file order.
func (c *Config) Handles() []string {
	out := make([]string, len(c.Seats))
	for i, s := range c.Seats {
		out[i] = s.Handle
	}
	return out
}

// SeatsDigest names the org's seats and their kinds, whatever their order
// in the file. Two processes with different digests run org files that
// disagree about which seats exist, as they do while a changed file rolls
// out; anything else in the file may differ without changing it.
func (c *Config) SeatsDigest() string {
	lines := make([]string, len(c.Seats))
	for i, s := range c.Seats {
		lines[i] = s.Handle + " " + s.kind()
	}
	sort.Strings(lines)
	sum := sha256.Sum256([]byte(strings.Join(lines, "\n")))
	return hex.EncodeToString(sum[:8])
}

// PlacementGroup is the agent seats whose roles ask for the same node labels.
type PlacementGroup struct {
	// Key is the labels in a canonical form: "key=value" pairs sorted by key
	// and joined with ",", e.g. "tools=git,zone=eu"; "" for no labels.
	Key string
	// Labels is a copy of the roles' placement labels; nil for none.
	Labels map[string]string
	// Seats are the handles of the group's agent seats, in file order.
	Seats []string
}

// PlacementGroups groups the agent seats by their role's placement labels,
// sorted by Key. Human seats are in no group. A seat whose role does not
// exist counts as having no labels.
func (c *Config) PlacementGroups() []PlacementGroup {
	var out []PlacementGroup
	at := map[string]int{}
	for _, s := range c.AgentSeats() {
		labels := c.Roles[s.Role].Placement.Labels
		key := LabelsKey(labels)
		i, ok := at[key]
		if !ok {
			i = len(out)
			at[key] = i
			out = append(out, PlacementGroup{Key: key, Labels: copyLabels(labels)})
		}
		out[i].Seats = append(out[i].Seats, s.Handle)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// SeatPlacement returns the placement group of an agent seat; false for an
// unknown handle or a human seat.
func (c *Config) SeatPlacement(handle string) (PlacementGroup, bool) {
	s, ok := c.Seat(handle)
	if !ok || s.kind() != string(crewlet.SeatAgent) {
		return PlacementGroup{}, false
	}
	key := LabelsKey(c.Roles[s.Role].Placement.Labels)
	for _, g := range c.PlacementGroups() {
		if g.Key == key {
			return g, true
		}
	}
	return PlacementGroup{}, false
}

// LabelsKey writes labels in the canonical form of PlacementGroup.Key. Valid
// labels hold neither "=" nor ",", so distinct label sets get distinct keys.
func LabelsKey(labels map[string]string) string {
	keys := sortedKeys(labels)
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = k + "=" + labels[k]
	}
	return strings.Join(pairs, ",")
}

func copyLabels(labels map[string]string) map[string]string {
	if len(labels) == 0 {
		return nil
	}
	out := make(map[string]string, len(labels))
	for k, v := range labels {
		out[k] = v
	}
	return out
}
