// Command temporal-dev is the dev stack's Temporal server: Temporal server
// and the Temporal UI from their Go modules, in one process, on SQLite (in
// memory, or a file with --db-filename), with the default namespace and the
// given search attributes registered before it serves. It takes the flags of
// `temporal server start-dev` that crewlet's dev stack and tests use, so it
// stands in for the CLI's dev server, whose newest buildable release
// (temporal CLI v1.5.1) embeds server v1.29.1: seats are Pinned and move at
// continue-as-new, which needs server 1.31 or later (docs/versioning.md).
//
//	temporal-dev [--ip IP] [--port N] [--ui-ip IP] [--ui-port N] [--headless]
//	             [--db-filename FILE] [--log-level LEVEL]
//	             [--dynamic-config-value KEY=JSON]... [--search-attribute NAME=TYPE]...
//	temporal-dev check ADDRESS   exit 0 once ADDRESS serves the default namespace
//
// It lives in a module of its own (deploy/temporal/go.mod), so that crewlet's
// module does not depend on the server's; deploy/dev/stack.sh builds it.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	uiserver "github.com/temporalio/ui-server/v2/server"
	uiconfig "github.com/temporalio/ui-server/v2/server/config"
	uioptions "github.com/temporalio/ui-server/v2/server/server_options"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/headers"
	tlog "go.temporal.io/server/common/log"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"go.temporal.io/server/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	namespace   = "default"
	clusterName = "active"
)

// repeated is a flag given once per value.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

type options struct {
	ip, uiIP       string
	port, uiPort   int
	pprofPort      int
	headless       bool
	dbFile         string
	logLevel       string
	dynamicConfig  repeated
	searchAttrs    repeated
	frontendHTTP   int
	servicePorts   map[primitives.ServiceName]int
	dynamicValues  dynamicconfig.StaticClient
	searchAttrType map[string]enumspb.IndexedValueType
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "check" {
		if len(os.Args) != 3 {
			fail("usage: temporal-dev check HOST:PORT")
		}
		if err := check(os.Args[2]); err != nil {
			fmt.Fprintf(os.Stderr, "temporal-dev: %s does not serve namespace %q: %v\n", os.Args[2], namespace, err)
			os.Exit(1)
		}
		return
	}
	o, err := parse(os.Args[1:])
	if err != nil {
		fail(err.Error())
	}
	if err := run(o); err != nil {
		fail(err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "temporal-dev:", msg)
	os.Exit(2)
}

func parse(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("temporal-dev", flag.ContinueOnError)
	fs.StringVar(&o.ip, "ip", "127.0.0.1", "IP the frontend listens on")
	fs.IntVar(&o.port, "port", 7233, "frontend gRPC port")
	fs.StringVar(&o.uiIP, "ui-ip", "", "IP the UI listens on (default: --ip)")
	fs.IntVar(&o.uiPort, "ui-port", 0, "UI port (default: --port + 1000)")
	fs.BoolVar(&o.headless, "headless", false, "run without the UI")
	fs.IntVar(&o.pprofPort, "pprof-port", 0, "port of the server's Go pprof endpoint on --ip, to profile where the server spends its CPU (0: none)")
	fs.StringVar(&o.dbFile, "db-filename", "", "SQLite file for the state (default: in memory, gone at exit)")
	fs.StringVar(&o.logLevel, "log-level", "warn", "server log level: debug, info, warn or error")
	fs.Var(&o.dynamicConfig, "dynamic-config-value", "dynamic config KEY=JSON-VALUE (repeatable)")
	fs.Var(&o.searchAttrs, "search-attribute", "custom search attribute NAME=TYPE on the default namespace (repeatable)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if o.uiIP == "" {
		o.uiIP = o.ip
	}
	if o.uiPort == 0 {
		o.uiPort = o.port + 1000
	}
	// What `temporal server start-dev` sets by itself: a search attribute is
	// visible as soon as it is created, with persistence limits raised to
	// match, and the visibility rate a test run that lists seats needs.
	o.dynamicValues = dynamicconfig.StaticClient{
		dynamicconfig.MakeKey("system.forceSearchAttributesCacheRefreshOnRead"): true,
		dynamicconfig.MakeKey("frontend.persistenceMaxQPS"):                     10000,
		dynamicconfig.MakeKey("history.persistenceMaxQPS"):                      45000,
		dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                        8096,
		dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key():        100,
	}
	for _, kv := range o.dynamicConfig {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, fmt.Errorf("--dynamic-config-value %q: want KEY=JSON-VALUE", kv)
		}
		val, err := jsonValue(v)
		if err != nil {
			return nil, fmt.Errorf("--dynamic-config-value %s: the value is not JSON (%v); quote a string: %s=\"text\"", k, err, k)
		}
		o.dynamicValues[dynamicconfig.MakeKey(k)] = val
	}
	o.searchAttrType = map[string]enumspb.IndexedValueType{}
	for _, nt := range o.searchAttrs {
		name, typ, ok := strings.Cut(nt, "=")
		t, known := enumspb.IndexedValueType_shorthandValue[typ]
		if !ok || !known || t == int32(enumspb.INDEXED_VALUE_TYPE_UNSPECIFIED) {
			return nil, fmt.Errorf("--search-attribute %q: want NAME=TYPE, TYPE one of Text, Keyword, Int, Double, Bool, Datetime, KeywordList", nt)
		}
		o.searchAttrType[name] = enumspb.IndexedValueType(t)
	}
	return o, nil
}

// jsonValue decodes a dynamic config value; a whole number becomes an int,
// the only integer type dynamic config takes.
func jsonValue(s string) (any, error) {
	d := json.NewDecoder(strings.NewReader(s))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if n, ok := v.(json.Number); ok {
		if i, err := n.Int64(); err == nil {
			return int(i), nil
		}
		return n.Float64()
	}
	return v, nil
}

