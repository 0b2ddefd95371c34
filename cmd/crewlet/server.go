package main

import (
	"context"
	"crypto/subtle"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/crewlet/crewlet"
	"github.com/crewlet/crewlet/api"
	"github.com/crewlet/crewlet/internal/a2a/push"
	"github.com/crewlet/crewlet/internal/config"
	"github.com/crewlet/crewlet/internal/events"
	"github.com/crewlet/crewlet/internal/logging"
	"github.com/crewlet/crewlet/internal/mailbox"
	"github.com/crewlet/crewlet/internal/metrics"
	"github.com/crewlet/crewlet/internal/reconcile"
	"github.com/crewlet/crewlet/internal/replay"
	"github.com/crewlet/crewlet/internal/revisions"
	"github.com/crewlet/crewlet/internal/schedules"
	"github.com/crewlet/crewlet/internal/services"
	"github.com/crewlet/crewlet/internal/store"
	"github.com/crewlet/crewlet/internal/testhook"
	"github.com/crewlet/crewlet/internal/tools"
	"github.com/crewlet/crewlet/internal/tracing"
	"github.com/crewlet/crewlet/workers"
)

type serverRole int

const (
	roleAPI serverRole = 1 << iota
	roleWorker
)

// String names the role as the command that runs it.
func (r serverRole) String() string {
	switch r {
	case roleAPI:
		return "api"
	case roleWorker:
		return "worker"
	}
	return "serve"
}

// tracingFromEnv builds a server process's tracing; a test puts an
// in-memory exporter in its place.
var tracingFromEnv = tracing.FromEnv

// deps are the clients a server process builds once and injects everywhere.
type deps struct {
	// org is the config the process started with: its cold keys
	// (config.ColdKeys) hold for the process's life.
	org *config.Config
	// live is the org the process runs now: the active config revision,
	// which follower keeps it on.
	live     *config.Live
	follower *revisions.Follower
	// process names this process in config_processes.
	process  string
	store    *store.Store
	mailbox  *mailbox.Mailbox
	temporal client.Client
	log      *slog.Logger
	metrics  *metrics.Metrics
	tracing  *tracing.Tracing
}

// services builds the process's one service graph over its clients; the
// services log to log.
func (d *deps) services(log *slog.Logger) *services.Graph {
	return services.New(d.live, services.Clients{Store: d.store, Mailbox: d.mailbox, Temporal: d.temporal, Metrics: d.metrics}, log)
}

func (d *deps) close() {
	if d.temporal != nil {
		d.temporal.Close()
	}
	if d.tracing != nil {
		// What the exporter has not sent in this bound is dropped: an
		// unreachable collector must not hold up the exit.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := d.tracing.Shutdown(ctx); err != nil {
			d.log.Warn("traces_unexported", "error", err)
		}
		cancel()
	}
	if d.mailbox != nil {
		_ = d.mailbox.Close()
	}
	if d.store != nil {
		d.store.Close()
	}
}

// storeURL reads a connection URL from the env var the config names.
func storeURL(key, envName string) (string, error) {
	v := os.Getenv(envName)
	if v == "" {
		return "", fmt.Errorf("%s.url_env names %s, which is not set; export it (the dev stack's values are in .dev/env)", key, envName)
	}
	return v, nil
}

