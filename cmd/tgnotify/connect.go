package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// connFlags are the flags every subcommand takes to reach NATS: the
// daemons' connection flags (-nats, default $NATS_URL; credentials; TLS),
// -timeout and -log-level.
type connFlags struct {
	nats     jetstream.Options
	timeout  time.Duration
	logLevel string
	// prefix is -subject-prefix, for the commands that read a deployment's
	// streams and buckets (registerPrefix).
	prefix string
}

// register adds the connection flags to cs; the command gives up after
// timeout by default.
func (c *connFlags) register(cs *config.Set, timeout time.Duration) {
	daemon.NATSFlags(cs, &c.nats)
	config.Duration(cs, &c.timeout, "timeout", timeout, "give up after this long, connecting included").Check(config.Positive)
	config.String(cs, &c.logLevel, "log-level", "warn", "`level` of the connection's log lines on stderr: debug, info, warn or error").
		Check(config.OneOf("debug", "info", "warn", "error"))
}

// registerPrefix adds -subject-prefix to cs: the subject prefix of the
// deployment the command works on, as its JetStream declaration sets it.
func (c *connFlags) registerPrefix(cs *config.Set) {
	config.String(cs, &c.prefix, jetstream.FlagPrefix, jetstream.DefaultPrefix,
		"subject `prefix` of the deployment (its JetStream declaration's "+jetstream.FlagPrefix+"): notify reads NOTIFY, NOTIFY_DEAD and notify_*, staging reads STAGING, STAGING_DEAD and staging_*").
		Check(jetstream.ValidatePrefix)
}

// names returns the names of -subject-prefix.
func (c *connFlags) names() jetstream.Names {
	n, err := jetstream.NewNames(c.prefix)
	if err != nil {
		return jetstream.DefaultNames() // not reached: registerPrefix checks it
	}
	return n
}

// session is a command's connection to JetStream, bounded by -timeout.
type session struct {
	ctx    context.Context
	cancel context.CancelFunc
	nc     *nats.Conn
	js     natsjs.JetStream
	url    string
	// names are the names of -subject-prefix (the default prefix's for a
	// command without the flag).
	names jetstream.Names
}

// close closes the connection and releases the deadline.
func (s *session) close() {
	s.nc.Close()
	s.cancel()
}

// connect connects as name and waits until the server answers, within
// -timeout, which then bounds the whole command.
func (c *connFlags) connect(ctx context.Context, s streams, name string) (*session, error) {
	var level slog.Level
	_ = level.UnmarshalText([]byte(c.logLevel)) // checked by the binding
	log := slog.New(slog.NewTextHandler(s.stderr, &slog.HandlerOptions{Level: level}))
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	c.nats.Name = name
	nc, err := jetstream.Connect(ctx, c.nats, log)
	if err != nil {
		cancel()
		return nil, &config.Error{Err: err}
	}
	url := jetstream.RedactURL(c.nats.ServerURLs())
	if err := waitConnected(ctx, nc); err != nil {
		nc.Close()
		cancel()
		return nil, fmt.Errorf("cannot reach NATS at %s within -timeout %v: %w", url, c.timeout, err)
	}
	js, err := natsjs.New(nc)
	if err != nil {
		nc.Close()
		cancel()
		return nil, err
	}
	return &session{ctx: ctx, cancel: cancel, nc: nc, js: js, url: url, names: c.names()}, nil
}

// waitConnected waits until nc is connected or ctx ends.
func waitConnected(ctx context.Context, nc *nats.Conn) error {
	ch := nc.StatusChanged(nats.CONNECTED)
	defer nc.RemoveStatusListener(ch)
	if nc.IsConnected() {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errors.New("not connected")
		}
		return ctx.Err()
	}
}