func run(o *options) error {
	ports, err := freePorts(o.ip, 4)
	if err != nil {
		return err
	}
	o.frontendHTTP = ports[0]
	o.servicePorts = map[primitives.ServiceName]int{
		primitives.FrontendService: o.port,
		primitives.HistoryService:  ports[1],
		primitives.MatchingService: ports[2],
		primitives.WorkerService:   ports[3],
	}
	cfg, err := o.serverConfig()
	if err != nil {
		return err
	}
	logger := tlog.NewZapLogger(tlog.BuildZapLogger(tlog.Config{Level: o.logLevel, Format: "console"}))
	hosts := map[primitives.ServiceName]static.Hosts{}
	for svc, port := range o.servicePorts {
		hosts[svc] = static.SingleLocalHost(net.JoinHostPort(o.ip, strconv.Itoa(port)))
	}
	srv, err := temporal.NewServer(
		temporal.WithConfig(cfg),
		temporal.ForServices(temporal.DefaultServices),
		temporal.WithStaticHosts(hosts),
		temporal.WithLogger(logger),
		temporal.WithDynamicConfigClient(o.dynamicValues),
	)
	if err != nil {
		return fmt.Errorf("build the server: %w", err)
	}
	if err := srv.Start(); err != nil {
		return fmt.Errorf("start the server: %w", err)
	}
	defer srv.Stop()
	fmt.Printf("Temporal server %s on %s\n", headers.ServerVersion, net.JoinHostPort(o.ip, strconv.Itoa(o.port)))

	uiErr := make(chan error, 1)
	if !o.headless {
		ui := uiserver.NewServer(uioptions.WithConfigProvider(&uiconfig.Config{
			Host:                o.uiIP,
			Port:                o.uiPort,
			TemporalGRPCAddress: net.JoinHostPort(o.ip, strconv.Itoa(o.port)),
			EnableUI:            true,
			CORS:                uiconfig.CORS{CookieInsecure: true},
			HideLogs:            true,
		}))
		go func() { uiErr <- ui.Start() }()
		defer ui.Stop()
		fmt.Printf("Temporal UI on http://%s\n", net.JoinHostPort(o.uiIP, strconv.Itoa(o.uiPort)))
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	select {
	case <-stop:
		return nil
	case err := <-uiErr:
		return fmt.Errorf("the UI server stopped: %w", err)
	}
}

// serverConfig is a one-shard, single-process server on SQLite with the
// default namespace and its search attributes registered.
func (o *options) serverConfig() (*config.Config, error) {
	sql := &config.SQL{PluginName: sqliteplugin.PluginName}
	if o.dbFile == "" {
		sql.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
		sql.DatabaseName = strconv.Itoa(rand.IntN(9_999_999))
	} else {
		sql.ConnectAttributes = map[string]string{"mode": "rwc"}
		sql.DatabaseName = o.dbFile
		if _, err := os.Stat(o.dbFile); os.IsNotExist(err) {
			if err := sqliteschema.SetupSchema(sql); err != nil {
				return nil, fmt.Errorf("create the schema in %s: %w", o.dbFile, err)
			}
		}
	}
	ns, err := sqliteschema.NewNamespaceConfig(clusterName, namespace, false, o.searchAttrType)
	if err != nil {
		return nil, fmt.Errorf("namespace %s: %w", namespace, err)
	}
	if err := sqliteschema.CreateNamespaces(sql, ns); err != nil {
		return nil, fmt.Errorf("register namespace %s: %w", namespace, err)
	}

	frontend := net.JoinHostPort(o.ip, strconv.Itoa(o.port))
	cfg := &config.Config{}
	cfg.Global.Membership.MaxJoinDuration = 30 * time.Second
	cfg.Global.Membership.BroadcastAddress = o.ip
	cfg.Global.PProf.Port, cfg.Global.PProf.Host = o.pprofPort, o.ip
	cfg.Persistence.DefaultStore = "sqlite"
	cfg.Persistence.VisibilityStore = "sqlite"
	cfg.Persistence.NumHistoryShards = 1
	cfg.Persistence.DataStores = map[string]config.DataStore{"sqlite": {SQL: sql}}
	cfg.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{clusterName: {
			Enabled:                true,
			InitialFailoverVersion: 1,
			RPCAddress:             frontend,
			HTTPAddress:            net.JoinHostPort(o.ip, strconv.Itoa(o.frontendHTTP)),
		}},
	}
	cfg.DCRedirectionPolicy.Policy = "noop"
	cfg.Services = map[string]config.Service{}
	for svc, port := range o.servicePorts {
		s := config.Service{}
		s.RPC.GRPCPort, s.RPC.BindOnIP = port, o.ip
		if svc == primitives.FrontendService {
			s.RPC.HTTPPort = o.frontendHTTP
		}
		cfg.Services[string(svc)] = s
	}
	cfg.Archival.History.State = "disabled"
	cfg.Archival.Visibility.State = "disabled"
	cfg.NamespaceDefaults.Archival.History.State = "disabled"
	cfg.NamespaceDefaults.Archival.Visibility.State = "disabled"
	cfg.PublicClient.HostPort = frontend
	return cfg, nil
}

// freePorts are n ports free on ip now, for the services other than the
// frontend, which listen on them a moment later.
func freePorts(ip string, n int) ([]int, error) {
	var ports []int
	for range n {
		ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return nil, fmt.Errorf("find a free port on %s: %w", ip, err)
		}
		defer ln.Close()
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// check asks address for the default namespace, as a client would.
func check(address string) error {
	conn, err := grpc.NewClient(address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err = workflowservice.NewWorkflowServiceClient(conn).DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	return err
}
