package config

import "github.com/crewlet/crewlet"

// Seat returns the seat with the given handle.
func (c *Config) Seat(handle string) (Seat, bool) {
	for _, s := range c.Seats {
		if s.Handle == handle {
			return s, true
		}
	}
	return Seat{}, false
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

// ProfileOf returns the profile and role of an agent seat; false for an
// unknown handle, a human seat, or a role or profile that does not exist.
func (c *Config) ProfileOf(handle string) (Profile, Role, bool) {
	s, ok := c.Seat(handle)
	if !ok || s.kind() != string(crewlet.SeatAgent) {
		return Profile{}, Role{}, false
	}
	r, ok := c.Roles[s.Role]
	if !ok {
		return Profile{}, Role{}, false
	}
	p, ok := c.Profiles[r.Profile]
	if !ok {
		return Profile{}, Role{}, false
	}
	return p, r, true
}

// Handles returns every seat handle, in file order.
func (c *Config) Handles() []string {
	out := make([]string, len(c.Seats))
	for i, s := range c.Seats {
		out[i] = s.Handle
	}
	return out
}
