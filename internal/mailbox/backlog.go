package mailbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/crewlet/crewlet"
)

// backlogChunk is how many seats one pipelined round asks about.
const backlogChunk = 1000

// Backlogs returns each seat's backlog: its entries not yet acked (unread,
// or read and not acked) and when the oldest of them was published. A seat
// without a mailbox yet has none. It costs two pipelined rounds per 1,000
// seats.
func (m *Mailbox) Backlogs(ctx context.Context, handles []string) (map[string]crewlet.Backlog, error) {
	out := make(map[string]crewlet.Backlog, len(handles))
	for start := 0; start < len(handles); start += backlogChunk {
		if err := m.backlogs(ctx, handles[start:min(start+backlogChunk, len(handles))], out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func (m *Mailbox) backlogs(ctx context.Context, handles []string, out map[string]crewlet.Backlog) error {
	pipe := m.rdb.Pipeline()
	groups := make([]*redis.XInfoGroupsCmd, len(handles))
	pending := make([]*redis.XPendingCmd, len(handles))
	for i, h := range handles {
		groups[i] = pipe.XInfoGroups(ctx, m.Stream(h))
		pending[i] = pipe.XPending(ctx, m.Stream(h), m.Group(h))
	}
	if _, err := pipe.Exec(ctx); err != nil && !noMailbox(err) {
		return fmt.Errorf("read mailbox backlogs: %w", err)
	}
	// The first unread entry of each seat, after the last one handed out.
	pipe = m.rdb.Pipeline()
	unread := make([]*redis.XMessageSliceCmd, len(handles))
	for i, h := range handles {
		for _, g := range groups[i].Val() {
			if g.Name != m.Group(h) {
				continue
			}
			b := crewlet.Backlog{Waiting: max(0, g.Lag)}
			if p := pending[i].Val(); p != nil && p.Count > 0 {
				b.Waiting += p.Count
				b.Oldest = idTime(p.Lower)
			}
			out[h] = b
			unread[i] = pipe.XRangeN(ctx, m.Stream(h), "("+g.LastDeliveredID, "+", 1)
		}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("read mailbox backlogs: %w", err)
	}
	for i, h := range handles {
		if unread[i] == nil || len(unread[i].Val()) == 0 {
			continue
		}
		b := out[h]
		first := idTime(unread[i].Val()[0].ID)
		if b.Oldest.IsZero() || first.Before(b.Oldest) {
			b.Oldest = first
		}
		out[h] = b
	}
	return nil
}

// noMailbox reports an error that only says a stream or its group does not
// exist yet.
func noMailbox(err error) bool {
	return errors.Is(err, redis.Nil) || strings.Contains(err.Error(), "no such key") || isNoGroup(err)
}

// idTime is when a stream entry was added: its id's milliseconds.
func idTime(id string) time.Time {
	ms, _ := splitID(id)
	return time.UnixMilli(int64(ms))
}
