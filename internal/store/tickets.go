package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/crewlet/crewlet"
)

const ticketColumns = `id, from_handle, from_seat, to_handle, routed_from, task, conversation, phase, question, asked_at,
	answer, reply, reason, request_event, created_at, updated_at, settled_at, waiter, ask_waiter, ask_key, hops, chain,
	opened_by, answered_by, remote_task, remote_context, parent`

func scanTicket(r pgx.Row) (crewlet.Ticket, error) {
	var t crewlet.Ticket
	err := r.Scan(&t.ID, &t.From, &t.FromSeat, &t.To, &t.RoutedFrom, &t.Task, &t.Conversation, &t.Phase, &t.Question,
		&t.AskedAt, &t.Answer, &t.Reply, &t.Reason, &t.RequestEvent, &t.CreatedAt, &t.UpdatedAt, &t.SettledAt,
		&t.Waiter, &t.AskWaiter, &t.AskKey, &t.Hops, &t.Chain, &t.OpenedBy, &t.AnsweredBy, &t.RemoteTask, &t.RemoteContext, &t.Parent)
	return t, err
}

// TicketID is the id of the ticket a create key makes: the same key, the same
// ticket.
func TicketID(createKey string) string {
	sum := sha256.Sum256([]byte(createKey))
	return "t-" + hex.EncodeToString(sum[:6])
}

// CreateTicket records a pending ticket, keyed on createKey: creating it again
// (a tool call or a request retried) returns the ticket already there, with
// created false. t's ID and RequestEvent are set from the key, and the
// thread serving it is keyed on its request (what its cost reads). A ticket
// given no chain is its delegator's first hop.
func (s *Store) CreateTicket(ctx context.Context, createKey string, t crewlet.Ticket) (crewlet.Ticket, bool, error) {
	if len(t.Chain) == 0 {
		t.Hops, t.Chain = 1, []string{t.From}
	}
	t.ID = TicketID(createKey)
	t.RequestEvent = crewlet.TicketRequestEventID(t.ID)
	stored, err := scanTicket(s.pool.QueryRow(ctx, `
		INSERT INTO tickets (id, create_key, from_handle, from_seat, to_handle, routed_from, task, conversation, request_event, hops, chain, opened_by,
			parent, serve_key)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
		ON CONFLICT (create_key) DO NOTHING
		RETURNING `+ticketColumns,
		t.ID, createKey, t.From, t.FromSeat, t.To, t.RoutedFrom, t.Task, t.Conversation, t.RequestEvent, t.Hops, t.Chain, t.OpenedBy,
		t.Parent, crewlet.ThreadKey(t.RequestEvent)))
	if errors.Is(err, pgx.ErrNoRows) {
		stored, err = s.Ticket(ctx, t.ID)
		return stored, false, err
	}
	if err != nil {
		return crewlet.Ticket{}, false, fmt.Errorf("create ticket: %w", schemaMissing(err))
	}
	return stored, true, nil
}

