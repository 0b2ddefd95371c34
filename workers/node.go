package workers

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/activities"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/evals"
	"github.com/crewlet/crewlet/internal/fanout"
	"github.com/crewlet/crewlet/internal/health"
	"github.com/crewlet/crewlet/internal/liveness"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/reconcile"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/sandbox"
	"github.com/crewlet/crewlet/internal/schedules"
	"github.com/crewlet/crewlet/internal/seatclient"
	"github.com/crewlet/crewlet/internal/services"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/watchdog"
)

// NodeOptions configure one worker node process.
type NodeOptions struct {
	// NodeID is the stable node id; empty means the host name.
	NodeID   string
	Labels   map[string]string
	Capacity int
	// WedgeAfter, when set, blocks the node's presence loop after that long.
	// It exists for the watchdog's test and nothing else.
	WedgeAfter time.Duration
	// CutStoreAfter, when set, makes every presence write fail after that
	// long, as a node cut off from Postgres sees it. It exists for the
	// self-fencing test and nothing else.
	CutStoreAfter time.Duration
	// SlowStart, when set, holds the start that long before the build
	// check, as a slow Temporal would. It exists for the test that a
	// starting node beats meanwhile and nothing else.
	SlowStart time.Duration
	// BeatOffset, when set, starts the presence loop that long after the
	// first beat. It exists for the tests of nodes beating out of phase
	// and nothing else.
	BeatOffset time.Duration
	Stderr     io.Writer
	// Exit ends the process; the watchdog calls it with code 75.
	Exit func(int)
	// Incarnation is the incarnation the node runs as (Incarnation, with
	// NodeID the node id it names); empty mints one from NodeID.
	Incarnation string
}

// Node is a running worker node incarnation: it polls the shared task queue
// and its own host queue, and runs its liveness (internal/liveness): the
// presence beat, the failure detector and self-fencing.
type Node struct {
	Incarnation string
	NodeID      string
	HostQueue   string
	// BuildID is the build the node's workflow worker polls as.
	BuildID string

	org   config.Source
	store *store.Store
	// metrics is where the node's series go; nil records none.
	metrics *metrics.Metrics
	// presence is the presence loop's own small pool: the beat, the
	// reconcile and the detector never wait for a connection behind the
	// seats' work, so a busy node does not fence itself.
	presence *store.Store
	temporal client.Client
	seats    *seatclient.Client
	host     *activities.Host
	live     *liveness.Node
	watchdog *watchdog.Watchdog
	// notifier posts seat health transitions (health.notify).
	notifier *health.Notifier
	log      *slog.Logger
	opts     NodeOptions

	shared, hosted worker.Worker
	// DrainRequested is closed when someone asks this node to drain through
	// its presence row (POST /nodes/{id}/drain).
	DrainRequested <-chan struct{}
	stop           chan struct{}
	loopsDone      sync.WaitGroup
	// started is when the node started.
	started time.Time
}

// presenceConns is the presence loop's own pool: a beat runs its
// statements one after another, and the detector's signals need none.
const presenceConns = 2

// tenureActivitySlots are the host worker's activity slots beyond the tool
// calls: tenure steps (Attach, Detach), and the Holds of seat runs begun
// before node-level liveness while they last (COMPAT(node-liveness@1)).
const tenureActivitySlots = 1000

