package system

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// ClusterNodes are the names of the nodes of configs/nats-cluster, whose
// files are <name>.conf.
func ClusterNodes() []string { return []string{"n1", "n2", "n3"} }

// authFile is the least-privilege users' file a node configuration
// includes, beside it.
const authFile = "nats-server-auth.conf"

// The settings of a shipped cluster node configuration that
// WriteClusterNodeConfig replaces, besides those of WriteNATSConfig.
var (
	clusterListenLine = regexp.MustCompile(`(?m)^([ \t]+)listen:.*$`)
	routesBlock       = regexp.MustCompile(`(?s)(\n[ \t]*)routes: \[.*?\]`)
	includeAuthLine   = regexp.MustCompile(`(?m)^include \./` + regexp.QuoteMeta(authFile) + `\s*$`)
	systemAccount     = regexp.MustCompile(`(?s)\naccounts \{.*?\n\}\nsystem_account: SYS\n`)
)

// ClusterNodeConfig is what WriteClusterNodeConfig changes in a shipped
// node configuration (configs/nats-cluster/n1.conf, ...).
type ClusterNodeConfig struct {
	// ClientPort, MonitorPort and RoutePort are the node's client,
	// monitoring and cluster ports, on 127.0.0.1.
	ClientPort, MonitorPort, RoutePort int
	// StoreDir is the node's JetStream store directory.
	StoreDir string
	// Routes are the host:port addresses of the routes the node opens.
	Routes []string
	// RouteAdvertise, if set, is the cluster address the node gives the
	// other nodes when they learn of it through a third one; ClientAdvertise
	// the client address it gives clients. The harness sets both when
	// proxies stand between the nodes, so that nothing learns a way around
	// them.
	RouteAdvertise, ClientAdvertise string
	// Auth keeps the file's include of the least-privilege users and its
	// system account's user, and copies the users' file beside the
	// written configuration (the public keys then come from NKEY_*
	// variables in the server's environment, NKEY_SYSTEM included).
	// Without it both are left out, as on a single node on loopback.
	Auth bool
}

// WriteClusterNodeConfig copies the node configuration at from to to, with
// the addresses, store, routes and authorization of c. Everything else
// (sync_interval, lame duck mode, server tags, limits) is the shipped
// file's. A file without one of the replaced settings is an error.
func WriteClusterNodeConfig(from, to string, c ClusterNodeConfig) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("reading the node configuration: %w", err)
	}
	conf := string(b)
	listen := "listen: " + procs.Addr(c.ClientPort)
	if c.ClientAdvertise != "" {
		listen += "\nclient_advertise: " + strconv.Quote(c.ClientAdvertise)
	}
	clusterListen := "${1}listen: " + procs.Addr(c.RoutePort)
	if c.RouteAdvertise != "" {
		clusterListen += "\n${1}advertise: " + strconv.Quote(c.RouteAdvertise)
	}
	routes := "${1}routes: ["
	for _, r := range c.Routes {
		routes += "${1}  nats-route://" + r
	}
	routes += "${1}]"
	include, sys := "${0}", "${0}"
	if !c.Auth {
		include = "# include ./" + authFile + " (off for this run: its clients connect without users)"
		sys = "\n# (the system account's user is off for this run too)\n"
	}
	for _, r := range []struct {
		re   *regexp.Regexp
		with string
	}{
		{listenLine, listen},
		{httpLine, "http: " + procs.Addr(c.MonitorPort)},
		{storeDirLine, "${1}store_dir: " + strconv.Quote(c.StoreDir)},
		{clusterListenLine, clusterListen},
		{routesBlock, routes},
		{includeAuthLine, include},
		{systemAccount, sys},
		{syncLine, "${0}"}, // kept; required, so a file without it is refused
	} {
		if !r.re.MatchString(conf) {
			return fmt.Errorf("%s: no line matches %s; cannot configure the node", from, r.re)
		}
		conf = r.re.ReplaceAllString(conf, r.with)
	}
	if c.Auth {
		auth, err := os.ReadFile(filepath.Join(filepath.Dir(from), authFile))
		if err != nil {
			return fmt.Errorf("reading the users' file the node includes: %w", err)
		}
		if err := os.WriteFile(filepath.Join(filepath.Dir(to), authFile), auth, 0o600); err != nil {
			return err
		}
	}
	header := "# Generated from " + from + "; addresses, store_dir, routes and authorization set per run.\n"
	return os.WriteFile(to, []byte(header+conf), 0o644)
}

