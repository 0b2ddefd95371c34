package delivery

import (
	"context"
	"slices"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
)

// Inbox returns the newest n entries of a seat's mail whose stream id is
// before the given one (all, when before is empty), oldest first: what is
// still in its Redis mailbox and what maintenance moved to Postgres, as one
// list. An entry seen in both (a move cut short, or mail archived while
// Redis refused it and published again later) is listed once. The first
// entry's stream id is the cursor of the page before.
func (d *Service) Inbox(ctx context.Context, handle, before string, n int) ([]crewlet.Message, error) {
	recent, err := d.mailbox.RecentBefore(ctx, handle, before, int64(n))
	if err != nil {
		return nil, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the mailbox of %s cannot be read; see the server log", handle)
	}
	var kept []crewlet.Message
	if d.archive != nil {
		if kept, err = d.archive.PersonMail(ctx, handle, before, n); err != nil {
			return nil, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the archived mail of %s cannot be read; see the server log", handle)
		}
	}
	all := append(recent, kept...)
	slices.SortFunc(all, func(a, b crewlet.Message) int { return compareIDs(a.StreamID, b.StreamID) })
	seen := map[string]bool{}
	out := all[:0]
	for _, m := range all {
		if seen[m.StreamID] || (m.EventID != "" && seen["event:"+m.EventID]) {
			continue
		}
		seen[m.StreamID], seen["event:"+m.EventID] = true, true
		out = append(out, m)
	}
	return out[max(0, len(out)-n):], nil
}

// MarkRead records that the person of a human seat has read their mail up
// to the entry streamID, which lets retention delete what they have read
// (store.MarkPersonMailRead). Nothing is kept where there is no archive.
func (d *Service) MarkRead(ctx context.Context, handle, streamID string) error {
	if d.archive == nil {
		return nil
	}
	return d.archive.MarkPersonMailRead(ctx, handle, streamID)
}

// DeadLetters returns the newest n dead letters whose id is before the
// given one (all, when before is empty), newest first: the dead-letter
// stream's and those maintenance moved to Postgres, as one list.
func (d *Service) DeadLetters(ctx context.Context, before string, n int) ([]mailbox.DeadLetter, error) {
	dls, err := d.mailbox.DeadLettersBefore(ctx, before, int64(n))
	if err != nil {
		return nil, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the dead letters cannot be read; see the server log")
	}
	if d.archive != nil {
		kept, err := d.archive.ArchivedDeadLetters(ctx, before, n)
		if err != nil {
			return nil, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the archived dead letters cannot be read; see the server log")
		}
		dls = append(dls, kept...)
	}
	slices.SortFunc(dls, func(a, b mailbox.DeadLetter) int { return compareIDs(b.ID, a.ID) })
	dls = slices.CompactFunc(dls, func(a, b mailbox.DeadLetter) bool { return a.ID == b.ID })
	return dls[:min(len(dls), n)], nil
}

func compareIDs(a, b string) int {
	switch {
	case mailbox.IDLess(a, b):
		return -1
	case mailbox.IDLess(b, a):
		return 1
	}
	return 0
}
