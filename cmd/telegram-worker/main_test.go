package main

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/config/configtest"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/workerd"
	"github.com/tgnotify/tgnotify/pkg/channel/telegram"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// parse parses args as the telegram worker does, returning the shared
// settings and Telegram's own.
func parse(args []string, out io.Writer) (*workerd.Settings, *flags, error) {
	f := &flags{}
	s, err := workerd.Parse(spec(f), args, os.Getenv, out)
	return s, f, err
}

func TestPrecedenceFlagOverEnvOverFile(t *testing.T) {
	cfg := writeFile(t, "w.yaml", "chat-rate: 3\nmax-in-flight: 7\nbackoff-base: 5s\nlog-level: debug\n")
	t.Setenv("TELEGRAM_WORKER_MAX_IN_FLIGHT", "9")
	t.Setenv("TELEGRAM_WORKER_BACKOFF_BASE", "6s")
	s, f, err := parse([]string{"-config", cfg, "-backoff-base", "7s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if f.telegram.ChatRate != 3 || s.Engine.MaxInFlight != 9 || s.Engine.BackoffBase != 7*time.Second {
		t.Fatalf("chat-rate %v (file), max-in-flight %d (env), backoff-base %v (flag); want 3, 9, 7s",
			f.telegram.ChatRate, s.Engine.MaxInFlight, s.Engine.BackoffBase)
	}
}

// TestShippedConfigFile checks configs/telegram-worker.yaml: it parses,
// sets nothing, so that NATS_URL and TELEGRAM_WORKER_* are never overridden
// by it, and shows every flag commented at its default.
func TestShippedConfigFile(t *testing.T) {
	const path = "../../configs/telegram-worker.yaml"
	t.Setenv("NATS_URL", "nats://from-env:4222")
	s, _, err := parse([]string{"-config", path}, io.Discard)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if got := s.NATS.URLs; got != "nats://from-env:4222" {
		t.Fatalf("-nats with NATS_URL set and the shipped file = %q, want NATS_URL's", got)
	}
	configtest.CheckCommentedDefaults(t, s.FlagSet(), path, "config", "version")
}

func TestPaidBroadcastRaisesBotRate(t *testing.T) {
	_, f, err := parse([]string{"-paid-broadcast"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.telegram.BotRate; got != telegram.PaidBroadcastRate {
		t.Fatalf("bot rate with -paid-broadcast alone = %v, want %v", got, telegram.PaidBroadcastRate)
	}
	_, f, err = parse([]string{"-paid-broadcast", "-bot-rate", "500"}, io.Discard)
	if err != nil || f.telegram.BotRate != 500 {
		t.Fatalf("-paid-broadcast -bot-rate 500: rate %v, %v; want 500", f.telegram.BotRate, err)
	}
}

func TestDefaultsAreTheLibrarys(t *testing.T) {
	t.Setenv("NATS_URL", "")
	s, f, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := delivery.DefaultConfig()
	// Not flags: the library's defaults apply, and the ack wait is the live
	// consumer's, read at start.
	want.AckWait, want.PullBatch, want.TakeoverGap = 0, 0, 0
	if s.Engine != want {
		t.Fatalf("engine configuration from the flag defaults:\n got %+v\nwant %+v", s.Engine, want)
	}
	if f.telegram != (telegram.Config{BotRate: telegram.DefaultBotRate, ChatRate: telegram.DefaultChatRate, GroupPerMinute: telegram.DefaultGroupPerMinute}) {
		t.Fatalf("telegram configuration from the flag defaults: %+v", f.telegram)
	}
}

func TestBadConfigurationNamesTheSetting(t *testing.T) {
	cases := []struct {
		name string
		args []string
		file string
		want string
	}{
		{"negative rate", []string{"-bot-rate", "-1"}, "", "-bot-rate -1: must be positive"},
		{"not a duration", []string{"-breaker-open", "soon"}, "", "breaker-open"},
		{"removed consumer flag", []string{"-ack-wait", "10s"}, "", "-ack-wait: removed: ack-wait is part of the JetStream declaration now"},
		{"removed bucket setting in the file", nil, "delivered-ttl: 48h\n", "-delivered-ttl (from "},
		{"cap below base", []string{"-backoff-base", "2s", "-backoff-cap", "1s"}, "", "-backoff-cap 1s: must be at least -backoff-base 2s"},
		{"bad declaration", []string{"-jetstream-config", writeFile(t, "j.yaml", "pinned-ttl: 10ms\n")}, "", "-pinned-ttl 10ms: must be at least 1s"},
		{"zero breaker failures", []string{"-breaker-failures", "0"}, "", "-breaker-failures 0: must be at least 1"},
		{"paid broadcast at the free rate", []string{"-paid-broadcast", "-bot-rate", "30"}, "", "-paid-broadcast: requires -bot-rate above 30 (got 30)"},
		{"paid broadcast below the free rate, from the file", nil, "paid-broadcast: true\nbot-rate: 20\n", "w.yaml:1): requires -bot-rate above 30 (got 20)"},
		{"unknown key in file", nil, "chat-rate: 1\nturbo: true\n", `w.yaml:2: unknown key "turbo"`},
		{"bad value in file", nil, "max-in-flight: lots\n", "-max-in-flight lots (from "},
		{"missing file", []string{"-config", "/nonexistent/worker.yaml"}, "", "-config /nonexistent/worker.yaml"},
		{"extra argument", []string{"now"}, "", "unexpected arguments"},
		{"bad log level", []string{"-log-level", "loud"}, "", "-log-level loud: want debug, info, warn or error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"-config", writeFile(t, "w.yaml", tc.file)}, args...)
			}
			_, _, err := parse(args, io.Discard)
			if !errors.Is(err, config.ErrInvalid) || daemon.ExitCode(err) != 2 {
				t.Fatalf("parse(%v) = %v, want an invalid configuration (exit 2)", args, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not name %q", err, tc.want)
			}
		})
	}
}

func TestTokenSources(t *testing.T) {
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == "TELEGRAM_BOT_TOKEN" {
				return v
			}
			return ""
		}
	}
	if tok, err := workerd.ReadSecret("", "token-file", "TELEGRAM_BOT_TOKEN", env(" 1:abc \n")); err != nil || tok != "1:abc" {
		t.Fatalf("token from env = %q, %v", tok, err)
	}
	f := writeFile(t, "token", "2:def\n")
	if tok, err := workerd.ReadSecret(f, "token-file", "TELEGRAM_BOT_TOKEN", env("1:abc")); err != nil || tok != "2:def" {
		t.Fatalf("token from file = %q, %v; want the file to win", tok, err)
	}
	if _, err := workerd.ReadSecret("", "token-file", "TELEGRAM_BOT_TOKEN", env("")); err == nil || !strings.Contains(err.Error(), "TELEGRAM_BOT_TOKEN") {
		t.Fatalf("missing token: %v", err)
	}
	if _, err := workerd.ReadSecret("/nonexistent/token", "token-file", "TELEGRAM_BOT_TOKEN", env("")); err == nil || !strings.Contains(err.Error(), "-token-file") {
		t.Fatalf("missing token file: %v", err)
	}
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startWorker runs the worker in-process against srv with a Bot API that
// does not answer (the worker starts anyway), and returns its log, its
// metrics address and a function that stops it and returns runMain's error.
func startWorker(t *testing.T, srv *natstest.Server, args ...string) (*syncBuffer, string, func() error) {
	t.Helper()
	addr := freeAddr(t)
	args = append([]string{"-nats", srv.URL(), "-http", addr, "-telegram-api", "http://" + freeAddr(t), "-request-timeout", "1s", "-log-format", "json"}, args...)
	getenv := func(k string) string {
		if k == "TELEGRAM_BOT_TOKEN" {
			return "1:test-token"
		}
		return ""
	}
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- runMain(ctx, args, getenv, logs) }()
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("runMain did not return after stop")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return logs, addr, stop
}

