package jetstream_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// usable checks that nc reaches JetStream: the streams can be provisioned
// and a notification published and acknowledged.
func usable(t *testing.T, nc *nats.Conn) {
	t.Helper()
	natstest.WaitFor(t, 10*time.Second, nc.IsConnected, "connected")
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		t.Fatalf("provisioning over the authenticated connection: %v", err)
	}
	if _, err := js.PublishMsg(ctx, jetstream.NotificationMsg(100, "k:1", time.Now(), "application/json", []byte(`{}`))); err != nil {
		t.Fatalf("publishing: %v", err)
	}
}

// refused checks that the server refuses a connection with o: Connect
// returns (it retries in the background), the log says why (reason), the
// connection is not up, and no secret is in the logs.
func refused(t *testing.T, o jetstream.Options, reason string, secrets ...string) {
	t.Helper()
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.ReconnectWait, o.MaxReconnectWait = 20*time.Millisecond, 50*time.Millisecond
	nc, err := jetstream.Connect(context.Background(), o, logger)
	if err != nil {
		t.Fatalf("Connect: %v; want it to return and keep trying", err)
	}
	defer nc.Close()
	natstest.WaitFor(t, 10*time.Second, func() bool { return strings.Contains(logs.String(), reason) }, "the refusal ("+reason+") logged")
	if nc.IsConnected() {
		t.Fatalf("connected with %+v, want the server to refuse", o)
	}
	msg := ""
	for _, s := range secrets {
		if s != "" && (strings.Contains(msg, s) || strings.Contains(logs.String(), s)) {
			t.Fatalf("a secret appears in the error or the logs:\n%s\n%s", msg, logs.String())
		}
	}
}

// TestConnectWithCredentialsFile runs a server in operator mode (accounts
// and users as JWTs): a client with the credentials file of a user of the
// application account gets JetStream; one of an unknown account is refused.
func TestConnectWithCredentialsFile(t *testing.T) {
	op := natstest.NewOperator(t)
	srv := natstest.Start(t, op.Option())
	nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: srv.URL(), CredsFile: op.Creds}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	usable(t, nc)

	refused(t, jetstream.Options{URLs: srv.URL(), CredsFile: op.OtherCreds}, "Authorization Violation")
	refused(t, jetstream.Options{URLs: srv.URL()}, "Authorization Violation") // no credentials at all
}

// TestConnectWithTLS runs a server that requires TLS and client
// certificates: the CA, certificate and key options connect; a client that
// trusts another CA, or brings no certificate, is refused.
func TestConnectWithTLS(t *testing.T) {
	certs := natstest.NewCerts(t)
	srv := natstest.Start(t, natstest.WithTLS(t, certs, true))
	url := strings.Replace(srv.URL(), "nats://", "tls://", 1)
	nc, err := jetstream.Connect(context.Background(), jetstream.Options{
		URLs: url, TLSCA: certs.CA, TLSCert: certs.ClientCert, TLSKey: certs.ClientKey,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	usable(t, nc)
	if !strings.HasPrefix(nc.ConnectedUrl(), "tls://") {
		t.Errorf("connected to %s, want tls://", nc.ConnectedUrl())
	}
	if state, err := nc.TLSConnectionState(); err != nil || !state.HandshakeComplete {
		t.Errorf("TLS state %+v, %v: want a completed handshake", state, err)
	}

	t.Run("a server certificate from another CA", func(t *testing.T) {
		refused(t, jetstream.Options{URLs: url, TLSCA: certs.OtherCA, TLSCert: certs.ClientCert, TLSKey: certs.ClientKey}, "certificate signed by unknown authority")
	})
	t.Run("no client certificate", func(t *testing.T) {
		// With TLS 1.3 the server rejects the missing certificate after the
		// handshake, so the client sees a reset or a TLS alert: any failure.
		refused(t, jetstream.Options{URLs: url, TLSCA: certs.CA}, "NATS reconnect attempt failed")
	})
	t.Run("no CA: the server's certificate is not trusted", func(t *testing.T) {
		refused(t, jetstream.Options{URLs: srv.URL()}, "certificate signed by unknown authority")
	})
}

// TestConnectWithTLSAndPassword combines server TLS (no client certificate)
// with user and password, as a deployment across hosts would, and checks the
// password is never logged, right or wrong.
func TestConnectWithTLSAndPassword(t *testing.T) {
	certs := natstest.NewCerts(t)
	srv := natstest.Start(t, natstest.WithTLS(t, certs, false), natstest.WithUserPassword("worker", "tls-pw-7f3a"))
	var logs syncBuffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: srv.URL(), TLSCA: certs.CA, User: "worker", Password: "tls-pw-7f3a"}, logger)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	usable(t, nc)
	refused(t, jetstream.Options{URLs: srv.URL(), TLSCA: certs.CA, User: "worker", Password: "wrong-pw-91c2"}, "Authorization Violation", "wrong-pw-91c2", "tls-pw-7f3a")
	if strings.Contains(logs.String(), "tls-pw-7f3a") {
		t.Fatalf("password logged:\n%s", logs.String())
	}
}
