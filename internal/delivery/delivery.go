// Package delivery puts mail in seats' mailboxes: it checks what a person or
// a seat sends, publishes it durably to the recipient's stream, wakes the
// seat through the seat client when it was asleep, and puts dead letters
// back. Every message crewlet sends to a seat (API, CLI, tools, replies,
// ticket requests and notices) goes through Deliver.
package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/codes"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tracing"
)

// Service delivers mail to the seats of one org.
type Service struct {
	org     config.Source
	mailbox *mailbox.Mailbox
	seats   *seatclient.Client
	log     *slog.Logger
	// metrics counts mail published and wakes that failed; nil counts none.
	metrics *metrics.Metrics
	// archive is where a person's mail and dead letters that Redis does
	// not hold are kept (archive.go); nil keeps nothing there.
	archive *store.Store
	// wakeWait and wakeGiveUp are WakeWait and wakeGiveUp unless a test
	// set them (zero: the defaults).
	wakeWait, wakeGiveUp time.Duration
}

// New returns the delivery service of org. archive keeps what Redis does
// not (nil: nothing); m counts its mail (nil: nothing).
func New(org config.Source, mb *mailbox.Mailbox, seats *seatclient.Client, archive *store.Store, m *metrics.Metrics, log *slog.Logger) *Service {
	return &Service{org: org, mailbox: mb, seats: seats, archive: archive, metrics: m, log: log}
}

// SendRequest is mail to deliver to a seat.
type SendRequest struct {
	To   string
	From string
	Text string
	// Conversation continues an existing conversation; empty starts one.
	Conversation string
	// ChatID is the message's identity on the chat system it came from.
	ChatID string
}

// Send checks a message from a person or a seat and delivers it.
func (d *Service) Send(ctx context.Context, req SendRequest) (crewlet.Message, error) {
	to, err := config.SeatIn(ctx, d.org, req.To)
	if err != nil {
		return crewlet.Message{}, err
	}
	if strings.TrimSpace(req.Text) == "" {
		return crewlet.Message{}, crewlet.Errorf(crewlet.EINVALID, "text is empty; say something")
	}
	if err := errors.Join(crewlet.CheckText("text", req.Text, crewlet.MaxMessageBytes),
		crewlet.CheckText("chat_id", req.ChatID, crewlet.MaxChatIDBytes), CheckConversation(req.Conversation)); err != nil {
		// The API and a tool read the first problem's code and message.
		return crewlet.Message{}, err
	}
	from := req.From
	switch {
	case from == "":
		from = crewlet.ExternalSender
	case from == crewlet.ExternalSender:
	default:
		if _, err := config.SeatIn(ctx, d.org, from); err != nil {
			return crewlet.Message{}, crewlet.Errorf(crewlet.EINVALID, "from: no seat %q; leave it empty to send as %s", from, crewlet.ExternalSender)
		}
	}
	conv := req.Conversation
	if conv == "" {
		conv = uuid.NewString()
	}
	msg := crewlet.Message{
		EventID: uuid.NewString(), Type: crewlet.MessageChat, From: from, To: req.To,
		Conversation: conv, Body: req.Text, SentAt: time.Now().UTC(), ChatID: req.ChatID,
	}
	return d.deliver(ctx, to, msg)
}

// CheckConversation refuses a conversation id outside the id charset; empty
// starts a new conversation.
func CheckConversation(id string) error {
	if id == "" {
		return nil
	}
	return crewlet.CheckID("conversation", id)
}

// Deliver puts msg in its recipient's mailbox and wakes the seat if it was
// asleep. Delivering an event id twice adds it once. The mail is durable once
// Deliver returns; the wake is best effort, waited for at most WakeWait, and
// a failed one is logged, not returned, because the seat's backstop timer
// and the reconciler reach the mail anyway.
func (d *Service) Deliver(ctx context.Context, msg crewlet.Message) (crewlet.Message, error) {
	to, err := config.SeatIn(ctx, d.org, msg.To)
	if err != nil {
		return crewlet.Message{}, err
	}
	return d.deliver(ctx, to, msg)
}