// connect loads the org, builds the logger it configures (log.format,
// log.level) on stderr, and connects to Postgres (migrated and claimed for
// this deployment, see openDatabase), Redis and Temporal. It fails before anything
// starts if any of them is missing.
func connect(ctx context.Context, path, kind string, stderr io.Writer) (*deps, error) {
	org, err := config.Load(path)
	if err != nil {
		return nil, err
	}
	file, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config %s: %w", path, err)
	}
	log, err := logging.New(stderr, org.Log)
	if err != nil {
		return nil, err
	}
	pgURL, pgErr := storeURL("postgres", org.Postgres.URLEnv)
	redisURL, redisErr := storeURL("redis", org.Redis.URLEnv)
	if err := errors.Join(pgErr, redisErr); err != nil {
		return nil, err
	}
	d := &deps{org: org, log: log}
	if org.Metrics.Enabled {
		d.metrics = metrics.New()
	}
	if d.tracing, err = tracingFromEnv(ctx); err != nil {
		return nil, err
	}
	var schema store.MigrateReport
	if d.store, schema, err = openDatabase(ctx, org, pgURL); err != nil {
		d.close()
		return nil, err
	}
	logSchema(log, schema)
	d.process, _ = workers.Incarnation("")
	rev, err := revisions.Start(ctx, d.store, file, org, "start:"+d.process, log)
	if err != nil {
		d.close()
		return nil, err
	}
	d.follower = revisions.NewFollower(d.store, rev, org, d.process, kind, log)
	d.live = d.follower.Live
	if len(rev.NeedsRestart) > 0 {
		log.Warn("config_needs_restart", "revision", rev.Number, "keys", rev.NeedsRestart,
			"hint", "the active revision changes keys this process's file does not; restart it with the active revision's file (crewlet config show --document)")
	}
	if d.mailbox, err = mailbox.Open(ctx, redisURL, org.Mailbox.KeyPrefix); err != nil {
		d.close()
		return nil, err
	}
	opts, err := temporalOptions(org)
	if err != nil {
		d.close()
		return nil, err
	}
	opts.Logger = tlog.NewStructuredLogger(log)
	opts.MetricsHandler = d.metrics.Temporal()
	if opts.Interceptors, err = d.tracing.Interceptors(); err != nil {
		d.close()
		return nil, err
	}
	d.temporal, err = client.DialContext(ctx, opts)
	if err != nil {
		d.close()
		return nil, fmt.Errorf("connect temporal at %s: %w", org.Temporal.Address, err)
	}
	return d, nil
}

// openDatabase opens the org's database, refuses a schema more than one
// release newer than this build (before anything else reads it), applies
// pending migrations and claims the database for this deployment (company,
// Temporal namespace, task queue): every server command (serve, worker, api,
// migrate) comes through here before it uses the database. Nodes, placement
// and the mailbox registry are per database, so a database another
// deployment claimed is refused, and refused before a migration touches it.
// An empty database, or one from before migration 0015 (which holds data but
// no claim), is claimed by the first process that migrates it.
func openDatabase(ctx context.Context, org *config.Config, url string) (*store.Store, store.MigrateReport, error) {
	st, err := store.Open(ctx, url)
	if err != nil {
		return nil, store.MigrateReport{}, err
	}
	d := store.Deployment{Company: org.Company.Name, Namespace: org.Temporal.Namespace, TaskQueue: org.Temporal.TaskQueue}
	if _, err := st.CheckSchema(ctx); err != nil {
		st.Close()
		return nil, store.MigrateReport{}, err
	}
	if err := st.CheckDeployment(ctx, d); err != nil {
		st.Close()
		return nil, store.MigrateReport{}, err
	}
	report, err := st.Migrate(ctx)
	if err == nil {
		err = st.ClaimDeployment(ctx, d)
	}
	if err != nil {
		st.Close()
		return nil, report, err
	}
	return st, report, nil
}

