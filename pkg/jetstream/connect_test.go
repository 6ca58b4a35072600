package jetstream_test

import (
	"bytes"
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// syncBuffer is a log sink safe for the NATS callbacks' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestConnectAuthenticates(t *testing.T) {
	t.Run("user and password", func(t *testing.T) {
		srv := natstest.Start(t, natstest.WithUserPassword("pub", "s3cret-pw"))
		nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: srv.URL(), User: "pub", Password: "s3cret-pw"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		natstest.WaitFor(t, 5*time.Second, nc.IsConnected, "connected")
	})
	t.Run("token", func(t *testing.T) {
		srv := natstest.Start(t, natstest.WithToken("t0ken-value"))
		nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: srv.URL(), Token: "t0ken-value"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		natstest.WaitFor(t, 5*time.Second, nc.IsConnected, "connected")
	})
	t.Run("credentials in the URL are not logged", func(t *testing.T) {
		srv := natstest.Start(t, natstest.WithUserPassword("pub", "url-secret"))
		var logs syncBuffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		url := strings.Replace(srv.URL(), "nats://", "nats://pub:url-secret@", 1)
		nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: url}, logger)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		natstest.WaitFor(t, 5*time.Second, nc.IsConnected, "connected")
		srv.Restart(t)
		natstest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), "reconnected") }, "reconnect logged")
		if strings.Contains(logs.String(), "url-secret") {
			t.Fatalf("password logged:\n%s", logs.String())
		}
	})
	t.Run("wrong password is not in logs", func(t *testing.T) {
		srv := natstest.Start(t, natstest.WithUserPassword("pub", "right"))
		var logs syncBuffer
		logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: srv.URL(), User: "pub", Password: "wrong-pw-123"}, logger)
		if err == nil {
			defer nc.Close()
			natstest.WaitFor(t, 5*time.Second, func() bool { return logs.String() != "" }, "something logged")
		} else if strings.Contains(err.Error(), "wrong-pw-123") {
			t.Fatalf("password in error: %v", err)
		}
		if strings.Contains(logs.String(), "wrong-pw-123") {
			t.Fatalf("password logged:\n%s", logs.String())
		}
	})
}

func TestConnectStartsWhileNATSIsDown(t *testing.T) {
	srv := natstest.Start(t)
	url := srv.URL()
	srv.Shutdown()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: url, ReconnectWait: 10 * time.Millisecond, MaxReconnectWait: 50 * time.Millisecond}, logger)
	if err != nil {
		t.Fatalf("Connect with the server down: %v", err)
	}
	defer nc.Close()
	if nc.IsConnected() {
		t.Fatal("connected to a stopped server")
	}
	srv.Start(t)
	natstest.WaitFor(t, 10*time.Second, nc.IsConnected, "connection once the server is up")
	natstest.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(logs.String(), "connected to NATS") }, "connect logged")
	if !strings.Contains(logs.String(), "not reachable yet") {
		t.Errorf("the initial failure was not logged:\n%s", logs.String())
	}
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"nats://127.0.0.1:4222":                 "nats://127.0.0.1:4222",
		"nats://user:pw@h:4222":                 "nats://user:xxxxx@h:4222",
		"nats://tok@h:4222,nats://h2:4222":      "nats://xxxxx@h:4222,nats://h2:4222",
		"tls://a:b@h1:4222, nats://c:d@h2:4222": "tls://a:xxxxx@h1:4222,nats://c:xxxxx@h2:4222",
		"nats://u:p@[bad":                       "xxxxx",
	} {
		if got := jetstream.RedactURL(in); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestOptionsValidate(t *testing.T) {
	dir := t.TempDir()
	creds := filepath.Join(dir, "x.creds")
	if err := os.WriteFile(creds, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		o    jetstream.Options
		flag string
	}{
		{jetstream.Options{Password: "p"}, "-nats-password"},
		{jetstream.Options{User: "u", Token: "t"}, "-nats-token"},
		{jetstream.Options{CredsFile: creds, User: "u"}, "-nats-creds"},
		{jetstream.Options{TLSCert: creds}, "-nats-tls-key"},
		{jetstream.Options{TLSCA: filepath.Join(dir, "missing.pem")}, "-nats-tls-ca"},
		{jetstream.Options{URLs: "http://h:1"}, "-nats"},
		{jetstream.Options{URLs: "nats://u:secretpw@h:bad port"}, "-nats"},
	} {
		err := tc.o.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.o, err, tc.flag)
		}
		if err != nil && strings.Contains(err.Error(), "secretpw") {
			t.Errorf("error reveals a password: %v", err)
		}
	}
	if err := (&jetstream.Options{URLs: "nats://a:4222,nats://b:4222", CredsFile: creds}).Validate(); err != nil {
		t.Errorf("valid options: %v", err)
	}
}

func TestRegisterFlags(t *testing.T) {
	var o jetstream.Options
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	o.RegisterFlags(fs)
	args := []string{"-nats", "nats://a:1", "-nats-creds", "c", "-nats-user", "u", "-nats-password", "p",
		"-nats-token", "t", "-nats-tls-ca", "ca", "-nats-tls-cert", "cert", "-nats-tls-key", "key"}
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	want := jetstream.Options{URLs: "nats://a:1", CredsFile: "c", User: "u", Password: "p", Token: "t", TLSCA: "ca", TLSCert: "cert", TLSKey: "key"}
	if o != want {
		t.Errorf("got %+v, want %+v", o, want)
	}
}

func TestServerURLsDefaults(t *testing.T) {
	t.Setenv("NATS_URL", "")
	if got := (&jetstream.Options{}).ServerURLs(); got != jetstream.DefaultURL {
		t.Errorf("default = %q", got)
	}
	t.Setenv("NATS_URL", "nats://env:4222")
	if got := (&jetstream.Options{}).ServerURLs(); got != "nats://env:4222" {
		t.Errorf("from env = %q", got)
	}
	if got := (&jetstream.Options{URLs: "nats://flag:1"}).ServerURLs(); got != "nats://flag:1" {
		t.Errorf("explicit = %q", got)
	}
}

// A server that stops answering without closing the connection (a network
// cut: the proxy holds the connection open and passes nothing) is left
// within seconds for another server of the list. With nats.go's default
// pings (every 2 minutes, 2 outstanding) the client stayed for minutes.
func TestConnectLeavesAServerThatStopsAnswering(t *testing.T) {
	a, b := natstest.Start(t), natstest.Start(t)
	proxy, err := system.NewProxy("127.0.0.1:0", strings.TrimPrefix(a.URL(), "nats://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Close)
	viaProxy := "nats://" + proxy.Addr()
	var nc *nats.Conn
	// The client shuffles its server list: connect until it is through
	// the proxy (one chance in two each time).
	for range 40 {
		c, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: viaProxy + "," + b.URL()}, nil)
		if err != nil {
			t.Fatal(err)
		}
		natstest.WaitFor(t, 10*time.Second, c.IsConnected, "connected")
		if c.ConnectedUrl() == viaProxy {
			nc = c
			break
		}
		c.Close()
	}
	if nc == nil {
		t.Fatal("never connected through the proxy")
	}
	t.Cleanup(nc.Close)
	proxy.Cut(system.Blackhole)
	// Pings every 2 s, 3 unanswered: about 8 s, then a reconnect.
	natstest.WaitFor(t, 40*time.Second, func() bool { return nc.IsConnected() && nc.ConnectedUrl() == b.URL() }, "the client on the other server")
}
