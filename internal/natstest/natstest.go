// Package natstest runs an embedded NATS server with JetStream for tests.
//
// Every package's tests use it the same way:
//
//	srv := natstest.Start(t)
//	nc, err := nats.Connect(srv.URL())
//
// The server listens on 127.0.0.1 on a port chosen by the kernel and keeps
// its JetStream store in t.TempDir(). [Server.Restart] starts a new server
// on the same store and the same port, so clients reconnect by themselves
// and streams survive, as they would when a real server is restarted.
// Options add authentication (user/password, token), SyncAlways, or any
// other server setting (TLS, accounts) through [WithOptions].
package natstest

import (
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// readyTimeout bounds how long Start and Restart wait for the server to
// accept connections.
const readyTimeout = 10 * time.Second

// Option changes the server's settings before it starts.
type Option func(*server.Options)

// WithUserPassword requires clients to authenticate with user and password.
func WithUserPassword(user, password string) Option {
	return func(o *server.Options) {
		o.Username = user
		o.Password = password
	}
}

// WithToken requires clients to authenticate with token.
func WithToken(token string) Option {
	return func(o *server.Options) { o.Authorization = token }
}

// WithSyncAlways makes the server fsync every JetStream write, so an
// acknowledged message survives power loss (it is off by default, as in a
// production server, because it is much slower).
func WithSyncAlways() Option {
	return func(o *server.Options) { o.SyncAlways = true }
}

// WithOptions applies an arbitrary change to the server options, for
// settings this package has no dedicated option for (TLS, accounts, limits).
func WithOptions(f func(*server.Options)) Option {
	return Option(f)
}

// Server is an embedded NATS server with JetStream. Its methods are safe for
// concurrent use.
type Server struct {
	mu   sync.Mutex
	opts server.Options
	srv  *server.Server
}

// Start starts a server with JetStream whose store lives in t.TempDir(), and
// registers its shutdown with t.Cleanup. It fails the test if the server does
// not start.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	s := &Server{opts: server.Options{
		ServerName: "natstest",
		Host:       "127.0.0.1",
		Port:       -1,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoLog:      true,
		NoSigs:     true,
	}}
	for _, o := range opts {
		o(&s.opts)
	}
	if err := s.start(); err != nil {
		t.Fatalf("natstest: %v", err)
	}
	// The first start picked a free port: keep it, so a restarted server
	// is found at the same URL.
	s.opts.Port = s.srv.Addr().(*net.TCPAddr).Port
	t.Cleanup(s.Shutdown)
	return s
}

// start creates and starts a server from s.opts. The caller holds s.mu or
// has s to itself.
func (s *Server) start() error {
	opts := s.opts // the server keeps and mutates its options
	srv, err := server.NewServer(&opts)
	if err != nil {
		return fmt.Errorf("creating server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(readyTimeout) {
		srv.Shutdown()
		return fmt.Errorf("server not ready for connections after %v", readyTimeout)
	}
	s.srv = srv
	return nil
}

// URL returns the client URL of the server, nats://127.0.0.1:<port>,
// without credentials. It stays the same across restarts.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("nats://%s:%d", s.opts.Host, s.opts.Port)
}

// Connect returns a client connected to the server with opts, closed when
// the test ends, and its JetStream context.
func (s *Server) Connect(t testing.TB, opts ...nats.Option) (*nats.Conn, natsjs.JetStream) {
	t.Helper()
	nc, err := nats.Connect(s.URL(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js
}

// Port returns the TCP port the server listens on.
func (s *Server) Port() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.Port
}

// StoreDir returns the JetStream store directory.
func (s *Server) StoreDir() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.opts.StoreDir
}

// Server returns the running server, or nil after Shutdown.
func (s *Server) Server() *server.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srv
}

// Shutdown stops the server and waits until it has stopped. It is a no-op
// when the server is not running.
func (s *Server) Shutdown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shutdown()
}

func (s *Server) shutdown() {
	if s.srv == nil {
		return
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
	s.srv = nil
}

// Start starts the server again after Shutdown, on the same store and port.
// It fails the test if the server does not start, and is a no-op when the
// server is running.
func (s *Server) Start(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return
	}
	if err := s.start(); err != nil {
		t.Fatalf("natstest: restarting: %v", err)
	}
}

// Restart shuts the server down and starts a new one on the same store
// directory and the same port, so clients reconnect and find their streams.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Shutdown()
	s.Start(t)
}