// serverCmd is `crewlet serve`, `worker` or `api`: the process of role.
func (c *cli) serverCmd(role serverRole) *cobra.Command {
	var flags serverFlags
	cmd := &cobra.Command{
		Use:     role.String(),
		Args:    noArgs,
		Example: "  crewlet " + role.String() + " --config crewlet.yaml",
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runServer(cmd.Context(), c.config, flags, c.stderr, role)
		},
	}
	switch role {
	case roleWorker:
		cmd.Short = "run a worker node: it hosts seats and runs their turns"
		cmd.Example += "\n  crewlet worker --node-id n1 --labels tools=git --capacity 50"
	case roleAPI:
		cmd.Short = "run the REST API and the console"
	default:
		cmd.Short = "run the API and a worker node in one process; --watch applies the org file as a new config revision whenever it changes"
		cmd.Example += " --watch"
	}
	f := cmd.Flags()
	f.StringVar(&flags.nodeID, "node-id", envOr("CREWLET_NODE_ID", ""), "stable node id (default $CREWLET_NODE_ID, else the host name)")
	f.StringVar(&flags.labels, "labels", envOr("CREWLET_NODE_LABELS", ""), "node labels KEY=VALUE,... matched by role placement (default $CREWLET_NODE_LABELS)")
	f.IntVar(&flags.capacity, "capacity", 0, "most seats this node hosts (0: no limit)")
	f.BoolVar(&flags.watch, "watch", false, "apply the org file as a new config revision whenever it changes")
	return cmd
}

// serverFlags are the flags of serve, worker and api.
type serverFlags struct {
	nodeID, labels string
	capacity       int
	watch          bool
}

