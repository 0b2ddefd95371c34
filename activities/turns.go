package activities

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/internal/approvals"
	"github.com/crewlet/crewlet/internal/authority"
	"github.com/crewlet/crewlet/internal/budget"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/delivery"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/model"
	"github.com/crewlet/crewlet/internal/profiles"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tickets"
	"github.com/crewlet/crewlet/internal/tracing"
	"github.com/crewlet/crewlet/internal/turnrules"
	"github.com/crewlet/crewlet/internal/wire"
)

// Turns runs the steps of a turn (docs/architecture.md, "A turn"): open it, one
// model call per round, one tool call per call asked for, and close it. Each
// step reads what the steps before it recorded in Postgres and records what it
// did under a key of the work, so a step run twice does its work once.
type Turns struct {
	host     *Host
	tickets  *tickets.Service
	org      config.Source
	store    *store.Store
	mailbox  *mailbox.Mailbox
	delivery *delivery.Service
	// profiles picks the profile each turn runs on and keeps the health
	// of the credentials they spend.
	profiles *profiles.Service
	probe    *model.Probe
	// models are the profiles' models of the revision the turns last ran
	// on; model() builds a newer revision's.
	modelsMu sync.Mutex
	models   modelSet
	log      *slog.Logger
	// Now is the clock budgets are charged and checked on.
	Now func() time.Time
	// metrics records each model call; nil records none.
	metrics *metrics.Metrics
	// approvals gates the tool calls a role's approval policies name; nil
	// gates none.
	approvals *approvals.Service
	// events is the live stream the turns' steps tell; nil tells none.
	events *events.Emitter
}

// answerMargin is how much of its step's time a model call leaves unused.
// A provider that has not answered by then has timed out: the step still
// has time to cool its credential off and fail the round over, where
// Temporal cutting the step off at its deadline would retry it on the same
// profile.
const answerMargin = 15 * time.Second

// chat is one call to the profile's model, recorded. With onDelta, a model
// that streams hands over its text as it comes. A call still unanswered
// answerMargin before the step's deadline fails as a provider timeout.
func (a *Turns) chat(ctx context.Context, profile string, req crewlet.ModelRequest, onDelta func(string)) (crewlet.ModelResponse, error) {
	p := a.org.Now().Profiles[profile]
	ctx, span := tracing.StartModelCall(ctx, p.Provider, p.Model, profile)
	began := time.Now()
	m, ok := a.model(profile)
	if !ok {
		return crewlet.ModelResponse{}, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("profile %s is no longer in the org", profile), crewlet.ErrorTypeProfileUnavailable, nil)
	}
	callCtx := ctx
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) > answerMargin {
		var cancel context.CancelFunc
		callCtx, cancel = context.WithDeadline(ctx, dl.Add(-answerMargin))
		defer cancel()
	}
	var resp crewlet.ModelResponse
	var err error
	if sm, ok := m.(crewlet.StreamingChatModel); ok && onDelta != nil {
		resp, err = sm.ChatStream(callCtx, req, onDelta)
	} else {
		resp, err = m.Chat(callCtx, req)
	}
	if err != nil && callCtx.Err() != nil && ctx.Err() == nil {
		// Status 0: no answer came, which says the provider is down.
		err = &crewlet.ProviderError{Provider: p.Provider, Kind: crewlet.ProviderServerError,
			Message: fmt.Sprintf("timed out: no answer within %s", time.Since(began).Round(time.Second))}
	}
	a.metrics.ModelCall(profile, time.Since(began), err, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	tracing.EndModelCall(span, resp, err)
	return resp, err
}

// NewTurns builds the model of every profile in org. gate gates the tool
// calls approval policies name (nil: none); m records the turns (nil:
// nothing).
func NewTurns(host *Host, org config.Source, st *store.Store, mb *mailbox.Mailbox, dl *delivery.Service, tickets *tickets.Service,
	profiles *profiles.Service, gate *approvals.Service, m *metrics.Metrics, log *slog.Logger) (*Turns, error) {
	probe, err := model.OpenProbe(testhook.Current().ScriptedProbe, host.Incarnation)
	if err != nil {
		return nil, err
	}
	a := &Turns{host: host, org: org, store: st, mailbox: mb, delivery: dl, tickets: tickets, profiles: profiles, approvals: gate, metrics: m,
		probe: probe, log: log, Now: time.Now}
	now := org.Now()
	if a.models.byProfile, err = buildModels(now, nil, probe); err != nil {
		return nil, err
	}
	a.models.org = now
	if mb != nil {
		a.events = events.NewEmitter(mb.Redis(), mb.Prefix(), org, log)
		a.events.Dropped = func(reason string) { a.metrics.EventDropped(reason) }
	}
	return a, nil
}