// Ticket returns one ticket; ENOTFOUND when there is none.
func (s *Store) Ticket(ctx context.Context, id string) (crewlet.Ticket, error) {
	t, err := scanTicket(s.pool.QueryRow(ctx, `SELECT `+ticketColumns+` FROM tickets WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return crewlet.Ticket{}, crewlet.Errorf(crewlet.ENOTFOUND, "no ticket %q; `crewlet tickets ls` lists them", id)
	}
	if err != nil {
		return crewlet.Ticket{}, fmt.Errorf("read ticket %s: %w", id, schemaMissing(err))
	}
	return t, nil
}

// TicketFilter narrows a ticket listing; empty fields match everything.
type TicketFilter struct {
	From, To string
	// Party keeps the tickets the seat opened or serves.
	Party string
	// OpenedBy keeps the tickets this API principal opened.
	OpenedBy string
	Phase    crewlet.TicketPhase
	// Open keeps pending and asking tickets only.
	Open bool
	// Before keeps the tickets listed after this one (a ticket id: the
	// last of the previous page), so a long list is read a page at a time.
	Before string
	Limit  int
}

// Tickets lists tickets, newest first.
func (s *Store) Tickets(ctx context.Context, f TicketFilter) ([]crewlet.Ticket, error) {
	if f.Limit <= 0 {
		f.Limit = 50
	}
	rows, err := s.pool.Query(ctx, `
		SELECT `+ticketColumns+` FROM tickets
		WHERE ($1 = '' OR from_handle = $1) AND ($2 = '' OR to_handle = $2) AND ($3 = '' OR phase = $3)
		  AND (NOT $4 OR phase IN ('pending', 'asking')) AND ($6 = '' OR from_handle = $6 OR to_handle = $6)
		  AND ($7 = '' OR EXISTS (SELECT 1 FROM tickets b WHERE b.id = $7
		      AND (tickets.created_at < b.created_at OR (tickets.created_at = b.created_at AND tickets.id > b.id))))
		  AND ($8 = '' OR opened_by = $8)
		ORDER BY created_at DESC, id LIMIT $5`, f.From, f.To, string(f.Phase), f.Open, f.Limit, f.Party, f.Before, f.OpenedBy)
	if err != nil {
		return nil, fmt.Errorf("list tickets: %w", schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (crewlet.Ticket, error) { return scanTicket(r) })
	if err != nil {
		return nil, fmt.Errorf("list tickets: %w", err)
	}
	return out, nil
}

// OpenTicketCounts returns how many open tickets each of the handles serves.
func (s *Store) OpenTicketCounts(ctx context.Context, handles []string) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT to_handle, count(*) FROM tickets WHERE to_handle = ANY($1) AND phase IN ('pending', 'asking') GROUP BY to_handle`, handles)
	if err != nil {
		return nil, fmt.Errorf("count open tickets: %w", schemaMissing(err))
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var h string
		var n int
		if err := rows.Scan(&h, &n); err != nil {
			return nil, fmt.Errorf("count open tickets: %w", err)
		}
		out[h] = n
	}
	return out, rows.Err()
}

// OpenTicketsByPhase counts the tickets not yet ended, by phase.
func (s *Store) OpenTicketsByPhase(ctx context.Context) (map[string]int, error) {
	rows, err := s.pool.Query(ctx, `SELECT phase, count(*) FROM tickets WHERE phase IN ('pending', 'asking') GROUP BY phase`)
	if err != nil {
		return nil, fmt.Errorf("count open tickets: %w", schemaMissing(err))
	}
	out := map[string]int{"pending": 0, "asking": 0}
	var phase string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&phase, &n}, func() error {
		out[phase] = n
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("count open tickets: %w", err)
	}
	return out, nil
}

// SettleTicket records the reply that settles an open ticket. Exactly one
// reply settles a ticket: settled is false, and the ticket is returned as it
// stands, when it was not open any more.
func (s *Store) SettleTicket(ctx context.Context, id, reply string) (crewlet.Ticket, bool, error) {
	return s.endTicket(ctx, id, `phase = 'done', reply = $2`, reply)
}

// EndTicket ends an open ticket failed, cancelled or expired with its
// reason; ended is false, and the ticket is returned as it stands, when it
// was not open any more.
func (s *Store) EndTicket(ctx context.Context, id string, phase crewlet.TicketPhase, reason string) (crewlet.Ticket, bool, error) {
	switch phase {
	case crewlet.TicketFailed, crewlet.TicketCancelled, crewlet.TicketExpired:
	default:
		return crewlet.Ticket{}, false, crewlet.Errorf(crewlet.EINVALID, "a ticket cannot be ended %s", phase)
	}
	return s.endTicket(ctx, id, `phase = '`+string(phase)+`', reason = $2`, reason)
}