// ClusterOptions describe a local three-node cluster.
type ClusterOptions struct {
	// Sup starts the nodes as processes named nats-n1, nats-n2, nats-n3.
	Sup *procs.Supervisor
	// Bin is the directory holding nats-server.
	Bin string
	// ConfigDir holds the shipped node configurations (configs/nats-cluster).
	ConfigDir string
	// Dir receives the written configurations and the nodes' stores.
	Dir string
	// Proxies puts a [Proxy] on every route between two nodes (one per
	// direction) and in front of every node's client port, so that a node
	// can be cut off ([Cluster.Partition]).
	Proxies bool
	// Auth keeps the least-privilege users (see [ClusterNodeConfig.Auth]);
	// Env then must give the nodes their NKEY_* variables.
	Auth bool
	// Env are extra variables of the nodes' environment; Unset names those
	// they must not inherit.
	Env, Unset []string
	// ReadyTimeout bounds each node's start; StopTimeout its graceful stop.
	ReadyTimeout, StopTimeout time.Duration
	// Started, if set, is called after each node's process starts.
	Started func(*procs.Process)
}

// Cluster is a local three-node nats-server cluster on loopback ports, from
// the shipped node configurations: every node a real process with its own
// store, routes between all three. Nodes can be killed, stopped, started
// again on the same ports and store, and (with proxies) cut off from the
// others.
type Cluster struct {
	opts  ClusterOptions
	nodes []*clusterNode
	// sink is every node's advertised route address: it refuses the
	// implicit routes a node might open to another around the proxies.
	sink refuser
	// routeProxies[i][j] carries node i's route to node j.
	routeProxies  [][]*Proxy
	clientProxies []*Proxy

	mu sync.Mutex
}

// clusterNode is one node: its ports, its configuration and its process.
type clusterNode struct {
	name                               string
	clientPort, monitorPort, routePort int
	conf                               string
	proc                               *procs.Process
}

// StartCluster writes the three nodes' configurations, starts them and
// waits until each has JetStream enabled. The cluster has a meta leader
// soon after: [WaitMetaLeader] waits for it. On an error, what was started
// is left to the supervisor to stop, and the proxies are closed.
func StartCluster(ctx context.Context, o ClusterOptions) (_ *Cluster, err error) {
	names := ClusterNodes()
	c := &Cluster{opts: o}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	reserved, err := procs.ReservePorts(3 * len(names))
	if err != nil {
		return nil, err
	}
	// Held until the proxies listen: a proxy on port 0 was once given a
	// node's route port, and the node could not start.
	defer reserved.Release()
	ports := reserved.Ports
	for i, name := range names {
		c.nodes = append(c.nodes, &clusterNode{name: name, clientPort: ports[3*i], monitorPort: ports[3*i+1], routePort: ports[3*i+2],
			conf: filepath.Join(o.Dir, name+".conf")})
	}
	if o.Proxies {
		if c.sink, err = newRefuser(); err != nil {
			return nil, err
		}
		c.routeProxies = make([][]*Proxy, len(names))
		for i := range names {
			c.routeProxies[i] = make([]*Proxy, len(names))
			for j, to := range c.nodes {
				if i == j {
					continue
				}
				if c.routeProxies[i][j], err = NewProxy("127.0.0.1:0", procs.Addr(to.routePort)); err != nil {
					return nil, err
				}
			}
			p, err := NewProxy("127.0.0.1:0", procs.Addr(c.nodes[i].clientPort))
			if err != nil {
				return nil, err
			}
			c.clientProxies = append(c.clientProxies, p)
		}
	}
	reserved.Release()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	for i, n := range c.nodes {
		nc := ClusterNodeConfig{ClientPort: n.clientPort, MonitorPort: n.monitorPort, RoutePort: n.routePort,
			StoreDir: c.StoreDir(n.name), Auth: o.Auth}
		for j, to := range c.nodes {
			switch {
			case !o.Proxies:
				nc.Routes = append(nc.Routes, procs.Addr(to.routePort))
			case i != j:
				nc.Routes = append(nc.Routes, c.routeProxies[i][j].Addr())
			}
		}
		if o.Proxies {
			nc.RouteAdvertise = c.sink.Addr()
			nc.ClientAdvertise = c.clientProxies[i].Addr()
		}
		if err := WriteClusterNodeConfig(filepath.Join(o.ConfigDir, n.name+".conf"), n.conf, nc); err != nil {
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := c.start(n); err != nil {
			return nil, err
		}
	}
	for _, n := range c.nodes {
		if err := c.waitEnabled(ctx, n); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// ProcessName is the supervisor's name of node's process: nats-<node>.
func ProcessName(node string) string { return "nats-" + node }

func (c *Cluster) start(n *clusterNode) error {
	p, err := c.opts.Sup.Start(procs.Spec{Name: ProcessName(n.name), Path: filepath.Join(c.opts.Bin, "nats-server"),
		Args: []string{"-c", n.conf}, Env: c.opts.Env, Unset: c.opts.Unset, StopTimeout: c.opts.StopTimeout})
	if err != nil {
		return err
	}
	c.mu.Lock()
	n.proc = p
	c.mu.Unlock()
	if c.opts.Started != nil {
		c.opts.Started(p)
	}
	return nil
}

// waitEnabled waits until node n has JetStream enabled (not necessarily
// current: a node alone has no quorum).
func (c *Cluster) waitEnabled(ctx context.Context, n *clusterNode) error {
	return c.proc(n).WaitReady(ctx, c.monitor(n)+"/healthz?js-enabled-only=true", c.opts.ReadyTimeout)
}

func (c *Cluster) proc(n *clusterNode) *procs.Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return n.proc
}

func (c *Cluster) monitor(n *clusterNode) string { return "http://" + procs.Addr(n.monitorPort) }

// node returns the node named name.
func (c *Cluster) node(name string) (int, *clusterNode, error) {
	for i, n := range c.nodes {
		if n.name == name {
			return i, n, nil
		}
	}
	return -1, nil, fmt.Errorf("no node %q in the cluster (want one of %s)", name, strings.Join(ClusterNodes(), ", "))
}

// Names returns the nodes' names, n1 to n3.
func (c *Cluster) Names() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.name
	}
	return out
}