// modelSet is the model of every profile of one config revision.
type modelSet struct {
	org       *config.Config
	byProfile map[string]crewlet.ChatModel
}

// buildModels builds the model of every profile of org, keeping the one of
// each profile whose settings did not change since prev was built.
func buildModels(org *config.Config, prev *modelSet, probe *model.Probe) (map[string]crewlet.ChatModel, error) {
	out := map[string]crewlet.ChatModel{}
	for name, p := range org.Profiles {
		if prev != nil && prev.org != nil {
			if old, ok := prev.org.Profiles[name]; ok && reflect.DeepEqual(old, p) {
				out[name] = prev.byProfile[name]
				continue
			}
		}
		m, err := model.New(name, p, probe)
		if err != nil {
			return nil, fmt.Errorf("profile %s: %w", name, err)
		}
		out[name] = m
	}
	return out, nil
}

// model returns the model of a profile of the revision the process runs
// now, building the models of a newer revision once.
func (a *Turns) model(profile string) (crewlet.ChatModel, bool) {
	org := a.org.Now()
	a.modelsMu.Lock()
	defer a.modelsMu.Unlock()
	if a.models.org != org {
		built, err := buildModels(org, &a.models, a.probe)
		if err != nil {
			// Validation builds every profile before a revision is
			// taken, so this is a model that cannot start here: the
			// previous revision's models go on.
			a.log.Error("models_unbuilt", "error", err)
		} else {
			a.models = modelSet{org: org, byProfile: built}
		}
	}
	m, ok := a.models.byProfile[profile]
	return m, ok
}

// Keys of a turn's messages in Postgres, one per step that wrote them.
const (
	userKey = "user"
	noteKey = "note"
	// refusedKey is the note of a thread a round ended without an answer.
	refusedKey = "refused"
	// endedKey is the note of a thread stopped because the ticket it
	// serves ended.
	endedKey = "ticket-ended"
)

func roundKey(round int) string { return fmt.Sprintf("r%d", round) }

func resultKey(round, call int) string { return fmt.Sprintf("r%dc%d", round, call) }

// outcomeUnknown is what the model is told of a write tool call that
// started and left no result: it may or may not have happened.
const outcomeUnknown = "Outcome unknown: this call was started but its result was lost (the call timed out or its node was lost mid-call). It may or may not have taken effect; check before retrying."

// mailOf reads the messages of mail refs from the seat's mailbox.
func (a *Turns) mailOf(ctx context.Context, handle string, refs []crewlet.MailRef) ([]crewlet.Message, error) {
	streamIDs := make([]string, len(refs))
	for i, ref := range refs {
		streamIDs[i] = ref.StreamID
	}
	return a.mailbox.Get(ctx, handle, streamIDs)
}