func runServer(ctx context.Context, cfgPath string, flags serverFlags, stderr io.Writer, role serverRole) error {
	// Before anything reads a secret: a process of crewlet's user (an MCP
	// child) may not read its environment or memory through /proc.
	if err := tools.ProtectProcess(); err != nil {
		return err
	}
	d, err := connect(ctx, cfgPath, role.String(), stderr)
	if err != nil {
		return err
	}
	defer d.close()
	log := d.log
	// One graph serves the node and the API: in serve they share every
	// service. A worker's incarnation is minted here so that the services'
	// lines name the node, as the node's own do.
	svcLog := log
	var incarnation, nodeName string
	if role&roleWorker != 0 {
		incarnation, nodeName = workers.Incarnation(flags.nodeID)
		svcLog = log.With("node", incarnation)
	}
	g := d.services(svcLog)
	if role&roleWorker != 0 {
		// Seat workflow ids are per namespace: a worker must not start, wake
		// or host a seat another deployment's workflow already runs. The API
		// alone starts no seat at boot; its wakes are checked one by one.
		if err := g.Seats.CheckSeatWorkflows(ctx); err != nil {
			return err
		}
	}
	// Every process makes sure every seat has its row and mailbox before it
	// serves, so mail sent now waits for its seat instead of vanishing.
	if err := g.Reconciler.PrepareSeats(ctx, d.live.Now()); err != nil {
		return fmt.Errorf("prepare seats: %w", err)
	}

	errc := make(chan error, 2)
	// Metrics are up first, so a node's boot can be watched too.
	var metricsSrv *http.Server
	if addr := d.org.Metrics.Listen; addr != "" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("metrics: listen on %s: %w", addr, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", d.metrics.Handler())
		if d.org.Metrics.Pprof {
			mux.HandleFunc("GET /debug/pprof/", pprof.Index)
			mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
			mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
			mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
		}
		metricsSrv = &http.Server{Handler: bearerOnly(d.org.Metrics.Token(), mux), ReadHeaderTimeout: 10 * time.Second}
		go func() { errc <- metricsSrv.Serve(ln) }()
		log.Info("metrics_listening", "addr", ln.Addr().String())
	}
	var node *workers.Node
	if role&roleWorker != 0 {
		opts, err := nodeOptions(flags.nodeID, flags.labels, flags.capacity, stderr)
		if err != nil {
			return err
		}
		opts.Incarnation, opts.NodeID = incarnation, nodeName
		if node, err = workers.StartNode(ctx, g, log, opts); err != nil {
			return err
		}
	}
	var srv *http.Server
	if role&roleAPI != 0 {
		// maxLiveStreams is how many live streams the process reads at
		// once, each holding a Redis connection in a blocking read; more
		// wait for a connection.
		const maxLiveStreams = 1024
		ln, localToken, tokenFile, err := listenAPI(d.org, log, terminalOf(os.Stderr))
		if err != nil {
			if node != nil {
				node.Stop()
			}
			return err
		}
		if tokenFile != "" {
			// The token is this boot's: a stale file would only mislead.
			defer os.Remove(tokenFile)
		}
		// The company's gauges come from the processes that serve the API,
		// which read the company for it anyway.
		d.metrics.WatchCompany(g.Views.Company, d.org.Metrics.SeatLabels, log)
		ticketWatch := d.store.WatchTickets(log)
		go ticketWatch.Run(ctx)
		// Every API process posts the A2A push notifications owed, so any
		// one that is up delivers them.
		go push.NewDispatcher(d.store, func() []string { return g.Org.Now().A2A.Push.Allow }, log, time.Second).Run(ctx)
		h := &api.Server{Org: g.Org, Seats: g.Seats, Views: g.Views, Delivery: g.Delivery, Store: g.Store, Tickets: g.Tickets, TicketWatch: ticketWatch, Profiles: g.Profiles,
			Mailbox: g.Mailbox, Temporal: g.Temporal, Log: log, Metrics: g.Metrics, Tracing: d.tracing, Follow: d.follower.Refresh, Spawn: g.Spawn,
			Approvals: g.Approvals, Replay: &replay.Engine{Store: g.Store, Org: g.Org, Log: log},
			Events: events.NewReader(d.mailbox.Redis(), d.org.Mailbox.KeyPrefix, maxLiveStreams), LocalToken: localToken,
			MCPAllowed: d.org.MCPAllowed()}
		// WriteTimeout outlasts the longest request, a POST /tickets
		// long-poll (10 minutes).
		srv = &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second, ReadTimeout: time.Minute,
			WriteTimeout: 11 * time.Minute, IdleTimeout: 2 * time.Minute}
		tlsFiles := d.org.API.TLS
		if tlsFiles.Enabled() {
			srv.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12}
			go func() { errc <- srv.ServeTLS(ln, tlsFiles.CertFile, tlsFiles.KeyFile) }()
		} else {
			go func() { errc <- srv.Serve(ln) }()
		}
		log.Info("api_listening", "addr", ln.Addr().String(), "tls", tlsFiles.Enabled())
	}

	// The process follows the active config revision from here on. Each
	// new one gets the rows and mailboxes of the seats it added, so mail
	// sent to them waits; on a worker, the reconcile duty runs a pass at
	// once (seats started, removed ones stopped by its rules) and the
	// revision's schedules become Temporal's.
	prev := d.live.Now()
	d.follower.OnChange(func(ctx context.Context, rev config.Revision) {
		added := *rev.Org
		added.Seats = addedSeats(prev, rev.Org)
		prev = rev.Org
		if err := g.Reconciler.PrepareSeats(ctx, &added); err != nil {
			log.Warn("config_prepare_seats_failed", "revision", rev.Number, "error", err)
		}
		if node == nil {
			return
		}
		if err := d.store.SetNodeSeatsDigest(ctx, node.Incarnation, rev.Org.SeatsDigest()); err != nil {
			log.Warn("config_seats_digest_unrecorded", "error", err)
		}
		if err := reconcile.Trigger(ctx, d.temporal, d.org.Temporal.TaskQueue); err != nil {
			log.Warn("config_reconcile_failed", "revision", rev.Number, "error", err)
		}
		if err := schedules.Sync(ctx, d.temporal, rev.Org, log); err != nil {
			log.Warn("org_schedules_sync_failed", "revision", rev.Number, "error", err)
		}
	})
	followCtx, stopFollowing := context.WithCancel(context.Background())
	defer stopFollowing()
	go d.follower.Run(followCtx, d.org.Nodes.HeartbeatTimeout/3)
	if flags.watch {
		go watchFile(followCtx, cfgPath, d, d.org.Nodes.HeartbeatTimeout/3)
	}

	var drainRequested <-chan struct{}
	if node != nil {
		drainRequested = node.DrainRequested
	}
	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting_down", "reason", "signal")
	case <-drainRequested:
		log.Info("shutting_down", "reason", "drain requested")
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			runErr = fmt.Errorf("http server: %w", err)
		}
	}
	// Shutdown always ends: whatever the seats do, the process is gone
	// within this bound of being asked to stop.
	bound := shutdownBound(d.org)
	forced := time.AfterFunc(bound, func() {
		log.Error("shutdown_forced", "after", bound, "reason", "the drain and the workers did not finish in time")
		os.Exit(exitShutdownForced)
	})
	defer forced.Stop()
	if node != nil {
		// A stopping node hands its seats over first: the turns in flight
		// finish, the seats move, then the node leaves.
		drainCtx, cancel := context.WithTimeout(context.Background(), d.org.Nodes.DrainTimeout+5*time.Second)
		if err := node.Drain(drainCtx); err != nil {
			log.Warn("node_drain_incomplete", "error", err)
		}
		cancel()
		node.Stop()
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, s := range []*http.Server{srv, metricsSrv} {
		if s != nil {
			_ = s.Shutdown(shutdownCtx)
		}
	}
	return runErr
}

