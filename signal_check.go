package crewlet

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// Checks of signal payloads, one per payload type, shared by the workflow
// that receives the signal and the seat client that sends it. The Temporal
// frontend is a second door to seats and turns: whoever reaches it can
// signal them with anything, so the workflow drops and logs a payload that
// fails its check, and the seat client refuses one before sending it. The
// workflow's verdict on a payload is part of its history's replay: a check
// that accepts or refuses differently must go behind a workflow version.
// Errors name the field and never quote its content.

// Bounds of signal payload fields. They are the API door's bounds (input.go)
// where the door has one, and at least what crewlet itself sends.
const (
	// MaxNodeBytes bounds a node incarnation (workers.Incarnation): a host
	// name (at most 253 bytes), ':' and 8 hex digits.
	MaxNodeBytes = 264
	// MaxByBytes bounds who asked: a principal's name (the door's bound),
	// or a node's incarnation, which a node drain's moves are by.
	MaxByBytes = max(MaxNameBytes, MaxNodeBytes)
	// signalIDPunct is what an id field of a signal (by, exclude_node,
	// node, ticket) may hold besides letters and digits: the door's id
	// charset (principal names, host names, node incarnations, ticket
	// ids); no spaces, controls or quotes.
	signalIDPunct = "._@:-"
)

// Validate checks a pause payload.
func (r PauseRequest) Validate() error {
	return firstErr(checkSignalReason(r.Reason), checkSignalID("by", r.By, MaxByBytes))
}

// Validate checks a resume payload.
func (r ResumeRequest) Validate() error {
	return checkSignalID("by", r.By, MaxByBytes)
}

// Validate checks a drain payload.
func (r DrainRequest) Validate() error {
	return firstErr(checkSignalReason(r.Reason), checkSignalID("by", r.By, MaxByBytes))
}

// Validate checks a move payload.
func (r MoveRequest) Validate() error {
	return firstErr(checkSignalID("exclude_node", r.ExcludeNode, MaxNodeBytes),
		checkSignalReason(r.Reason), checkSignalID("by", r.By, MaxByBytes))
}

// Validate checks a host_lost payload: it must name the node.
func (r HostLostRequest) Validate() error {
	if r.Node == "" {
		return Errorf(EINVALID, "node: empty")
	}
	return firstErr(checkSignalID("node", r.Node, MaxNodeBytes), checkSignalID("by", r.By, MaxByBytes))
}

// Validate checks a stop payload.
func (r StopRequest) Validate() error {
	return firstErr(checkSignalReason(r.Reason), checkSignalID("by", r.By, MaxByBytes))
}

// Validate checks a stop_turn payload.
func (r StopTurnRequest) Validate() error {
	return firstErr(checkSignalReason(r.Reason), checkSignalID("by", r.By, MaxByBytes))
}

// Validate checks a ticket payload: it must name the ticket.
func (r TicketSignal) Validate() error {
	if r.Ticket == "" {
		return Errorf(EINVALID, "ticket: empty")
	}
	return checkSignalID("ticket", r.Ticket, MaxIDBytes)
}

// maxTurnIDBytes bounds a turn id: "turn/", a handle, "/", a work key.
const maxTurnIDBytes = 256

// TurnNudge is the payload of UpdateNudgeTurn: the turn it is for and what
// changed, exactly one of a ticket, an approval, or a profile that freed.
type TurnNudge struct {
	Turn        string `json:"turn"`
	Ticket      string `json:"ticket,omitempty"`
	Approval    string `json:"approval,omitempty"`
	ProfileFree bool   `json:"profile_free,omitempty"`
}

// Validate checks a nudge: a turn id, and one thing that changed.
func (n TurnNudge) Validate() error {
	if len(n.Turn) > maxTurnIDBytes {
		return Errorf(EINVALID, "turn: %d bytes, more than %d", len(n.Turn), maxTurnIDBytes)
	}
	if _, _, ok := ParseTurnID(n.Turn); !ok || !utf8.ValidString(n.Turn) {
		return Errorf(EINVALID, "turn: not a turn id (turn/HANDLE/WORK_KEY)")
	}
	kinds := 0
	if n.Ticket != "" {
		kinds++
		if err := (TicketSignal{Ticket: n.Ticket}).Validate(); err != nil {
			return err
		}
	}
	if n.Approval != "" {
		kinds++
		if err := (ApprovalSignal{Approval: n.Approval}).Validate(); err != nil {
			return err
		}
	}
	if n.ProfileFree {
		kinds++
	}
	if kinds != 1 {
		return Errorf(EINVALID, "a nudge names exactly one of ticket, approval and profile_free; it names %d", kinds)
	}
	return nil
}

// Validate checks a ticket_note payload: it must name the ticket.
func (id TicketNoteSignal) Validate() error {
	return TicketSignal{Ticket: string(id)}.Validate()
}

// checkSignalReason validates free text as the door does: bounded, valid
// UTF-8, no NUL (Postgres text refuses it).
func checkSignalReason(s string) error {
	return CheckText("reason", s, MaxReasonBytes)
}

// checkSignalID validates an id-like field: bounded, letters, digits and
// signalIDPunct only. Empty is allowed (crewlet sends by "" when nobody was
// named).
func checkSignalID(field, s string, limit int) error {
	switch {
	case len(s) > limit:
		return Errorf(EINVALID, "%s: %d bytes, more than %d", field, len(s), limit)
	case !utf8.ValidString(s):
		return Errorf(EINVALID, "%s: not valid UTF-8", field)
	case strings.IndexByte(s, 0) >= 0:
		return Errorf(EINVALID, "%s: contains NUL", field)
	}
	for _, r := range s {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && !strings.ContainsRune(signalIDPunct, r) {
			return Errorf(EINVALID, "%s: only letters, digits and %q are allowed", field, signalIDPunct)
		}
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
