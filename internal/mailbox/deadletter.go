package mailbox

import (
	"context"

	"github.com/crewlet/crewlet"
)

// DeadLetterNow moves a seat's entries to the dead-letter stream at once,
// with the reason, and acks them: for triggers that can never succeed, so
// they do not spend their whole delivery budget first. It returns the
// messages it moved; entries already gone are left out.
func (m *Mailbox) DeadLetterNow(ctx context.Context, handle string, streamIDs []string, reason string) ([]crewlet.Message, error) {
	msgs, err := m.Get(ctx, handle, streamIDs)
	if err != nil {
		return nil, err
	}
	counts, err := m.deliveries(ctx, handle, msgs)
	if err != nil {
		return nil, err
	}
	for _, msg := range msgs {
		if err := m.deadLetter(ctx, handle, msg, counts[msg.StreamID], reason); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}