// Incarnation mints a node identity {node_id}:{random}. Two processes with
// one node id are still two incarnations.
func Incarnation(nodeID string) (incarnation, id string) {
	if nodeID == "" {
		nodeID, _ = os.Hostname()
		if nodeID == "" {
			nodeID = "node"
		}
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return nodeID + ":" + hex.EncodeToString(b[:]), nodeID
}

// HostQueue is the task queue only one incarnation polls.
func HostQueue(incarnation string) string {
	return "crewlet.host." + incarnation
}

// StartNode registers the node's presence and starts its workers, its
// presence loop and its watchdog. Its activities are the graph's services
// and clients with what is the node's own: its host, its liveness, its
// queues. The node logs to log with its incarnation.
func StartNode(ctx context.Context, g *services.Graph, log *slog.Logger, opts NodeOptions) (_ *Node, err error) {
	incarnation, nodeID := opts.Incarnation, opts.NodeID
	if incarnation == "" {
		incarnation, nodeID = Incarnation(opts.NodeID)
	}
	org, st, mb, tc, seats, dl := g.Org, g.Store, g.Mailbox, g.Temporal, g.Seats, g.Delivery
	tk, rec := g.Tickets, g.Reconciler
	// What a node reads once, at start: its timing, queues and slots are
	// cold keys (config.ColdKeys), taken by a restart only.
	boot := org.Now()
	hb := boot.Nodes.HeartbeatTimeout
	presence, err := st.Dedicated(ctx, presenceConns)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			presence.Close()
		}
	}()
	n := &Node{
		Incarnation: incarnation, NodeID: nodeID, HostQueue: HostQueue(incarnation),
		org: org, store: st, metrics: g.Metrics, presence: presence, temporal: tc, seats: seats, log: log.With("node", incarnation), opts: opts,
		stop: make(chan struct{}),
	}
	n.watchdog = watchdog.New(hb, opts.Stderr, opts.Exit)
	// What this node's own file allows an MCP server to run and read,
	// whatever a later revision names.
	allowed := boot.MCPAllowed()
	n.host = &activities.Host{
		Store: st, Incarnation: incarnation, NodeID: nodeID, Beat: hb / 3, Watchdog: n.watchdog, Log: n.log,
		StartTools: func(ctx context.Context, handle string) (activities.ToolSession, error) {
			return startTools(ctx, org.Now(), allowed, handle, n.log)
		},
		Knows: func(handle string) bool {
			_, ok := org.Now().AgentSeat(handle)
			return ok
		},
	}
	n.live = liveness.New(liveness.Config{
		Incarnation: incarnation, Timeout: hb, Clock: liveness.RealClock{}, Store: hookedPresence{presence, n}, Witness: mb,
		Watchdog: n.watchdog, Teardown: n.host.Teardown, TellHostLost: n.tellSeats, Log: n.log, Metrics: g.Metrics,
	})
	n.host.Tenures = n.live.Tenures
	n.DrainRequested = n.live.DrainRequested()
	n.notifier = health.NewNotifier(boot, n.log)
	turns, err := activities.NewTurns(n.host, org, st, mb, dl, tk, g.Profiles, g.Approvals, g.Metrics, n.log)
	if err != nil {
		return nil, err
	}
	n.BuildID, err = BuildID(boot.Temporal.Deployment)
	if err != nil {
		return nil, err
	}
	if err := st.RegisterNode(ctx, store.NodeRow{
		Incarnation: incarnation, NodeID: nodeID, HostQueue: n.HostQueue, Labels: opts.Labels, Capacity: opts.Capacity,
		SeatsDigest: boot.SeatsDigest(), BuildID: n.BuildID,
	}); err != nil {
		return nil, err
	}
	// From its registration on, peers count the node's presence and may
	// place seats on it, so it beats from here: the start below can wait
	// minutes on Temporal (making its build current), and a node silent
	// that long would be claimed while its host queue already runs
	// tenures.
	n.started = time.Now()
	n.live.Start(ctx)
	n.loopsDone.Add(2)
	go func() {
		defer n.loopsDone.Done()
		select {
		case <-time.After(opts.BeatOffset):
			n.live.Run(n.stop)
		case <-n.stop:
		}
	}()
	go func() { defer n.loopsDone.Done(); n.watchdog.Run(n.stop) }()
	defer func() {
		if err != nil {
			n.watchdog.Disarm()
			close(n.stop)
			n.loopsDone.Wait()
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if serr := presence.StopNode(sctx, incarnation); serr != nil {
				n.log.Warn("node_stop_record_failed", "error", serr)
			}
		}
	}()
	deps := Deps{
		Seats:       &activities.Seats{Store: st, Org: org, Tickets: tk, LiveWithin: hb, Here: n.host, Log: n.log},
		Mail:        &activities.Mail{Store: st, Mailbox: mb, Tickets: tk, Log: n.log, Metrics: g.Metrics, Org: org},
		Rebalance:   &activities.Rebalance{Store: st, Org: org, Seats: seats, LiveWithin: hb, MaxMoves: boot.Nodes.RebalanceMaxMoves, Log: n.log},
		Maintenance: &activities.Maintenance{Store: st, Mailbox: mb, Org: org, Tickets: tk, NodeID: nodeID, Log: n.log},
		Reconcile:   &activities.Reconcile{Org: org, Reconciler: rec, Spawn: g.Spawn, NodeID: nodeID},
		Host:        n.host,
		Turns:       turns,
		Schedules: &activities.Schedules{Store: st, Org: org, Delivery: dl, Tickets: tk, Log: n.log,
			Skipped: func(ctx context.Context, name string) (int64, error) {
				return schedules.Skipped(ctx, tc, org.Now(), name)
			}},
		Remote: &activities.Remote{Org: org, Store: st, Tickets: tk, Allowed: allowed, HTTP: &http.Client{}, Log: n.log},
		Evals: &activities.Evals{Store: st, Engine: &replay.Engine{Store: st, Org: org, Log: n.log,
			StartTools: func(ctx context.Context, handle string) (replay.LiveTools, error) {
				session, err := startTools(ctx, org.Now(), allowed, handle, n.log)
				if session == nil {
					return nil, err
				}
				return session, err
			}},
			Grader: evals.Grader{Org: org}, Log: n.log},
		Health: &activities.Health{Monitor: &health.Monitor{
			Org: org, Store: st, Mailbox: mb, Seats: seats, Tickets: tk, Notifier: n.notifier, LiveWithin: hb, Log: n.log,
		}},
	}
	// The fence runs inside publicErrors, so its refusals are counted as
	// fenced like any other.
	errs := []interceptor.WorkerInterceptor{&publicErrors{log: n.log, metrics: g.Metrics}, &seatFence{epochs: st, host: n.host, metrics: g.Metrics, log: n.log}}
	// Only the shared queue's worker is versioned: it runs the workflows,
	// and a turn's workflow and activity tasks there go to the build it is
	// pinned to. The host queue is one incarnation's own and holds no
	// workflow, so it stays unversioned: Temporal hands a versioned
	// workflow's activity on a queue outside its version to that queue's
	// unversioned pollers, and every build's node serves every seat's
	// tenure and tool calls.
	deployment := boot.Temporal.DeploymentName()
	// A workflow task waiting on a dead worker's sticky queue falls back to
	// the shared queue after this long, so it adds to failover time after the
	// heartbeat timeout. On a live worker a fallback only costs a replay.
	n.shared = worker.New(tc, boot.Temporal.TaskQueue, worker.Options{
		DeploymentOptions:            deploymentOptions(deployment, n.BuildID),
		StickyScheduleToStartTimeout: hb / 3,
		// Every seat's workflow task comes through here, so it needs more
		// than the default two pollers. A fixed count (the SDK's
		// MaxConcurrentWorkflowTaskPollers) is one pool shared by the
		// sticky and the shared queue, and after a burst of wakes filled
		// the sticky queue every poll parked there for a whole long poll
		// (~60 s) while the turns' first tasks waited on the shared queue
		// with no poller. Autoscaling pollers keep the two queues'
		// pollers apart, and always one on the shared queue.
		WorkflowTaskPollerBehavior: worker.NewPollerBehaviorAutoscaling(worker.PollerBehaviorAutoscalingOptions{
			InitialNumberOfPollers: 8, MinimumNumberOfPollers: 2, MaximumNumberOfPollers: 16,
		}),
		Interceptors: errs,
	})
	RegisterShared(n.shared, deps)
	n.host.SetMaxToolCalls(boot.Nodes.MaxToolCalls)
	n.hosted = worker.New(tc, n.HostQueue, worker.Options{
		Interceptors:                       errs,
		MaxConcurrentActivityExecutionSize: boot.Nodes.MaxToolCalls + tenureActivitySlots,
	})
	RegisterHost(n.hosted, deps)
	if err := n.hosted.Start(); err != nil {
		return nil, fmt.Errorf("start host worker: %w", err)
	}
	if err := n.shared.Start(); err != nil {
		n.hosted.Stop()
		return nil, fmt.Errorf("start worker: %w", err)
	}
	// The node beats and its workers run: a seat waiting for a node like
	// it may place itself now.
	n.startWakingUnplaceable()
	if opts.SlowStart > 0 {
		select {
		case <-time.After(opts.SlowStart):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	policy := boot.Temporal.Deployment.Promote
	liveBuilds := func(ctx context.Context) (map[string]bool, error) {
		live, err := st.Nodes(ctx, hb, false)
		if err != nil {
			return nil, err
		}
		builds := map[string]bool{}
		for _, node := range live {
			builds[node.BuildID] = true
		}
		return builds, nil
	}
	promotion := newPromotion(tc, deployment, boot.Temporal.TaskQueue, n.BuildID, policy, liveBuilds, n.log)
	current, err := promotion.atStart(ctx)
	if err != nil {
		n.shared.Stop()
		n.hosted.Stop()
		return nil, err
	}
	if current != n.BuildID {
		fix := fmt.Sprintf("this node runs no workflow task until its build is current: temporal worker deployment set-current-version --deployment-name %s --build-id %s (docs/versioning.md)", deployment, n.BuildID)
		if policy == config.PromoteFirst {
			fix += fmt.Sprintf("; it makes its build current itself once no node of build %s has polled for %s", current, pollerGoneAfter)
		}
		n.log.Warn("build_not_current", "deployment", deployment, "build_id", n.BuildID, "current", current, "fix", fix)
	}
	n.notifier.Start()
	n.registerGauges()
	if current != n.BuildID && policy == config.PromoteFirst {
		n.loopsDone.Add(1)
		go func() { defer n.loopsDone.Done(); promotion.watch(n.stop) }()
	}
	handover := newBuildHandover(tc, n.seats, promotion, boot.Temporal.Namespace, n.live.Interval(), n.log)
	n.loopsDone.Add(1)
	go func() { defer n.loopsDone.Done(); handover.run(n.stop) }()
	duties := dutiesOf(boot)
	_ = n.ensureDuties(ctx, duties) // logged; the watch below makes them again
	if err := schedules.Sync(ctx, tc, org.Now(), n.log); err != nil {
		n.log.Warn("org_schedules_sync_failed", "error", err)
	}
	n.watchTemporal(ctx, promotion, rec, duties)
	n.startSeats(ctx, rec)
	logConfinement(boot, n.log)
	n.log.Info("node_started", "node_id", nodeID, "host_queue", n.HostQueue, "labels", opts.Labels, "capacity", opts.Capacity,
		"deployment", deployment, "build_id", n.BuildID)
	return n, nil
}

// seatStartRetry is how often a node whose boot could not start every
// seat tries again.
const seatStartRetry = 2 * time.Second

// startSeats gives every agent seat a running workflow, the node's last
// step of its start. A start the store or Temporal refuses (an outage while
// the node starts) does not end the node: it may host seats already, and
// ending it would move them. It tries again every seatStartRetry in the
// background until the start is whole or the node stops. It keeps trying
// that often, so seats start within seatStartRetry of the outage's end, but
// says so less and less often: at tries 2, 4, 8, 16 and so on.
func (n *Node) startSeats(ctx context.Context, rec *reconcile.Reconciler) {
	err := rec.Reconcile(ctx, n.org.Now(), n.NodeID)
	if err == nil || ctx.Err() != nil {
		return
	}
	n.log.Warn("seats_start_incomplete", "error", err, "note", fmt.Sprintf("tried again every %s while the node serves", seatStartRetry))
	tries := 1
	n.loopsDone.Add(1)
	go func() {
		defer n.loopsDone.Done()
		every(n.stop, seatStartRetry, func(ctx context.Context) bool {
			tries++
			if err := rec.Reconcile(ctx, n.org.Now(), n.NodeID); err != nil {
				if ctx.Err() == nil && tries&(tries-1) == 0 {
					n.log.Warn("seats_start_incomplete", "error", err, "tries", tries)
				}
				return false
			}
			n.log.Info("seats_started", "tries", tries)
			return true
		})
	}()
}

// registerGauges adds the node's own state to its metrics, read at each
// scrape.
func (n *Node) registerGauges() {
	n.metrics.GaugeFunc("crewlet_node_presence_age_seconds",
		"Seconds since this node last wrote its presence: past half of nodes.heartbeat_timeout it fences itself, past the timeout a peer claims it.",
		func() float64 { return n.live.SinceLastBeat().Seconds() })
	n.metrics.GaugeFunc("crewlet_node_seats_hosted",
		"Seats this node hosts: one that stays at 0 while peers hold many takes no seats (labels, capacity, draining).",
		func() float64 { return float64(n.live.Tenures.HostedCount()) })
	n.metrics.GaugeFunc("crewlet_unproven_teardowns",
		"Seats whose MCP servers would not stop on this node: each stays here until the process restarts (seat_still_unproven in the log).",
		func() float64 { return float64(len(n.live.Tenures.Unproven())) })
}

// tellSeatsAtOnce bounds the host_lost signals in flight at once.
const tellSeatsAtOnce = 16

// tellSeats signals host_lost to each seat on the incarnation. A seat
// whose workflow is gone needs nothing; it reports false when a signal
// failed otherwise, so the claim is given back and tried again.
func (n *Node) tellSeats(incarnation string, seats []string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := fanout.Each(len(seats), tellSeatsAtOnce, func(i int) error {
		err := n.seats.HostLost(ctx, seats[i], crewlet.HostLostRequest{Node: incarnation, By: n.Incarnation})
		if err != nil && !seatclient.Gone(err) {
			n.metrics.HostLostSignal(false)
			n.log.Warn("host_lost_signal_failed", "seat", seats[i], "dead", incarnation, "error", err)
			return err
		}
		n.metrics.HostLostSignal(true)
		return nil
	})
	return err == nil
}

// hookedPresence is the presence loop's store as the test hooks see it:
// NodeOptions.WedgeAfter wedges the loop in its write, CutStoreAfter fails
// the write.
type hookedPresence struct {
	*store.Store
	n *Node
}

func (s hookedPresence) NodeHeartbeat(ctx context.Context, incarnation string, held int, unproven map[string]int64) (bool, error) {
	if s.n.opts.WedgeAfter > 0 && time.Since(s.n.started) > s.n.opts.WedgeAfter {
		s.n.log.Warn("node_wedged_by_test_hook")
		select {} // what a deadlock looks like from outside
	}
	if s.n.opts.CutStoreAfter > 0 && time.Since(s.n.started) > s.n.opts.CutStoreAfter {
		return false, errors.New("store cut off by test hook")
	}
	return s.Store.NodeHeartbeat(ctx, incarnation, held, unproven)
}

// Drain stops the node taking new seats, asks every seat it hosts to move,
// and waits (up to the drain timeout) until none is left.
func (n *Node) Drain(ctx context.Context) error {
	// A shutdown legitimately blocks loops while seats leave; exiting 75 in
	// the middle of it would abandon the releases that make a drain graceful.
	n.watchdog.Disarm()
	n.live.Tenures.SetDraining()
	if err := n.presence.MarkNodeDraining(ctx, n.Incarnation); err != nil {
		n.log.Warn("node_drain_mark_failed", "error", err)
	}
	hosted := n.live.Tenures.Hosted()
	n.log.Info("node_draining", "seats", len(hosted))
	for handle := range hosted {
		err := n.seats.Move(ctx, handle, crewlet.MoveRequest{ExcludeNode: n.Incarnation, Reason: "node drain", By: n.Incarnation})
		if err != nil {
			n.log.Warn("node_drain_signal_failed", "seat", handle, "error", err)
		}
	}
	deadline := time.Now().Add(n.org.Now().Nodes.DrainTimeout)
	for n.live.Tenures.HostedCount() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("drain: %d seats still hosted after %s", n.live.Tenures.HostedCount(), n.org.Now().Nodes.DrainTimeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	n.log.Info("node_drained")
	return nil
}

// Stop disarms the watchdog (if Drain did not), stops the workers and records that this
// incarnation is gone, so peers stop counting it at once.
func (n *Node) Stop() {
	n.watchdog.Disarm()
	close(n.stop)
	// The watchdog is disarmed now, so a loop wedged during shutdown would
	// keep the process from ever leaving: wait for the loops at most a
	// heartbeat timeout, then go on without them.
	loopsDone := make(chan struct{})
	go func() { n.loopsDone.Wait(); close(loopsDone) }()
	select {
	case <-loopsDone:
	case <-time.After(n.org.Now().Nodes.HeartbeatTimeout):
		n.log.Warn("node_loops_stuck", "waited", n.org.Now().Nodes.HeartbeatTimeout)
	}
	n.shared.Stop()
	n.hosted.Stop()
	n.notifier.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := n.presence.StopNode(ctx, n.Incarnation); err != nil {
		n.log.Warn("node_stop_record_failed", "error", err)
	}
	n.presence.Close()
	n.log.Info("node_stopped")
}

// RebalanceScheduleID is the id of the rebalance duty's Temporal Schedule for
// the org's task queue.
func RebalanceScheduleID(taskQueue string) string { return "crewlet-rebalance/" + taskQueue }

// MaintenanceScheduleID is the id of the maintenance duty's Temporal Schedule.
func MaintenanceScheduleID(taskQueue string) string { return "crewlet-maintenance/" + taskQueue }

// HealthScheduleID is the id of the health duty's Temporal Schedule.
func HealthScheduleID(taskQueue string) string { return "crewlet-health/" + taskQueue }

// ReconcileScheduleID is the id of the reconcile duty's Temporal Schedule;
// reconcile.Trigger runs it now.
func ReconcileScheduleID(taskQueue string) string { return reconcile.ScheduleID(taskQueue) }

// ensureSchedule creates a duty's Schedule (overlap SKIP: a duty is a
// singleton), or updates its interval to this config's.
func (n *Node) ensureSchedule(ctx context.Context, id, workflowType string, every time.Duration) error {
	tq := n.org.Now().Temporal.TaskQueue
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}}
	_, err := n.temporal.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:      id,
		Spec:    spec,
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		Action: &client.ScheduleWorkflowAction{
			ID: id, Workflow: workflowType, TaskQueue: tq,
			WorkflowExecutionTimeout: 10 * time.Minute,
		},
	})
	var exists *serviceerror.AlreadyExists
	if err == nil || !(errors.As(err, &exists) || errors.Is(err, temporal.ErrScheduleAlreadyRunning)) {
		return err
	}
	return n.temporal.ScheduleClient().GetHandle(ctx, id).Update(ctx, client.ScheduleUpdateOptions{
		DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
			in.Description.Schedule.Spec = &spec
			return &client.ScheduleUpdate{Schedule: &in.Description.Schedule}, nil
		},
	})
}

