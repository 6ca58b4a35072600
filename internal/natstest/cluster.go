package natstest

import (
	"encoding/json"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// clusterName is the name of every test cluster.
const clusterName = "natstest"

// Cluster is a JetStream cluster of embedded servers on loopback, each
// with its own store in t.TempDir(), connected by routes. Its nodes can be
// shut down and started again on the same ports and stores, as real nodes
// would be killed and restarted.
//
//	c := natstest.StartCluster(t, 3)
//	nc, err := nats.Connect(c.URLs())
type Cluster struct {
	nodes []*Server
}

// StartCluster starts n servers (n >= 3 for a quorum that survives the
// loss of one) named n1..n<n>, waits until they form a cluster with a
// JetStream meta leader, and registers their shutdown with t.Cleanup.
func StartCluster(t testing.TB, n int, opts ...Option) *Cluster {
	t.Helper()
	ports := freePorts(t, 2*n) // client and route port of each node
	routes := make([]string, n)
	for i := range n {
		routes[i] = fmt.Sprintf("nats-route://127.0.0.1:%d", ports[n+i])
	}
	c := &Cluster{}
	for i := range n {
		s := &Server{opts: server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       ports[i],
			JetStream:  true,
			StoreDir:   t.TempDir(),
			NoLog:      true,
			NoSigs:     true,
			Cluster:    server.ClusterOpts{Name: clusterName, Host: "127.0.0.1", Port: ports[n+i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
		}}
		for _, o := range opts {
			o(&s.opts)
		}
		c.nodes = append(c.nodes, s)
	}
	for _, s := range c.nodes {
		if err := s.start(); err != nil {
			c.Shutdown()
			t.Fatalf("natstest: starting %s: %v", s.opts.ServerName, err)
		}
	}
	t.Cleanup(c.Shutdown)
	c.WaitMetaLeader(t, 30*time.Second)
	return c
}

// freePorts reserves n distinct loopback ports and releases them for the
// servers to take.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("natstest: reserving a port: %v", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		l.Close()
	}
	return ports
}

// Nodes returns the cluster's servers, in the order n1..n<n>.
func (c *Cluster) Nodes() []*Server { return c.nodes }

// URLs returns the client URLs of every node, comma-separated, for
// nats.Connect.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i, s := range c.nodes {
		urls[i] = s.URL()
	}
	return strings.Join(urls, ",")
}

// Shutdown stops every node.
func (c *Cluster) Shutdown() {
	for _, s := range c.nodes {
		s.Shutdown()
	}
}

// Node returns the node named name (n1, n2, ...), or nil.
func (c *Cluster) Node(name string) *Server {
	for _, s := range c.nodes {
		if s.opts.ServerName == name {
			return s
		}
	}
	return nil
}

// WaitMetaLeader waits until a running node knows a JetStream meta leader.
func (c *Cluster) WaitMetaLeader(t testing.TB, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, func() bool {
		for _, s := range c.nodes {
			if srv := s.Server(); srv != nil && srv.JetStreamIsCurrent() && srv.JetStreamIsLeader() {
				return true
			}
		}
		return false
	}, "a JetStream meta leader")
}

// StreamInfo is the part of a stream's info a test needs about its
// replication.
type StreamInfo struct {
	// Leader is the name of the stream's leader node, "" during an
	// election.
	Leader string
	// Current is how many replicas other than the leader are current.
	Current int
	// Replicas is how many replicas other than the leader there are.
	Replicas int
	// Msgs is how many messages the stream holds.
	Msgs uint64
}

// Stream asks the cluster, over nc, about a stream. Errors (no leader
// elected, a timeout) are returned, not fatal: a test polls it.
func Stream(nc *nats.Conn, stream string) (StreamInfo, error) {
	resp, err := nc.Request("$JS.API.STREAM.INFO."+stream, nil, 2*time.Second)
	if err != nil {
		return StreamInfo{}, err
	}
	var info struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
		State struct {
			Msgs uint64 `json:"messages"`
		} `json:"state"`
		Cluster struct {
			Leader   string `json:"leader"`
			Replicas []struct {
				Current bool `json:"current"`
			} `json:"replicas"`
		} `json:"cluster"`
	}
	if err := json.Unmarshal(resp.Data, &info); err != nil {
		return StreamInfo{}, fmt.Errorf("stream info of %s: %w", stream, err)
	}
	if info.Error != nil {
		return StreamInfo{}, fmt.Errorf("stream info of %s: %s", stream, info.Error.Description)
	}
	out := StreamInfo{Leader: info.Cluster.Leader, Replicas: len(info.Cluster.Replicas), Msgs: info.State.Msgs}
	for _, r := range info.Cluster.Replicas {
		if r.Current {
			out.Current++
		}
	}
	return out, nil
}

// StepDown asks the stream's leader to step down, over nc; another replica
// is elected.
func StepDown(nc *nats.Conn, stream string) error {
	resp, err := nc.Request("$JS.API.STREAM.LEADER.STEPDOWN."+stream, nil, 2*time.Second)
	if err != nil {
		return err
	}
	var r struct {
		Error *struct {
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &r); err != nil {
		return fmt.Errorf("stepping down %s: %w", stream, err)
	}
	if r.Error != nil {
		return fmt.Errorf("stepping down %s: %s", stream, r.Error.Description)
	}
	return nil
}
