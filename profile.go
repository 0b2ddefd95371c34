package crewlet

import "time"

// Selection policies of a role's profile pool
// (docs/architecture.md, "Profile pools").
const (
	// SelectionWeighted spreads turns over the pool's profiles in the ratio
	// of their weights (smooth weighted round-robin).
	SelectionWeighted = "weighted"
	// SelectionOrdered takes the first profile of the pool that can take
	// the turn: cheapest first, paying for overflow only.
	SelectionOrdered = "ordered"
)

// Reasons a profile cannot take a turn now.
const (
	UnavailableQuarantined = "quarantined"
	UnavailableCoolingOff  = "cooling_off"
	UnavailableDisabled    = "disabled"
	UnavailableMaxLoad     = "max_load"
	UnavailableWeightZero  = "weight_zero"
)

// QuarantineMultiplierCap caps a quarantine's escalation: the cooldown
// doubles with each consecutive usage-limit refusal up to this many times
// the base.
const QuarantineMultiplierCap = 12

// CoolingOff is how long a credential cools off after a failure other than
// a usage limit (a server error, a refused connection, a timeout), so that
// turns fail over to the rest of their pool meanwhile. Flat on purpose:
// escalating it would turn a passing error storm into an outage of hours.
const CoolingOff = 60 * time.Second

// ProfileQuarantine says a credential refused for a usage limit and is not
// used until Until.
type ProfileQuarantine struct {
	Credential  string    `json:"credential"`
	Until       time.Time `json:"until"`
	SecondsLeft int64     `json:"seconds_left"`
	// Attempt counts consecutive refusals: 1 for the first, 2 for the next
	// within one base of the last quarantine's end, and so on. It keeps
	// growing past the cap on the cooldown.
	Attempt int    `json:"attempt"`
	Reason  string `json:"reason"`
}

// ProfileCoolingOff says a credential's provider failed a turn (a server
// error, a refused connection, a timeout) and is not used until Until.
type ProfileCoolingOff struct {
	Credential  string    `json:"credential"`
	Until       time.Time `json:"until"`
	SecondsLeft int64     `json:"seconds_left"`
	Reason      string    `json:"reason"`
}

// ProfileStatus is one profile as GET /profiles shows it.
type ProfileStatus struct {
	Name       string `json:"name"`
	Provider   string `json:"provider"`
	Model      string `json:"model,omitempty"`
	Credential string `json:"credential"`
	Weight     int    `json:"weight"`
	// MaxLoad is the most concurrent turns on the profile fleet-wide; nil
	// means unlimited.
	MaxLoad *int `json:"max_load"`
	// Live counts the turns holding a slot of the profile now.
	Live int `json:"live"`
	// Free is how many more turns the profile takes now: 0 while it is
	// quarantined, cooling off or disabled whatever its load; nil when it
	// is unlimited and available.
	Free       *int               `json:"free"`
	Quarantine *ProfileQuarantine `json:"quarantine,omitempty"`
	CoolingOff *ProfileCoolingOff `json:"cooling_off,omitempty"`
	// Disabled says the profile's model is switched off (POST
	// /models/{id}/disable).
	Disabled bool `json:"disabled"`
	// AnsweredModel is the model the provider said answered, when it
	// differs from Model.
	AnsweredModel string `json:"answered_model,omitempty"`
}

// ProfileUnavailable is one profile of a pool that cannot take a turn now,
// and why. Until is when it frees by itself (a quarantine or cooling-off
// ends); nil when only a freed slot or an operator can free it.
type ProfileUnavailable struct {
	Profile string     `json:"profile"`
	Reason  string     `json:"reason"`
	Until   *time.Time `json:"until,omitempty"`
}

// ProfileHold says why a turn waits: no profile of its pool can take it.
// The turn's triggers stay read and unanswered, spending no delivery, and
// it runs as soon as a profile frees.
type ProfileHold struct {
	Profiles []ProfileUnavailable `json:"profiles"`
	// Until is the soonest one of them frees by itself; nil when none will.
	Until *time.Time `json:"until,omitempty"`
	Since time.Time  `json:"since"`
}

// ModelSwitch is a model switched off (or back on) at runtime.
type ModelSwitch struct {
	Model    string    `json:"model"`
	Disabled bool      `json:"disabled"`
	By       string    `json:"by"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}
