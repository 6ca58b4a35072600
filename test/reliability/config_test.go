package reliability_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// TestBinariesRefuseBadSettings starts each binary with a bad flag, a bad
// environment variable or a bad configuration file: each must exit with
// status 2 at once, before doing anything, with a message that names the
// setting. (The daemons' cmd packages test their parsers in-process; this
// checks what an operator actually sees.)
func TestBinariesRefuseBadSettings(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token := []string{"TELEGRAM_BOT_TOKEN=1:not-used"}
	tests := []struct {
		binary string
		name   string
		env    []string
		args   []string
		want   string
	}{
		{"publisher", "no database", nil, nil, "-db"},
		{"publisher", "negative batch", nil, []string{"-db", "x.db", "-batch-size", "-1"}, "-batch-size"},
		{"publisher", "not a duration", nil, []string{"-db", "x.db", "-ack-timeout", "soon"}, "ack-timeout"},
		{"publisher", "unknown key in the file", nil, []string{"-config", file("p1.yaml", "db: x.db\nturbo: true\n")}, "turbo"},
		{"publisher", "bad value in the file", nil, []string{"-config", file("p2.yaml", "db: x.db\nbatch-size: lots\n")}, "batch-size"},
		{"publisher", "not YAML", nil, []string{"-config", file("p3.yaml", "db: [x.db\n")}, "YAML"},
		{"publisher", "missing file", nil, []string{"-config", filepath.Join(dir, "nope.yaml")}, "nope.yaml"},
		{"publisher", "bad environment", []string{"PUBLISHER_MAX_IN_FLIGHT=many"}, []string{"-db", "x.db"}, "max-in-flight"},
		{"publisher", "bad NATS URL", nil, []string{"-db", "x.db", "-nats", "http://127.0.0.1:4222"}, "-nats"},
		{"publisher", "password without user", nil, []string{"-db", "x.db", "-nats-password", "pw"}, "-nats-password"},
		{"publisher", "missing CA file", nil, []string{"-db", "x.db", "-nats-tls-ca", filepath.Join(dir, "ca.pem")}, "-nats-tls-ca"},
		{"publisher", "taken HTTP address", nil, []string{"-db", "x.db", "-http", "256.1.1.1:1"}, "-http"},
		{"publisher", "a stream setting that moved, from the environment", []string{"PUBLISHER_MAX_AGE=96h"}, []string{"-db", "x.db"}, "-max-age (from PUBLISHER_MAX_AGE): removed: max-age is part of the JetStream declaration now"},
		{"publisher", "unknown key in the declaration", nil, []string{"-db", "x.db", "-jetstream-config", file("j2.yaml", "nats: nats://x:4222\n")}, `unknown key "nats"`},

		{"telegram-worker", "no token", nil, nil, "TELEGRAM_BOT_TOKEN"},
		{"telegram-worker", "missing token file", nil, []string{"-token-file", filepath.Join(dir, "token")}, "-token-file"},
		{"telegram-worker", "not a duration", token, []string{"-breaker-open", "soon"}, "breaker-open"},
		{"telegram-worker", "ack wait too short in the declaration", token, []string{"-jetstream-config", file("j1.yaml", "ack-wait: 10ms\n")}, "-ack-wait 10ms: must be at least 1s"},
		{"telegram-worker", "a consumer flag that moved", token, []string{"-ack-wait", "10s"}, "ack-wait is part of the JetStream declaration now"},
		{"telegram-worker", "negative rate", token, []string{"-bot-rate", "-1"}, "-bot-rate"},
		{"telegram-worker", "cap below base", token, []string{"-backoff-base", "1m", "-backoff-cap", "1s"}, "-backoff-cap"},
		{"telegram-worker", "unknown key in the file", token, []string{"-config", file("w1.yaml", "chat-rate: 1\nturbo: true\n")}, "turbo"},
		{"telegram-worker", "bad value in the file", token, []string{"-config", file("w2.yaml", "max-in-flight: lots\n")}, "max-in-flight"},
		{"telegram-worker", "bad environment", append([]string{"TELEGRAM_WORKER_MAX_ATTEMPTS=-3"}, token...), nil, "-max-attempts"},
		{"telegram-worker", "bad API URL", token, []string{"-telegram-api", "ftp://example"}, "bot API"},
		{"telegram-worker", "two NATS auth methods", token, []string{"-nats-user", "u", "-nats-token", "t"}, "-nats-token"},
		{"telegram-worker", "paid broadcast at the free rate", token, []string{"-paid-broadcast", "-bot-rate", "30"}, "-paid-broadcast: requires -bot-rate above 30 (got 30)"},
		{"telegram-worker", "paid broadcast next to the file's rate", token, []string{"-paid-broadcast", "-config", file("w3.yaml", "bot-rate: 30\n")}, "requires -bot-rate above 30 (got 30)"},
		{"telegram-worker", "cap below base, named natively", token, []string{"-backoff-base", "2s", "-backoff-cap", "1s"}, "-backoff-cap 1s: must be at least -backoff-base 2s"},

		{"shop", "zero read timeout", nil, []string{"-read-timeout", "0s"}, "-read-timeout"},
		{"shop", "bad log level", nil, []string{"-log-level", "loud"}, "-log-level"},
		{"shop", "unknown flag", nil, []string{"-turbo"}, "-turbo"},
		{"shop", "bad environment", []string{"SHOP_WRITE_TIMEOUT=later"}, nil, "write-timeout"},
		{"shop", "unknown key in the file", nil, []string{"-config", file("s1.yaml", "http: 127.0.0.1:0\nturbo: true\n")}, `unknown key "turbo"`},

		{"botapi-emulator", "negative rate", nil, []string{"-bot-rate", "-5"}, "-bot-rate"},
		{"botapi-emulator", "unknown fault", nil, []string{"-fault", "nonsense"}, "-fault"},
		{"botapi-emulator", "bad environment", []string{"EMULATOR_CHAT_RATE=fast"}, nil, "EMULATOR_CHAT_RATE"},
		{"botapi-emulator", "bad chat list", nil, []string{"-blocked", "1,two"}, "-blocked"},
		{"botapi-emulator", "bad value in the file", nil, []string{"-config", file("e1.yaml", "chat-rate: 0\n")}, "-chat-rate 0 (from "},
	}
	for _, tt := range tests {
		t.Run(tt.binary+"/"+tt.name, func(t *testing.T) {
			args := tt.args
			if tt.binary == "shop" && !contains(args, "-db") {
				// Refusals come before the database is opened; point it
				// into the test's directory all the same.
				args = append([]string{"-db", filepath.Join(t.TempDir(), "shop.db")}, args...)
			}
			r := runBinary(t, bin(t, tt.binary), tt.env, args...)
			if r.code != 2 {
				t.Fatalf("exit status %d, want 2; output:\n%s", r.code, r.output)
			}
			if !strings.Contains(r.output, tt.want) {
				t.Fatalf("the message does not name %q:\n%s", tt.want, r.output)
			}
			if strings.Contains(r.output, "goroutine ") || strings.Contains(r.output, "panic") {
				t.Fatalf("the binary panicked:\n%s", r.output)
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestShippedConfigDoesNotOverrideNATSURL starts the built worker with the
// shipped configs/telegram-worker.yaml and NATS_URL pointing at a test
// server: the file sets nothing, so the worker must use NATS_URL's server
// (it used to connect to the file's nats://127.0.0.1:4222 instead).
func TestShippedConfigDoesNotOverrideNATSURL(t *testing.T) {
	worker := bin(t, "telegram-worker")
	srv := natstest.Start(t)
	shipped, err := filepath.Abs("../../configs/telegram-worker.yaml")
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	p := start(t, supervisor(t), procs.Spec{Name: "telegram-worker", Path: worker,
		Args: []string{"-config", shipped, "-http", addr, "-telegram-api", closedURL(t)},
		Env:  []string{"NATS_URL=" + srv.URL(), "TELEGRAM_BOT_TOKEN=1:not-used"}}, "http://"+addr+"/healthz")
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.Consumer(ctx, jetstream.StreamNotify, jetstream.ConsumerTelegram)
		return err == nil
	}, "the worker to set up its consumer on NATS_URL's server")
	if log := readLog(t, p); !strings.Contains(log, "(env NATS_URL)") {
		t.Errorf("the configuration log line does not say -nats came from NATS_URL:\n%s", log)
	}
}