// deliver is Deliver to the seat already looked up.
func (d *Service) deliver(ctx context.Context, to config.Seat, msg crewlet.Message) (crewlet.Message, error) {
	ctx, span := tracing.Start(ctx, "publish "+msg.To, trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(
		semconv.MessagingOperationTypeSend, semconv.MessagingDestinationName(msg.To), semconv.MessagingMessageID(msg.EventID)))
	defer span.End()
	msg.Trace = tracing.Traceparent(ctx)
	accepted := crewlet.AcceptedWork(msg.Type)
	var q mailbox.Quotas
	if !accepted {
		c := d.org.Now().Mailbox
		q = mailbox.Quotas{MaxUnread: int64(c.MaxUnread), SenderPerMinute: int64(c.SenderPerMinute), MemoryShare: float64(c.MaxMemoryPercent) / 100}
		if msg.From == crewlet.ScheduleSender || msg.From == crewlet.TicketSender {
			// crewlet's own senders carry what the org's config asks
			// for (schedule fires, idle nudges), not one principal's
			// traffic: a company's 9:00 fires are not one flood.
			q.SenderPerMinute = 0
		}
	}
	streamID, wake, err := d.mailbox.Publish(ctx, msg, q)
	if err != nil && accepted && to.Kind == string(crewlet.SeatHuman) && d.archive != nil {
		// A person is owed this answer: Redis not taking it must not lose
		// it, and the inbox reads the archive too.
		d.log.WarnContext(ctx, "mail_archived_directly", "seat", msg.To, "event_id", msg.EventID, "error", err)
		kept, archiveErr := d.archive.ArchivePersonMailNow(ctx, msg)
		if archiveErr == nil {
			d.metrics.MailPublished()
			return kept, nil
		}
		err = errors.Join(err, archiveErr)
	}
	if err != nil {
		span.SetStatus(codes.Error, "publish failed")
		if code := crewlet.ErrorCode(err); code == crewlet.EFULL || code == crewlet.ERATELIMITED {
			d.log.InfoContext(ctx, "mail_refused", "to", msg.To, "from", msg.From, "event_id", msg.EventID, "reason", code)
			d.metrics.MailRefused(code)
			return crewlet.Message{}, err
		}
		return crewlet.Message{}, crewlet.Wrapf(crewlet.EUNAVAILABLE, err, "the mailbox of %s does not take mail now (Redis is unreachable or full); see the server log", msg.To)
	}
	msg.StreamID = streamID
	d.metrics.MailPublished()
	if wake && to.Kind == string(crewlet.SeatAgent) {
		d.wake(ctx, to, msg.EventID, true)
	}
	return msg, nil
}

// WakeWait is how long a publish waits for its wake signal before it
// answers: the mail is durable already, and a Temporal that is down or
// slow must not hold every sender (a caller waited 10 s per message while
// Temporal was down). A wake not done by then goes on in the background.
const WakeWait = 500 * time.Millisecond

// wakeGiveUp bounds a wake that goes on in the background. While it is in
// flight the seat's awake flag stays up, so the seat's later publishes add
// no wake of their own: one wake per seat at most is ever in flight.
const wakeGiveUp = 10 * time.Second

// clearAwakeWithin bounds lowering the awake flag after a failed wake.
const clearAwakeWithin = 2 * time.Second

// wake signals seat to, waiting at most WakeWait for it. A wake that
// fails lowers the seat's awake flag (when the publish raised it,
// raised), so the next publish tries again instead of trusting a seat
// that never heard this one; the seat's backstop, the reconcile duty and,
// after Temporal lost its state, the workers' rebuild reach the mail
// anyway (docs/operations.md, "When Temporal loses its state").
func (d *Service) wake(ctx context.Context, to config.Seat, eventID string, raised bool) {
	wait, giveUp := d.wakeWait, d.wakeGiveUp
	if wait == 0 {
		wait, giveUp = WakeWait, wakeGiveUp
	}
	// The wake outlives the caller's request when it is slow, not its
	// values (trace, logger attributes).
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), giveUp)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer cancel()
		err := func() (err error) {
			// Off the caller's goroutine, a panic would end the process
			// instead of the one call.
			defer func() {
				if p := recover(); p != nil {
					err = fmt.Errorf("wake panicked: %v", p)
				}
			}()
			return d.seats.Wake(wctx, to)
		}()
		if err == nil {
			return
		}
		d.metrics.WakeFailed()
		d.log.WarnContext(wctx, "wake_failed", "seat", to.Handle, "event_id", eventID, "error", err)
		if !raised {
			return
		}
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), clearAwakeWithin)
		defer ccancel()
		if err := d.mailbox.ClearAwake(cctx, to.Handle); err != nil {
			d.log.WarnContext(cctx, "wake_failed", "seat", to.Handle, "event_id", eventID, "error", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(wait):
		d.log.InfoContext(ctx, "wake_slow", "seat", to.Handle, "event_id", eventID, "waited", wait,
			"note", "the mail is durable; the wake goes on in the background")
	case <-ctx.Done():
	}
}

// Requeue puts a dead letter back in its seat's mailbox with a fresh delivery
// budget, records it in the seat's event history and wakes the seat. A dead
// letter moved to Postgres (mailbox.dead_letter_keep) is requeued the same.
func (d *Service) Requeue(ctx context.Context, st *store.Store, id string) (mailbox.DeadLetter, error) {
	dl, err := d.mailbox.Requeue(ctx, id)
	if crewlet.ErrorCode(err) == crewlet.ENOTFOUND && st != nil {
		var streamID string
		dl, err = st.RequeueArchivedDeadLetter(ctx, id, func(ctx context.Context, dl mailbox.DeadLetter) error {
			var err error
			streamID, err = d.mailbox.Restore(ctx, dl)
			return err
		})
		dl.Message.StreamID = streamID
	}
	if err != nil {
		return dl, err
	}
	if err := st.RecordSeatEvent(ctx, dl.Seat, "requeued", dl.Message.EventID, map[string]any{"dead_letter": id, "stream_id": dl.Message.StreamID}); err != nil {
		d.log.WarnContext(ctx, "seat_event_unrecorded", "seat", dl.Seat, "kind", "requeued", "error", err)
	}
	if s, ok := d.org.Now().AgentSeat(dl.Seat); ok {
		d.wake(ctx, s, dl.Message.EventID, false)
	}
	return dl, nil
}
