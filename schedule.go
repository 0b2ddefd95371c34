package crewlet

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"time"
)

// ScheduleSender is the sender of the mail an org schedule's fire sends
// (docs/architecture.md, "Schedules"). It is no seat, so the answer of
// the turn a fire starts is recorded in its conversation, not mailed.
const ScheduleSender = "schedules"

// ScheduleFireEventID is the event id of the message a schedule's fire
// sends: one id per (schedule, scheduled fire time), so a fire that
// Temporal retries, catches up or starts twice lands in the mailbox and
// the completion ledger once.
func ScheduleFireEventID(schedule string, fireTime time.Time) string {
	sum := sha256.Sum256([]byte(schedule + "\x00" + fireTime.UTC().Format(time.RFC3339Nano)))
	return ScheduleEventPrefix + hex.EncodeToString(sum[:16])
}

// Prefixes of the event ids crewlet derives, which also name the
// conversations they start: a schedule's fire (ScheduleFireEventID) and a
// seat's send_message (its tool call's key).
const (
	ScheduleEventPrefix = "schedule-"
	ToolEventPrefix     = "tool-"
)

// DerivedConversation reports whether id is of the shape crewlet gives the
// conversations it starts itself, which no caller may start in its stead.
func DerivedConversation(id string) bool {
	return strings.HasPrefix(id, ScheduleEventPrefix) || strings.HasPrefix(id, ToolEventPrefix)
}

// ScheduleFireInput is the input of one fire of an org schedule: the
// schedule's name (its target and text are read from the org at the fire)
// and, when the fire was not started by the schedule itself, the fire time
// it stands for. A fire the schedule started reads its scheduled time from
// Temporal instead.
type ScheduleFireInput struct {
	Schedule string    `json:"schedule"`
	FireTime time.Time `json:"fire_time,omitzero"`
}

// ScheduleFireResult is what one fire did.
type ScheduleFireResult struct {
	Seat     string    `json:"seat"`
	EventID  string    `json:"event_id"`
	FireTime time.Time `json:"fire_time"`
	// Handled says the seat's turn answered the message (recorded it in
	// its completion ledger) before the fire stopped waiting; a human
	// seat's mail is never waited on.
	Handled bool `json:"handled"`
}

// DeliverFireInput is the input of the activity that delivers a fire's
// message.
type DeliverFireInput struct {
	Schedule string    `json:"schedule"`
	FireTime time.Time `json:"fire_time"`
}

// DeliverFireOutput says where a fire's message went.
type DeliverFireOutput struct {
	Seat    string `json:"seat"`
	EventID string `json:"event_id"`
	// Await says the seat runs turns, so the fire waits for its answer.
	Await bool `json:"await"`
}

// AwaitFireInput is the input of the activity that waits for a fire's
// message to be answered.
type AwaitFireInput struct {
	Schedule string    `json:"schedule"`
	FireTime time.Time `json:"fire_time"`
	Seat     string    `json:"seat"`
	EventID  string    `json:"event_id"`
}