func connect(t *testing.T, srv *natstest.Server) natsjs.JetStream {
	t.Helper()
	_, js := srv.Connect(t)
	return js
}

// logLine reports whether one line of log holds every one of parts.
func logLine(log string, parts ...string) bool {
	for line := range strings.Lines(log) {
		all := true
		for _, p := range parts {
			all = all && strings.Contains(line, p)
		}
		if all {
			return true
		}
	}
	return false
}

func metrics(addr string) string {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// TestWorkerKeepsTheLiveAckWait: the consumer's ack wait was provisioned at
// 20s while the worker's declaration says 10s. The worker keeps the
// consumer, reports the drift, and times its keep-alives and takeovers by
// the live 20s, not by the declared 10s (the other way round, a declared
// wait longer than the live one would let held messages be redelivered).
func TestWorkerKeepsTheLiveAckWait(t *testing.T) {
	srv := natstest.Start(t)
	js := connect(t, srv)
	s := jetstream.DefaultSettings()
	s.AckWait = 20 * time.Second
	if _, err := jetstream.Provision(context.Background(), js, jetstream.Declare(s), false); err != nil {
		t.Fatal(err)
	}
	logs, addr, stop := startWorker(t, srv)
	natstest.WaitFor(t, 20*time.Second, func() bool {
		return strings.Contains(metrics(addr), `tgnotify_jetstream_drift{field="ack_wait",kind="consumer",name="telegram-worker"} 1`)
	}, "the drift gauge on /metrics")
	if err := stop(); err != nil {
		t.Fatalf("runMain: %v", err)
	}
	for _, want := range [][]string{
		{`"msg":"JetStream configuration drift`, `"field":"ack_wait","live":"20s","declared":"10s"`},
		{`"msg":"consumer ready"`, `"ack_wait":"20s"`},
	} {
		if !logLine(logs.String(), want...) {
			t.Errorf("no log line says %q:\n%s", want, logs)
		}
	}
	c, err := js.Consumer(context.Background(), jetstream.StreamNotify, jetstream.ConsumerTelegram)
	if err != nil || c.CachedInfo().Config.AckWait != 20*time.Second {
		t.Errorf("consumer ack wait after the worker's start: %v, want the live 20s kept", err)
	}
}

// TestWorkerWithoutProvisionWaits: with -provision=false on an empty server
// the worker creates nothing and says what it waits for, then starts once
// `tgnotify provision` (here the library call) has created everything.
func TestWorkerWithoutProvisionWaits(t *testing.T) {
	srv := natstest.Start(t)
	js := connect(t, srv)
	logs, _, stop := startWorker(t, srv, "-provision=false")
	natstest.WaitFor(t, 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "missing stream NOTIFY, stream NOTIFY_DEAD, consumer telegram-worker on NOTIFY, bucket notify_delivered, "+
			"bucket notify_chats, bucket notify_attempts: not created because -provision=false; waiting until `tgnotify provision` creates them")
	}, "the worker to say what it waits for")
	for name := range js.StreamNames(context.Background()).Name() {
		t.Errorf("stream %s exists: the worker must not create anything with -provision=false", name)
	}
	if _, err := jetstream.Provision(context.Background(), js, jetstream.Declare(jetstream.DefaultSettings()), false); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool { return strings.Contains(logs.String(), `"msg":"consumer ready"`) }, "the worker to start once provisioned")
	if err := stop(); err != nil {
		t.Fatalf("runMain: %v", err)
	}
}