// RouteAdvertise is the route address every node gives the others when the
// cluster has proxies: one that refuses every connection, so that no node
// opens a route around the proxies. Empty without proxies.
func (c *Cluster) RouteAdvertise() string {
	if c.sink == nil {
		return ""
	}
	return c.sink.Addr()
}

// NodeSubscribedTo returns the node one of whose clients subscribes to
// subject, as the nodes' /connz pages say: for example the node a pinned
// worker is connected to, the only client answering on its channel's pin
// subject. It returns "" when no running node has such a client.
func (c *Cluster) NodeSubscribedTo(ctx context.Context, subject string) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	for _, n := range c.nodes {
		if c.Process(n.name) == nil {
			continue
		}
		var connz struct {
			Connections []struct {
				Subscriptions []string `json:"subscriptions_list"`
			} `json:"connections"`
		}
		if err := GetJSON(ctx, client, c.monitor(n)+"/connz?subs=1&limit=1024", &connz); err != nil {
			return "", fmt.Errorf("reading the clients of node %s: %w", n.name, err)
		}
		for _, conn := range connz.Connections {
			if slices.Contains(conn.Subscriptions, subject) {
				return n.name, nil
			}
		}
	}
	return "", nil
}

// URL returns the client URL of node name: its proxy's when the cluster
// has proxies.
func (c *Cluster) URL(name string) string {
	i, n, err := c.node(name)
	if err != nil {
		return ""
	}
	if c.clientProxies != nil {
		return "nats://" + c.clientProxies[i].Addr()
	}
	return "nats://" + procs.Addr(n.clientPort)
}

// URLs returns every node's client URL, comma-separated, as the daemons'
// -nats flag takes them.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		urls[i] = c.URL(n.name)
	}
	return strings.Join(urls, ",")
}

// MonitorURL returns node name's monitoring base URL (never proxied).
func (c *Cluster) MonitorURL(name string) string {
	_, n, err := c.node(name)
	if err != nil {
		return ""
	}
	return c.monitor(n)
}

// StoreDir returns node name's JetStream store directory.
func (c *Cluster) StoreDir(name string) string { return filepath.Join(c.opts.Dir, "store-"+name) }

// Process returns node name's process if it runs, else nil.
func (c *Cluster) Process(name string) *procs.Process {
	_, n, err := c.node(name)
	if err != nil {
		return nil
	}
	p := c.proc(n)
	if p == nil {
		return nil
	}
	select {
	case <-p.Done():
		return nil
	default:
		return p
	}
}