// BeginTurn opens a turn: it refuses a turn over a budget cap, records the
// triggers and starts one conversation per trigger that needs an answer.
// Replies are recorded, never answered, so two seats cannot reply to each
// other forever; a chat message delivered twice in one batch is answered once.
// Asked to, a turn that will call a model takes its profile slot in the same
// step (AcquireProfile).
func (a *Turns) BeginTurn(ctx context.Context, in crewlet.BeginTurnInput) (out crewlet.BeginTurnOutput, err error) {
	seat, role, err := a.role(ctx, in.Handle)
	if err != nil {
		return out, err
	}
	// The budget and the seat's tools, in one round trip.
	org := a.org.Now()
	seatCaps, companyCaps := role.Budget.Caps(), org.Company.Budget.Caps()
	usage, catalog, err := a.store.UsageAndTools(ctx, in.Handle, seatCaps, companyCaps, a.Now(), org.Location())
	if err != nil {
		return out, err
	}
	if hold := a.held(in.Handle, usage); hold != nil {
		a.metrics.BudgetHeld()
		return crewlet.BeginTurnOutput{Hold: hold}, nil
	}
	a.askBudgets(ctx, in.Handle, usage, seatCaps, companyCaps)
	msgs, err := a.mailOf(ctx, in.Handle, in.Mail)
	if err != nil {
		return out, err
	}
	phases := map[string]crewlet.TicketPhase{}
	for _, m := range msgs {
		if m.Type != crewlet.MessageTicket {
			continue
		}
		ticket, err := a.store.Ticket(ctx, m.Ticket)
		switch {
		case err == nil:
			phases[m.Ticket] = ticket.Phase
		case crewlet.ErrorCode(err) != crewlet.ENOTFOUND:
			return out, err
		}
	}
	threads, closed := turnrules.Threads(msgs, phases)
	if threads, err = a.joinInterrupted(ctx, in.Handle, msgs, threads); err != nil {
		return out, err
	}
	for _, i := range closed {
		a.log.Info("ticket_request_skipped", "seat", in.Handle, "ticket", msgs[i].Ticket, "phase", phases[msgs[i].Ticket])
	}
	if catalog, err = a.offered(in.Handle, catalog); err != nil {
		return out, err
	}
	// The triggers take their place in the conversation's transcript now,
	// in batch order, as the turn opens: a thread's context is everything
	// the seat was sent before its trigger, so the place must not move when
	// the turn re-runs (the insert is keyed on the event id).
	row, err := a.store.OpenTurn(ctx, wire.TurnRow{
		Seat: in.Handle, WorkKey: in.WorkKey, TurnID: in.TurnID, Epoch: in.Epoch, Mail: msgs, Threads: threads,
		Tools: catalog, MaxRounds: role.MaxRounds, StartedAt: a.Now(),
	}, msgs...)
	if err != nil {
		return out, err
	}
	defer a.flushEvents()
	a.emitTurnStarted(row)
	keys := make([]string, len(row.Threads))
	for thread := range row.Threads {
		trigger, key, err := threadOf(row, thread)
		if err != nil {
			return out, err
		}
		keys[thread] = key
		_, err = a.store.AppendTurnMessage(ctx, in.Handle, key, wire.TurnMessage{
			Key: userKey, Message: crewlet.ChatMessage{Role: "user", Content: turnrules.TriggerText(trigger)},
		})
		if err != nil {
			return out, err
		}
	}
	a.metrics.TurnStarted()
	out = crewlet.BeginTurnOutput{Threads: len(row.Threads), MaxRounds: row.MaxRounds, Reflect: role.Reflect, ThreadKeys: keys}
	if in.Acquire && len(row.Threads) > 0 {
		// The row was opened or read at this tenure's epoch just now.
		acquired, err := a.acquire(ctx, seat.Role, crewlet.AcquireProfileInput{Tenure: in.Tenure, TurnID: in.TurnID, WorkKey: in.WorkKey}, row.Profile)
		if err != nil {
			return out, err
		}
		out.Profile = &acquired
	}
	return out, nil
}

// offered is the part of a seat's tool catalog its role's may.tools
// allows: a tool the seat may not call is not shown to the model (a call
// of it is still refused).
func (a *Turns) offered(handle string, raw json.RawMessage) (json.RawMessage, error) {
	catalog, err := decodeCatalog(raw)
	if err != nil {
		return nil, err
	}
	org := a.org.Now()
	kept := slices.DeleteFunc(slices.Clone(catalog), func(t crewlet.ToolSpec) bool {
		return authority.Check(org, authority.CallTool, authority.Request{Seat: handle, Target: t.Name}) != nil
	})
	if len(kept) == len(catalog) {
		return raw, nil
	}
	return json.Marshal(kept)
}

// threadOf returns a thread's trigger and the key its conversation is
// recorded under (crewlet.ThreadKey), so its recorded rounds and tool calls
// are not repeated when it comes back in another batch.
func threadOf(turn wire.TurnRow, thread int) (crewlet.Message, string, error) {
	if thread < 0 || thread >= len(turn.Threads) || turn.Threads[thread] >= len(turn.Mail) {
		return crewlet.Message{}, "", temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("turn %s has no thread %d", turn.TurnID, thread), crewlet.ErrorTypeBadThread, nil)
	}
	trigger := turn.Mail[turn.Threads[thread]]
	return trigger, crewlet.ThreadKey(trigger.EventID), nil
}

// budgetHold returns the budget cap that holds the seat's turns now, or nil.
func (a *Turns) budgetHold(ctx context.Context, handle string, role config.Role) (*crewlet.BudgetHold, error) {
	usage, err := a.store.Usage(ctx, handle, role.Budget.Caps(), a.org.Now().Company.Budget.Caps(), a.Now(), a.org.Now().Location())
	if err != nil {
		return nil, err
	}
	return a.held(handle, usage), nil
}

// held returns the budget cap of usage that holds the seat's turns, or nil.
func (a *Turns) held(handle string, usage []crewlet.UsageWindow) *crewlet.BudgetHold {
	hold := budget.Check(usage)
	if hold != nil {
		a.log.Info("turn_held", "seat", handle, "scope", hold.Scope, "window", hold.Window, "unit", hold.Unit, "cap", hold.Cap, "used", hold.Used,
			"resets_at", hold.ResetsAt, "reason", hold.Reason)
	}
	return hold
}

