package main

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/intake"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

func TestIntakeFlags(t *testing.T) {
	_, f, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	in := f.intake
	if in.mode != "off" || in.poll.Timeout != intake.DefaultPollTimeout || in.poll.LeaseTTL != intake.DefaultLeaseTTL ||
		in.webhook.Path != intake.DefaultWebhookPath || in.webhook.URL != "" || in.secretFile != "" {
		t.Fatalf("intake defaults: %+v", in)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-intake", "sometimes"}, `-intake sometimes: unknown intake mode "sometimes"`},
		{[]string{"-intake-poll-timeout", "90s"}, "-intake-poll-timeout 1m30s: must be between 1s and 50s"},
		{[]string{"-intake-lease-ttl", "100ms"}, "-intake-lease-ttl 100ms: must be at least 1s"},
		{[]string{"-dead-retry-after", "-1h"}, "-dead-retry-after -1h: must not be negative"},
	} {
		_, _, err := parse(tc.args, io.Discard)
		if !errors.Is(err, config.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%v) = %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
	s, _, err := parse([]string{"-dead-retry-after", "24h"}, io.Discard)
	if err != nil || s.Engine.DeadRetryAfter != 24*time.Hour {
		t.Fatalf("-dead-retry-after 24h: %v, %v", s.Engine.DeadRetryAfter, err)
	}
}

// TestWebhookNeedsAGoodSecret: -intake webhook without a secret, or with
// one Telegram would refuse, stops the worker at start with status 2,
// naming where the secret comes from and never showing it.
func TestWebhookNeedsAGoodSecret(t *testing.T) {
	for _, tc := range []struct {
		name, secret, want string
	}{
		{"none", "", "TELEGRAM_WEBHOOK_SECRET"},
		{"bad characters", "my secret!", "1 to 256 characters"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string {
				switch k {
				case "TELEGRAM_BOT_TOKEN":
					return "1:test-token"
				case "TELEGRAM_WEBHOOK_SECRET":
					return tc.secret
				}
				return ""
			}
			err := runMain(context.Background(), []string{"-intake", "webhook", "-nats", "nats://127.0.0.1:1"}, getenv, io.Discard)
			if daemon.ExitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("runMain = %v (exit %d), want exit 2 naming %q", err, daemon.ExitCode(err), tc.want)
			}
			if tc.secret != "" && strings.Contains(err.Error(), tc.secret) {
				t.Fatalf("the error shows the secret: %v", err)
			}
		})
	}
}

// TestWorkerPollsTheBotsUpdates runs the daemon with -intake poll against
// the emulator: a user who blocks the bot is marked dead at once, and the
// intake's metrics are on /metrics.
func TestWorkerPollsTheBotsUpdates(t *testing.T) {
	srv := natstest.Start(t)
	js := connect(t, srv)
	if _, err := jetstream.Provision(context.Background(), js, jetstream.Declare(jetstream.DefaultSettings()), false); err != nil {
		t.Fatal(err)
	}
	emu, err := emulator.New(emulator.Config{Token: "1:test-token"})
	if err != nil {
		t.Fatal(err)
	}
	api := httptest.NewServer(emu)
	t.Cleanup(func() { emu.Close(); api.Close() })
	_, addr, stop := startWorker(t, srv, "-telegram-api", api.URL, "-intake", "poll", "-intake-poll-timeout", "1s")
	natstest.WaitFor(t, 20*time.Second, func() bool {
		return strings.Contains(metrics(addr), "tgnotify_intake_polling 1")
	}, "the worker polling the bot's updates")
	if _, err := emu.BlockByUser(77); err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), jetstream.BucketChats)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool {
		_, err := kv.Get(context.Background(), delivery.DeadRecipientKey("telegram", "77"))
		return err == nil
	}, "chat 77 marked dead")
	if err := stop(); err != nil {
		t.Fatalf("runMain: %v", err)
	}
	e, err := kv.Get(context.Background(), intake.LeaseKey)
	if err != nil || !strings.Contains(string(e.Value()), `"owner":""`) || !strings.Contains(string(e.Value()), `"offset":2`) {
		t.Fatalf("the lease after a clean stop: %s, %v; want released with offset 2", valueOf(e), err)
	}
}

func valueOf(e natsjs.KeyValueEntry) string {
	if e == nil {
		return "<none>"
	}
	return string(e.Value())
}