// startTools starts the MCP servers of a seat's role; a role with none
// starts nothing. A server the node's allow-list does not cover is refused
// before anything starts, naming it.
func startTools(ctx context.Context, org *config.Config, allowed []config.MCPAllow, handle string, log *slog.Logger) (activities.ToolSession, error) {
	seat, _ := org.Seat(handle)
	role := org.Roles[seat.Role]
	if len(role.MCP) == 0 {
		return nil, nil
	}
	if refused := config.MCPNotAllowed(allowed, &config.Config{Roles: map[string]config.Role{seat.Role: role}}); len(refused) > 0 {
		return nil, crewlet.Errorf(crewlet.EINVALID, "this node does not run MCP servers its own file did not allow: %s", strings.Join(refused, "; "))
	}
	policy, err := sandboxPolicy(org, role, handle)
	if err != nil {
		return nil, err
	}
	servers := make([]tools.ServerConfig, len(role.MCP))
	for i, m := range role.MCP {
		servers[i] = tools.ServerConfig{Name: m.Name, Command: m.Command, Env: m.CommandEnv(), RunAs: m.RunAs, URL: m.URL, Headers: m.Headers()}
		if len(m.Command) > 0 {
			servers[i].Sandbox = policy
		}
	}
	session, err := tools.Start(ctx, servers, log.With("seat", handle))
	if session == nil {
		// A nil *tools.Session must not become a non-nil interface.
		return nil, err
	}
	return session, err
}