// Processes returns the running nodes' processes, n1 to n3.
func (c *Cluster) Processes() []*procs.Process {
	var out []*procs.Process
	for _, n := range c.nodes {
		if p := c.Process(n.name); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// Kill sends SIGKILL to node name and waits until it is gone. It returns
// the pid and the moment of the signal; ok is false when the node was not
// running.
func (c *Cluster) Kill(name string) (pid int, at time.Time, ok bool) {
	p := c.Process(name)
	if p == nil {
		return 0, time.Time{}, false
	}
	at = time.Now()
	p.Kill()
	return p.Pid(), at, true
}

// Stop stops node name with SIGTERM (a clean shutdown).
func (c *Cluster) Stop(name string) error {
	p := c.Process(name)
	if p == nil {
		return nil
	}
	return p.Stop()
}

// Start starts node name again, on its ports and store, and waits until it
// has JetStream enabled. It does not wait for it to catch up with the
// others: [Cluster.WaitHealthy] does.
func (c *Cluster) Start(ctx context.Context, name string) error {
	_, n, err := c.node(name)
	if err != nil {
		return err
	}
	if c.Process(name) != nil {
		return fmt.Errorf("node %s is running", name)
	}
	if err := c.start(n); err != nil {
		return err
	}
	return c.waitEnabled(ctx, n)
}

// Replace stands a new node, named newName, in for the stopped node name:
// the same ports (so the others' routes reach it, as when a replacement
// machine takes over the old one's address), the same configuration but
// for its server_name, and an empty store. The node is known as newName
// from then on. A node removed from the cluster cannot rejoin under its
// old name for five minutes (nats-server's peer-remove timeout), hence the
// new name; docs/RUNBOOK.md has the procedure.
func (c *Cluster) Replace(ctx context.Context, name, newName string) error {
	_, n, err := c.node(name)
	if err != nil {
		return err
	}
	if c.Process(name) != nil {
		return fmt.Errorf("node %s is running: stop it first", name)
	}
	if _, _, err := c.node(newName); err == nil {
		return fmt.Errorf("a node is named %s already", newName)
	}
	b, err := os.ReadFile(n.conf)
	if err != nil {
		return err
	}
	conf := regexp.MustCompile(`(?m)^server_name: .*$`).ReplaceAllString(string(b), "server_name: "+newName)
	conf = strings.Replace(conf, strconv.Quote(c.StoreDir(name)), strconv.Quote(c.StoreDir(newName)), 1)
	n.conf = filepath.Join(c.opts.Dir, newName+".conf")
	if err := os.WriteFile(n.conf, []byte(conf), 0o644); err != nil {
		return err
	}
	c.mu.Lock()
	n.name = newName
	c.mu.Unlock()
	if err := c.start(n); err != nil {
		return err
	}
	return c.waitEnabled(ctx, n)
}

// Partition cuts node name off from the other two: both directions of its
// routes pass nothing (a black hole: the nodes notice by their own
// timeouts, as in a real partition). clients says what becomes of its
// client connections: 0 leaves them working (clients on the node's side of
// the partition), Blackhole or Refuse cuts them too. It needs a cluster
// with proxies.
func (c *Cluster) Partition(name string, clients CutMode) error {
	i, _, err := c.node(name)
	if err != nil {
		return err
	}
	if c.routeProxies == nil {
		return errors.New("the cluster has no proxies to partition it with")
	}
	for j := range c.nodes {
		if j != i {
			c.routeProxies[i][j].Cut(Blackhole)
			c.routeProxies[j][i].Cut(Blackhole)
		}
	}
	if clients != 0 {
		c.clientProxies[i].Cut(clients)
	}
	return nil
}

// Heal ends node name's partition: its routes and client port pass again
// (connections that lived through it are closed, so everyone reconnects at
// once).
func (c *Cluster) Heal(name string) error {
	i, _, err := c.node(name)
	if err != nil {
		return err
	}
	if c.routeProxies == nil {
		return errors.New("the cluster has no proxies")
	}
	for j := range c.nodes {
		if j != i {
			c.routeProxies[i][j].Heal()
			c.routeProxies[j][i].Heal()
		}
	}
	c.clientProxies[i].Heal()
	return nil
}

// Close closes the proxies. The nodes' processes are the supervisor's to
// stop.
func (c *Cluster) Close() {
	for _, row := range c.routeProxies {
		for _, p := range row {
			if p != nil {
				p.Close()
			}
		}
	}
	for _, p := range c.clientProxies {
		p.Close()
	}
	if c.sink != nil {
		c.sink.Close()
	}
}

// healthPoll is how often WaitHealthy asks: each refusal is a warning in
// the node's log.
const healthPoll = 250 * time.Millisecond

// WaitHealthy waits until every node answers its /healthz with 200: it
// runs, it is part of the cluster and its streams and consumers are
// current.
func (c *Cluster) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	return c.waitEachNode(ctx, timeout, "healthy", func(ctx context.Context, client *http.Client, n *clusterNode) string {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.monitor(n)+"/healthz", nil)
		if err != nil {
			return err.Error()
		}
		resp, err := client.Do(req)
		if err != nil {
			return err.Error()
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			return ""
		}
		return fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
	})
}