func (s *Store) endTicket(ctx context.Context, id, set, text string) (crewlet.Ticket, bool, error) {
	t, err := scanTicket(s.pool.QueryRow(ctx, `
		UPDATE tickets SET `+set+`, updated_at = now(), settled_at = now()
		WHERE id = $1 AND phase IN ('pending', 'asking')
		RETURNING `+ticketColumns, id, text))
	if errors.Is(err, pgx.ErrNoRows) {
		t, err = s.Ticket(ctx, id)
		return t, false, err
	}
	if err != nil {
		return crewlet.Ticket{}, false, fmt.Errorf("end ticket %s: %w", id, schemaMissing(err))
	}
	return t, true, nil
}

// FailTicketsTo fails every open ticket a seat serves, asking ones too: the
// seat was stopped or removed, which is certain, so nobody can answer them.
func (s *Store) FailTicketsTo(ctx context.Context, handle, reason string) ([]crewlet.Ticket, error) {
	return s.endTickets(ctx, `to_handle = $1`, handle, crewlet.TicketFailed, reason)
}

// ExpireTickets ends every open ticket older than age.
func (s *Store) ExpireTickets(ctx context.Context, age time.Duration) ([]crewlet.Ticket, error) {
	return s.endTickets(ctx, `created_at < now() - make_interval(secs => $1)`, age.Seconds(), crewlet.TicketExpired,
		fmt.Sprintf("not settled within %s (tickets.expire_after)", age))
}

func (s *Store) endTickets(ctx context.Context, where string, arg any, phase crewlet.TicketPhase, reason string) ([]crewlet.Ticket, error) {
	rows, err := s.pool.Query(ctx, `
		UPDATE tickets SET phase = $2, reason = $3, updated_at = now(), settled_at = now()
		WHERE `+where+` AND phase IN ('pending', 'asking')
		RETURNING `+ticketColumns, arg, string(phase), reason)
	if err != nil {
		return nil, fmt.Errorf("end tickets %s: %w", phase, schemaMissing(err))
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (crewlet.Ticket, error) { return scanTicket(r) })
	if err != nil {
		return nil, fmt.Errorf("end tickets %s: %w", phase, err)
	}
	return out, nil
}

// updateTicket runs one UPDATE ... RETURNING of a ticket; changed is false,
// and the ticket is returned as it stands, when the WHERE matched nothing.
func (s *Store) updateTicket(ctx context.Context, what, id, sql string, args ...any) (crewlet.Ticket, bool, error) {
	t, err := scanTicket(s.pool.QueryRow(ctx, sql+` RETURNING `+ticketColumns, append([]any{id}, args...)...))
	if errors.Is(err, pgx.ErrNoRows) {
		t, err = s.Ticket(ctx, id)
		return t, false, err
	}
	if err != nil {
		return crewlet.Ticket{}, false, fmt.Errorf("%s ticket %s: %w", what, id, schemaMissing(err))
	}
	return t, true, nil
}

// SetRemoteTask records the remote task and context serving a ticket to
// a remote agent; the first recorded stays.
func (s *Store) SetRemoteTask(ctx context.Context, id, task, contextID string) (crewlet.Ticket, error) {
	t, _, err := s.updateTicket(ctx, "record the remote task of", id, `
		UPDATE tickets SET remote_task = $2, remote_context = $3, updated_at = now() WHERE id = $1 AND remote_task = ''`, task, contextID)
	return t, err
}

// WaitTicket makes a turn the waiter of a pending ticket: it is signalled
// when the ticket settles, fails or asks. waiting is false when the ticket
// is not pending (asking, or ended): the caller has its outcome already.
func (s *Store) WaitTicket(ctx context.Context, id, waiter string) (crewlet.Ticket, bool, error) {
	return s.updateTicket(ctx, "wait on", id, `
		UPDATE tickets SET waiter = $2, updated_at = now() WHERE id = $1 AND phase = 'pending'`, waiter)
}