// addedSeats are the seats of next that prev lacks.
func addedSeats(prev, next *config.Config) []config.Seat {
	var out []config.Seat
	for _, s := range next.Seats {
		if _, ok := prev.Seat(s.Handle); !ok {
			out = append(out, s)
		}
	}
	return out
}

// watchFile applies the org file as a new revision whenever its bytes
// change. A change it refuses (invalid, or a cold key: that needs a restart,
// which applies the file anyway) is logged and the running revision kept;
// the same bytes are not tried again until they change.
func watchFile(ctx context.Context, path string, d *deps, every time.Duration) {
	last := ""
	if file, err := os.ReadFile(path); err == nil {
		last = revisions.Digest(file)
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		file, err := os.ReadFile(path)
		if err != nil {
			d.log.Warn("config_watch_unreadable", "path", path, "error", err)
			continue
		}
		digest := revisions.Digest(file)
		if digest == last {
			continue
		}
		last = digest
		report, err := revisions.Apply(ctx, d.store, revisions.ApplyRequest{Document: file, By: "watch:" + d.process})
		if err != nil {
			d.log.Error("config_apply_refused", "path", path, "error", err)
			continue
		}
		d.log.Info("config_applied", "path", path, "revision", report.Revision, "unchanged", report.Unchanged, "changes", report.Changes)
		if err := d.follower.Refresh(ctx); err != nil {
			d.log.Warn("config_follow_failed", "error", err)
		}
	}
}

// exitShutdownForced is the exit code of a process that had to cut its
// shutdown short.
const exitShutdownForced = 1

// shutdownBound is the longest a server process takes to exit once asked:
// the drain (nodes.drain_timeout and its 5s grace), the node's loops and
// workers (two heartbeat timeouts), and the API's own shutdown (10s).
func shutdownBound(org *config.Config) time.Duration {
	return org.Nodes.DrainTimeout + 5*time.Second + 2*org.Nodes.HeartbeatTimeout + 10*time.Second
}

// nodeOptions reads the node's own settings: its id, labels and capacity
// are per process, not per org, so they come from flags or CREWLET_NODE_*.
func nodeOptions(nodeID, labels string, capacity int, stderr io.Writer) (workers.NodeOptions, error) {
	opts := workers.NodeOptions{NodeID: nodeID, Capacity: capacity, Labels: map[string]string{}, Stderr: stderr, Exit: os.Exit}
	if nodeID != "" && !crewlet.ValidName(nodeID) {
		return opts, usageError{msg: fmt.Sprintf("--node-id %q: %s", nodeID, crewlet.NamePattern)}
	}
	if capacity < 0 {
		return opts, usageError{msg: fmt.Sprintf("--capacity %d: must be 0 (no limit) or more", capacity)}
	}
	for _, kv := range strings.Split(labels, ",") {
		if strings.TrimSpace(kv) == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || !config.ValidLabel(k) || !config.ValidLabel(v) {
			return opts, usageError{msg: fmt.Sprintf("--labels: %q is not KEY=VALUE with both matching %s", kv, config.LabelPattern)}
		}
		opts.Labels[strings.ToLower(k)] = v
	}
	hooks := testhook.Current()
	opts.WedgeAfter, opts.CutStoreAfter, opts.SlowStart, opts.BeatOffset = hooks.WedgeAfter, hooks.CutStoreAfter, hooks.SlowStart, hooks.BeatOffset
	return opts, nil
}