// WaitMetaMembers waits until every node sees every node in the JetStream
// meta group, with a leader (its /jsz: the group's size is the cluster's,
// and the node lists the others as replicas). A meta leader is elected
// before the last node has joined the group: in one start in ten on this
// machine the group was two nodes for a few seconds after it answered.
// Cutting off one of those two then leaves the other two without a quorum
// until the cut heals, since the node outside the group has no vote (a
// CI failure of TestConnectionLeavesACutOffNode, 2026-12-04).
func (c *Cluster) WaitMetaMembers(ctx context.Context, timeout time.Duration) error {
	what := fmt.Sprintf("seeing all %d nodes in the JetStream meta group", len(c.nodes))
	return c.waitEachNode(ctx, timeout, what, func(ctx context.Context, client *http.Client, n *clusterNode) string {
		m, err := metaOf(ctx, client, c.monitor(n))
		switch {
		case err != nil:
			return err.Error()
		case m.Leader != "" && m.Size == len(c.nodes) && len(m.Replicas) == len(c.nodes)-1:
			return ""
		}
		return fmt.Sprintf("leader %q, group size %d, %d other members", m.Leader, m.Size, len(m.Replicas))
	})
}

// waitEachNode polls check on each node in turn until it reports nothing
// wrong (""), or fails after timeout with what check said last: the node
// is not what (for the error).
func (c *Cluster) waitEachNode(ctx context.Context, timeout time.Duration, what string,
	check func(ctx context.Context, client *http.Client, n *clusterNode) string) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := monitorClient()
	t := time.NewTicker(healthPoll)
	defer t.Stop()
	for _, n := range c.nodes {
		for {
			last := check(ctx, client, n)
			if last == "" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("node %s not %s within %v (%s)", n.name, what, timeout, last)
			case <-t.C:
			}
		}
	}
	return nil
}

// MetaViews says, node by node, how each sees the JetStream meta group:
// its leader, its size and the other members (or why the node cannot
// say). For a test's failure message.
func (c *Cluster) MetaViews(ctx context.Context) []string {
	client := monitorClient()
	views := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		m, err := metaOf(ctx, client, c.monitor(n))
		if err != nil {
			views[i] = n.name + ": " + err.Error()
			continue
		}
		others := make([]string, len(m.Replicas))
		for j, r := range m.Replicas {
			others[j] = r.Name
		}
		views[i] = fmt.Sprintf("%s: meta leader %q, group size %d, other members %v", n.name, m.Leader, m.Size, others)
	}
	return views
}

// monitorClient is the HTTP client of the polls of the nodes' monitoring
// ports: short requests, a fresh connection each (a node may have been
// restarted or cut off since the last one).
func monitorClient() *http.Client {
	return &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
}

// metaGroup is a node's view of the JetStream meta group (/jsz).
type metaGroup struct {
	Leader   string `json:"leader"`
	Size     int    `json:"cluster_size"`
	Replicas []struct {
		Name string `json:"name"`
	} `json:"replicas"`
}