// sandboxPolicy is how a seat's stdio MCP children are confined: nil for
// a role whose sandbox.mode is none, else its workspace under the node's
// workspace root and what its role names.
func sandboxPolicy(org *config.Config, role config.Role, handle string) (*sandbox.Policy, error) {
	if !role.Sandbox.Confined() {
		return nil, nil
	}
	root, err := org.Nodes.WorkspaceRoot()
	if err != nil {
		return nil, err
	}
	return &sandbox.Policy{
		Workspace: filepath.Join(root, handle),
		Read:      role.Sandbox.Read, Write: role.Sandbox.Write,
		NoNetwork: role.Sandbox.Network == config.NetworkNone,
	}, nil
}

// logConfinement says, once per role with stdio MCP servers, how this node
// confines their children: sandbox (with what it sees), run_as, both, or
// none, and whether this kernel can do what the role asks.
func logConfinement(org *config.Config, log *slog.Logger) {
	for _, name := range slices.Sorted(maps.Keys(org.Roles)) {
		role := org.Roles[name]
		var runAs []string
		stdio := false
		for _, m := range role.MCP {
			if len(m.Command) > 0 {
				stdio = true
				if m.RunAs != "" {
					runAs = append(runAs, m.Name+"="+m.RunAs)
				}
			}
		}
		if !stdio {
			continue
		}
		attrs := []any{"role", name}
		if len(runAs) > 0 {
			attrs = append(attrs, "run_as", runAs)
		}
		if !role.Sandbox.Confined() {
			confinement := "none"
			if len(runAs) > 0 {
				confinement = "run_as"
			}
			log.Warn("mcp_children_confinement", append(attrs, "confinement", confinement, "chosen_by", "roles."+name+".sandbox.mode: none")...)
			continue
		}
		policy, err := sandboxPolicy(org, role, "SEAT")
		if err == nil {
			err = sandbox.Check(*policy)
		}
		if err != nil {
			log.Error("mcp_children_confinement", append(attrs, "confinement", "sandbox", "problem", err.Error(),
				"effect", "the role's seats start no MCP server on this node")...)
			continue
		}
		log.Info("mcp_children_confinement", append(attrs, "confinement", "sandbox", "mechanism", sandbox.Mechanism, "abi", sandbox.ABI(),
			"workspace", policy.Workspace, "read", role.Sandbox.Read, "write", role.Sandbox.Write, "network", role.Sandbox.Network)...)
	}
}