func (c *cli) migrateCmd() *cobra.Command {
	return &cobra.Command{
		Use: "migrate", Short: "apply database migrations and exit",
		Example: "  crewlet migrate --config crewlet.yaml", Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runMigrate(cmd.Context(), c.config, c.stdout) },
	}
}

func runMigrate(ctx context.Context, cfgPath string, stdout io.Writer) error {
	org, err := config.Load(cfgPath)
	if err != nil {
		return err
	}
	url, err := storeURL("postgres", org.Postgres.URLEnv)
	if err != nil {
		return err
	}
	st, report, err := openDatabase(ctx, org, url)
	if err != nil {
		return err
	}
	defer st.Close()
	for _, name := range report.Applied {
		fmt.Fprintln(stdout, "migrations: applied", name)
	}
	if len(report.Applied) == 0 {
		fmt.Fprintln(stdout, "migrations: up to date at", report.After)
	} else {
		fmt.Fprintf(stdout, "migrations: schema %s -> %s\n", report.Before, report.After)
	}
	if build := store.BuildSchema(); report.After.Ahead(build) {
		fmt.Fprintf(stdout, "migrations: the database is ahead of this build (%s); this build runs on it for one release\n", build)
	}
	return nil
}

func (c *cli) configCheckCmd() *cobra.Command {
	return &cobra.Command{
		Use: "check FILE", Short: "validate an org file; lists every problem",
		Example: "  crewlet config check crewlet.yaml", Args: exactArgs(1),
		RunE: func(_ *cobra.Command, pos []string) error { return runConfigCheck(pos, c.stdout) },
	}
}

func runConfigCheck(pos []string, stdout io.Writer) error {
	org, overrides, err := config.LoadWithOverrides(pos[0])
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok (company %s, %d seats, %d agent)\n", pos[0], org.Company.Name, len(org.Seats), len(org.AgentSeats()))
	if len(overrides) > 0 {
		fmt.Fprintln(stdout, "overrides from the environment:", strings.Join(overrides, ", "))
	}
	return nil
}

// temporalOptions are the client options of the org's Temporal connection:
// address, namespace, and, when configured, TLS and an API key.
func temporalOptions(org *config.Config) (client.Options, error) {
	tlsConfig, err := org.Temporal.ClientTLS()
	if err != nil {
		return client.Options{}, err
	}
	key, err := org.Temporal.APIKey()
	if err != nil {
		return client.Options{}, err
	}
	opts := client.Options{
		HostPort: org.Temporal.Address, Namespace: org.Temporal.Namespace,
		ConnectionOptions: client.ConnectionOptions{TLS: tlsConfig},
	}
	if key != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(key)
	}
	if count, ok := countTemporalCalls(testhook.Current().TemporalCalls); ok {
		opts.ConnectionOptions.DialOptions = append(opts.ConnectionOptions.DialOptions, count)
	}
	return opts, nil
}

// bearerOnly serves h to requests that carry token as their bearer
// (compared in constant time), and refuses the rest 401; with no token it
// is h.
func bearerOnly(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if subtle.ConstantTimeCompare([]byte(got), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="crewlet metrics"`)
			http.Error(w, "this metrics listener takes a bearer token: send Authorization: Bearer <the token in metrics.token_env>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