// metaOf reads the meta group from the monitoring port at monitor.
func metaOf(ctx context.Context, client *http.Client, monitor string) (metaGroup, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, monitor+"/jsz", nil)
	if err != nil {
		return metaGroup{}, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return metaGroup{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return metaGroup{}, fmt.Errorf("/jsz: %s", resp.Status)
	}
	var jsz struct {
		Meta *metaGroup `json:"meta_cluster"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&jsz); err != nil {
		return metaGroup{}, fmt.Errorf("/jsz: %w", err)
	}
	if jsz.Meta == nil {
		return metaGroup{}, errors.New("/jsz: no meta_cluster")
	}
	return *jsz.Meta, nil
}

// apiTimeout bounds one JetStream API request of the helpers below.
const apiTimeout = 2 * time.Second

// request sends a JetStream API request and decodes its answer into v,
// turning an API error into a Go error (*jetstream.APIError).
func request(ctx context.Context, nc *nats.Conn, subject string, v any) error {
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	return jetstream.APIRequest(ctx, nc, subject, nil, v)
}

// WaitMetaLeader waits until the cluster answers JetStream requests (it
// has a meta leader), polling every 100 ms until ctx ends.
func WaitMetaLeader(ctx context.Context, nc *nats.Conn) error {
	var last error
	for {
		if last = request(ctx, nc, "$JS.API.INFO", nil); last == nil {
			return nil
		}
		t := time.NewTimer(100 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for a JetStream meta leader: %w (last answer: %v)", ctx.Err(), last)
		case <-t.C:
		}
	}
}

// Replica is one replica of a stream or consumer in a cluster.
type Replica struct {
	Name    string `json:"name"`
	Current bool   `json:"current"`
	Offline bool   `json:"offline"`
	Lag     uint64 `json:"lag"`
}

// Replication is where a stream or consumer lives: its leader ("" during an
// election) and its other replicas.
type Replication struct {
	Leader   string    `json:"leader"`
	Replicas []Replica `json:"replicas"`
}

// StreamPlacement returns the leader and replicas of stream.
func StreamPlacement(ctx context.Context, nc *nats.Conn, stream string) (Replication, error) {
	var info struct {
		Cluster Replication `json:"cluster"`
	}
	err := request(ctx, nc, "$JS.API.STREAM.INFO."+stream, &info)
	return info.Cluster, err
}

// ConsumerPlacement returns the leader and replicas of a stream's consumer.
func ConsumerPlacement(ctx context.Context, nc *nats.Conn, stream, consumer string) (Replication, error) {
	var info struct {
		Cluster Replication `json:"cluster"`
	}
	err := request(ctx, nc, "$JS.API.CONSUMER.INFO."+stream+"."+consumer, &info)
	return info.Cluster, err
}

// StepDown asks stream's leader to step down
// ($JS.API.STREAM.LEADER.STEPDOWN.<stream>, what `nats stream cluster
// step-down` sends); the other replicas elect a new one.
func StepDown(ctx context.Context, nc *nats.Conn, stream string) error {
	return request(ctx, nc, "$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil)
}

// ConsumerStepDown asks a consumer's leader to step down
// ($JS.API.CONSUMER.LEADER.STEPDOWN.<stream>.<consumer>).
func ConsumerStepDown(ctx context.Context, nc *nats.Conn, stream, consumer string) error {
	return request(ctx, nc, "$JS.API.CONSUMER.LEADER.STEPDOWN."+stream+"."+consumer, nil)
}

// pollTimeout bounds each request of a poll: a stream without a leader
// does not answer its info request at all.
const pollTimeout = 250 * time.Millisecond

// WaitLeader waits until stream has a leader other than not ("" accepts
// any), polling every 20 ms, and returns it. Measure elections over a
// connection to a node that stays up: a connection that must move first
// adds its reconnection to the wait.
func WaitLeader(ctx context.Context, nc *nats.Conn, stream, not string) (string, error) {
	var last error
	for {
		pctx, cancel := context.WithTimeout(ctx, pollTimeout)
		p, err := StreamPlacement(pctx, nc, stream)
		cancel()
		if err == nil && p.Leader != "" && p.Leader != not {
			return p.Leader, nil
		}
		last = err
		t := time.NewTimer(20 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return "", fmt.Errorf("waiting for a leader of %s: %w (last error: %v)", stream, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// WaitCurrent waits until stream has a leader and every other replica is
// current, polling every 50 ms.
func WaitCurrent(ctx context.Context, nc *nats.Conn, stream string) error {
	var last Replication
	var lastErr error
	for {
		p, err := StreamPlacement(ctx, nc, stream)
		if err == nil && p.Leader != "" && allCurrent(p.Replicas) {
			return nil
		}
		last, lastErr = p, err
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("waiting for every replica of %s to be current: %w (last: %+v, %v)", stream, ctx.Err(), last, lastErr)
		case <-t.C:
		}
	}
}

func allCurrent(rs []Replica) bool {
	for _, r := range rs {
		if !r.Current {
			return false
		}
	}
	return true
}
