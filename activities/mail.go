package activities

import (
	"context"
	"log/slog"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/store"
)

// Mail holds the mailbox activities. They are short Redis steps and run as
// local activities, fenced all the same.
type Mail struct {
	Store   *store.Store
	Mailbox *mailbox.Mailbox
	Log     *slog.Logger
}

// ReadMail hands the seat its next entries, by reference.
func (a *Mail) ReadMail(ctx context.Context, in crewlet.ReadMailInput) (crewlet.ReadMailOutput, error) {
	if err := a.Store.CheckEpoch(ctx, in.Handle, in.Epoch); err != nil {
		return crewlet.ReadMailOutput{}, fence(a.Log, in.Handle, in.Epoch, err)
	}
	res, err := a.Mailbox.Read(ctx, in.Handle, in.Consumer, in.Max, in.ClearAwake)
	if err != nil {
		return crewlet.ReadMailOutput{}, err
	}
	out := crewlet.ReadMailOutput{Lag: res.Lag, Mail: make([]crewlet.MailRef, len(res.Messages))}
	for i, m := range res.Messages {
		out.Mail[i] = crewlet.MailRef{StreamID: m.StreamID, EventID: m.EventID}
	}
	return out, nil
}

// AckMail marks entries handled. The seat calls it only after the completion
// ledger recorded them.
func (a *Mail) AckMail(ctx context.Context, in crewlet.AckMailInput) error {
	if err := a.Store.CheckEpoch(ctx, in.Handle, in.Epoch); err != nil {
		return fence(a.Log, in.Handle, in.Epoch, err)
	}
	return a.Mailbox.Ack(ctx, in.Handle, in.StreamIDs)
}
