package firstparty

import (
	"testing"

	"github.com/crewlet/crewlet"
)

// The asking turn is told who really answered: the delegating seat as
// itself, and anyone else (an admin answering for it, the person behind
// "operator") by name, with whom they answered for.
func TestAnswerTextNamesTheAnswerer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		ticket crewlet.Ticket
		want   string
	}{
		{crewlet.Ticket{ID: "t-1", From: "cto", Phase: crewlet.TicketPending, Answer: "use staging", AnsweredBy: "cto"},
			"Answer from cto:\n\nuse staging"},
		{crewlet.Ticket{ID: "t-2", From: "alice", Phase: crewlet.TicketPending, Answer: "ship it", AnsweredBy: "ann"},
			"Answer from ann (answering for alice, who delegated this ticket):\n\nship it"},
		{crewlet.Ticket{ID: "t-3", From: "operator", Phase: crewlet.TicketPending, Answer: "no", AnsweredBy: "otto"},
			"Answer from otto (answering for operator, who delegated this ticket):\n\nno"},
	} {
		if got := (Tools{}).AnswerText(c.ticket, false); got != c.want {
			t.Errorf("AnswerText(%s answered by %s) = %q; want %q", c.ticket.ID, c.ticket.AnsweredBy, got, c.want)
		}
	}
}