// StopWaiting ends a turn's wait on a ticket and returns the ticket as it
// stands: whoever changes it after this tells the delegator by a notice, not
// by signalling the turn. Row locking orders it against a settle, so the
// outcome is in the returned ticket or in a notice, never in neither.
func (s *Store) StopWaiting(ctx context.Context, id, waiter string) (crewlet.Ticket, error) {
	t, _, err := s.updateTicket(ctx, "stop waiting on", id, `
		UPDATE tickets SET waiter = '', updated_at = now() WHERE id = $1 AND waiter = $2`, waiter)
	return t, err
}

// AskTicket puts a question on a pending ticket from the serving turn's
// call askKey: the ticket goes asking and the turn waits as askWaiter. The
// same call asking again (a re-run) changes nothing. asked is false when
// the ticket could not take the question (ended, or asking from another
// call).
func (s *Store) AskTicket(ctx context.Context, id, question, askKey, askWaiter string) (crewlet.Ticket, bool, error) {
	return s.updateTicket(ctx, "ask on", id, `
		UPDATE tickets SET phase = 'asking', question = $2, asked_at = now(), answer = '', answered_by = '', ask_key = $3, ask_waiter = $4, updated_at = now()
		WHERE id = $1 AND phase = 'pending' AND ask_key <> $3`, question, askKey, askWaiter)
}

// AnswerTicket records the answer to an asking ticket's question, and who
// gave it, and returns it to pending, the one move back a phase may make.
// answered is false when no question was waiting. A ticket that asks a
// money window's question (budget_asks) records the answer there too, read
// as budgetDecision, in the same statement: an answer taken is never lost
// to the budget.
func (s *Store) AnswerTicket(ctx context.Context, id, answer, by, budgetDecision string) (crewlet.Ticket, bool, error) {
	return s.updateTicket(ctx, "answer", id, `
		WITH decided AS (
			UPDATE budget_asks SET decision = $4, answer = $2, answered_by = $3, answered_at = now()
			WHERE ticket_id = $1 AND decision = 'waiting' AND EXISTS (SELECT 1 FROM tickets WHERE id = $1 AND phase = 'asking')
		)
		UPDATE tickets SET phase = 'pending', answer = $2, answered_by = $3, updated_at = now() WHERE id = $1 AND phase = 'asking'`,
		answer, by, budgetDecision)
}

// StopAsking ends the serving turn's wait for an answer to the question
// askKey put: unanswered, the ticket returns to pending (the turn decides
// itself). It returns the ticket as it stands.
func (s *Store) StopAsking(ctx context.Context, id, askKey string) (crewlet.Ticket, error) {
	t, _, err := s.updateTicket(ctx, "stop asking on", id, `
		UPDATE tickets SET phase = CASE WHEN phase = 'asking' THEN 'pending' ELSE phase END, ask_waiter = '', updated_at = now()
		WHERE id = $1 AND ask_key = $2 AND ask_waiter <> ''`, askKey)
	return t, err
}

// ForgetWaiter clears a turn from every ticket it waits on: the turn ended
// (finished, failed, stopped), and what it waited for reaches the seat by a
// notice instead.
func (s *Store) ForgetWaiter(ctx context.Context, turnID string) error {
	_, err := s.pool.Exec(ctx, forgetWaiterSQL, turnID)
	if err != nil {
		return fmt.Errorf("forget waiter %s: %w", turnID, schemaMissing(err))
	}
	return nil
}

// forgetWaiterSQL is ForgetWaiter's statement, also sent by CloseTurn.
const forgetWaiterSQL = `
	UPDATE tickets SET waiter = CASE WHEN waiter = $1 THEN '' ELSE waiter END,
	                   ask_waiter = CASE WHEN ask_waiter = $1 THEN '' ELSE ask_waiter END,
	                   phase = CASE WHEN ask_waiter = $1 AND phase = 'asking' THEN 'pending' ELSE phase END
	WHERE waiter = $1 OR ask_waiter = $1`