// TestWorkerUnderAPrefix: the declaration's subject-prefix names the
// stream, consumer and buckets the worker creates and opens.
func TestWorkerUnderAPrefix(t *testing.T) {
	srv := natstest.Start(t)
	js := connect(t, srv)
	decl := writeFile(t, "jetstream.yaml", "subject-prefix: staging\n")
	logs, _, stop := startWorker(t, srv, "-jetstream-config", decl)
	natstest.WaitFor(t, 20*time.Second, func() bool {
		return logLine(logs.String(), `"msg":"consumer ready"`, `"stream":"STAGING"`)
	}, "the worker ready on STAGING")
	if err := stop(); err != nil {
		t.Fatalf("runMain: %v", err)
	}
	ctx := context.Background()
	c, err := js.Consumer(ctx, "STAGING", jetstream.ConsumerTelegram)
	if err != nil || c.CachedInfo().Config.FilterSubject != "staging.telegram.>" {
		t.Errorf("consumer telegram-worker on STAGING: %v, want filter staging.telegram.>", err)
	}
	for _, b := range []string{"staging_delivered", "staging_chats", "staging_attempts"} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			t.Errorf("bucket %s: %v, want it created", b, err)
		}
	}
	for name := range js.StreamNames(ctx).Name() {
		if name == jetstream.StreamNotify || name == jetstream.StreamDead {
			t.Errorf("stream %s exists: a staging worker must not create the default prefix's", name)
		}
	}
}