// askBudgets asks, for each money window at its ask's share of the cap
// (on_limit: ask), whether the seat may go on to the cap: one ticket per
// window, keyed on it, so a step run twice or on another node asks once.
// The seat goes on while it waits; a question that cannot be put now is
// put by the next turn, so a failure is logged and never holds the turn.
func (a *Turns) askBudgets(ctx context.Context, handle string, usage []crewlet.UsageWindow, seatCaps, companyCaps crewlet.BudgetCaps) {
	for _, w := range usage {
		policy := seatCaps.Ask
		if w.Scope == crewlet.ScopeCompany {
			policy = companyCaps.Ask
		}
		if !budget.AskDue(w, policy) {
			continue
		}
		if err := a.askBudget(ctx, handle, w, policy.To); err != nil {
			a.log.Warn("budget_ask_failed", "seat", handle, "scope", w.Scope, "window", w.Window, "to", policy.To, "error", err)
		}
	}
}

// askBudget puts one window's question to asked and records it.
func (a *Turns) askBudget(ctx context.Context, handle string, w crewlet.UsageWindow, asked string) error {
	scope := store.CounterScope(w.Scope, handle)
	key := fmt.Sprintf("budget-ask/%s/%s/%s", scope, w.Window, w.Start.UTC().Format(time.RFC3339))
	task := fmt.Sprintf("Budget check-in: may %s go on to its %s budget's cap of %s?", handle, w.Window, budget.USD(w.CapNanoUSD))
	if w.Scope == crewlet.ScopeCompany {
		task = fmt.Sprintf("Budget check-in: may the seats go on to the company's %s budget's cap of %s?", w.Window, budget.USD(w.CapNanoUSD))
	}
	ticket, err := a.tickets.AskBudget(ctx, key, asked, handle, task, budget.AskQuestion(handle, w))
	if err != nil {
		return err
	}
	record := crewlet.BudgetAsk{Ticket: ticket.ID, Seat: handle, To: asked, UsedNanoUSD: w.UsedNanoUSD, CapNanoUSD: w.CapNanoUSD,
		Decision: crewlet.AskWaiting}
	answered := ticket.Phase != crewlet.TicketAsking && ticket.Answer != ""
	if answered {
		// Answered before its question was recorded (a run that died
		// between the two): the answer counts.
		record.Decision, record.Answer, record.AnsweredBy = budget.ReadAnswer(ticket.Answer), ticket.Answer, ticket.AnsweredBy
	}
	ask, recorded, err := a.store.RecordBudgetAsk(ctx, scope, w.Window, w.Start, record)
	if err != nil {
		return err
	}
	if recorded {
		a.log.Info("budget_asked", "seat", handle, "scope", w.Scope, "window", w.Window, "to", asked, "ticket", ask.Ticket,
			"used_nano_usd", w.UsedNanoUSD, "cap_nano_usd", w.CapNanoUSD, "decision", ask.Decision)
	}
	if answered && ticket.Phase.Open() {
		_, _, err = a.tickets.SettleBudget(ctx, ticket)
	}
	return err
}

// CheckBudget tells a held seat whether a budget cap still holds its turns,
// without reading its mail: a re-read would spend a delivery of every held
// trigger each time the seat checks.
func (a *Turns) CheckBudget(ctx context.Context, in crewlet.CheckBudgetInput) (*crewlet.BudgetHold, error) {
	_, role, err := a.role(ctx, in.Handle)
	if err != nil {
		return nil, err
	}
	return a.budgetHold(ctx, in.Handle, role)
}

// systemPrompt is the exact system prompt of a seat's turns.
func (a *Turns) systemPrompt(handle, roleName string, role config.Role) string {
	return turnrules.SystemPrompt(handle, roleName, role.Charter, a.org.Now().Company.Name)
}

// role returns the seat and its agent role.
func (a *Turns) role(ctx context.Context, handle string) (config.Seat, config.Role, error) {
	type seatRole struct {
		seat config.Seat
		role config.Role
	}
	found, _, ok := config.Known(ctx, a.org, func(org *config.Config) (seatRole, bool) {
		seat, ok := org.Seat(handle)
		role, hasRole := org.Roles[seat.Role]
		return seatRole{seat, role}, ok && hasRole && len(role.Pool()) > 0
	})
	if !ok {
		return found.seat, found.role, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("seat %s has no agent role with a profile in the org", handle), crewlet.ErrorTypeNoRole, nil)
	}
	return found.seat, found.role, nil
}
