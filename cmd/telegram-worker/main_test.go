package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/config/configtest"
	"github.com/tgnotify/tgnotify/internal/daemon"
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

func TestPrecedenceFlagOverEnvOverFile(t *testing.T) {
	cfg := writeFile(t, "w.yaml", "chat-rate: 3\nmax-in-flight: 7\nbackoff-base: 5s\nlog-level: debug\n")
	t.Setenv("TELEGRAM_WORKER_MAX_IN_FLIGHT", "9")
	t.Setenv("TELEGRAM_WORKER_BACKOFF_BASE", "6s")
	s, err := parse([]string{"-config", cfg, "-backoff-base", "7s"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.worker.ChatRate != 3 || s.worker.MaxInFlight != 9 || s.worker.BackoffBase != 7*time.Second || s.log.Level != "debug" {
		t.Fatalf("chat-rate %v (file), max-in-flight %d (env), backoff-base %v (flag), log-level %s; want 3, 9, 7s, debug",
			s.worker.ChatRate, s.worker.MaxInFlight, s.worker.BackoffBase, s.log.Level)
	}
}

// TestShippedConfigFile checks configs/telegram-worker.yaml: it parses,
// sets nothing, so that NATS_URL and TELEGRAM_WORKER_* are never overridden
// by it, and shows every flag commented at its default.
func TestShippedConfigFile(t *testing.T) {
	const path = "../../configs/telegram-worker.yaml"
	t.Setenv("NATS_URL", "nats://from-env:4222")
	s, err := parse([]string{"-config", path}, io.Discard)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if got := s.nats.URLs; got != "nats://from-env:4222" {
		t.Fatalf("-nats with NATS_URL set and the shipped file = %q, want NATS_URL's", got)
	}
	configtest.CheckCommentedDefaults(t, s.config.FlagSet(), path, "config", "version")
}

func TestPaidBroadcastRaisesBotRate(t *testing.T) {
	s, err := parse([]string{"-paid-broadcast"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if got := s.worker.BotRate; got != 0 {
		t.Fatalf("bot rate with -paid-broadcast alone = %v, want 0 (delivery's paid default)", got)
	}
	s, err = parse([]string{"-paid-broadcast", "-bot-rate", "500"}, io.Discard)
	if err != nil || s.worker.BotRate != 500 {
		t.Fatalf("-paid-broadcast -bot-rate 500: rate %v, %v; want 500", s.worker.BotRate, err)
	}
}

func TestDefaultsAreTheLibrarys(t *testing.T) {
	t.Setenv("NATS_URL", "")
	s, err := parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := delivery.DefaultConfig()
	want.AckWait = jetstream.DefaultAckWait
	want.PullBatch, want.TakeoverGap = 0, 0 // not flags: the library's defaults apply
	if s.worker != want {
		t.Fatalf("worker configuration from the flag defaults:\n got %+v\nwant %+v", s.worker, want)
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
		{"not a duration", []string{"-ack-wait", "soon"}, "", "ack-wait"},
		{"small ack wait", []string{"-ack-wait", "10ms"}, "", "-ack-wait 10ms: must be at least 1s"},
		{"cap below base", []string{"-backoff-base", "2s", "-backoff-cap", "1s"}, "", "-backoff-cap 1s: must be at least -backoff-base 2s"},
		{"max age below window", []string{"-max-age", "1m"}, "", "-max-age 1m: must be at least -duplicate-window 2h"},
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
			_, err := parse(args, io.Discard)
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
	if tok, err := readToken("", env(" 1:abc \n")); err != nil || tok != "1:abc" {
		t.Fatalf("token from env = %q, %v", tok, err)
	}
	f := writeFile(t, "token", "2:def\n")
	if tok, err := readToken(f, env("1:abc")); err != nil || tok != "2:def" {
		t.Fatalf("token from file = %q, %v; want the file to win", tok, err)
	}
	if _, err := readToken("", env("")); err == nil || !strings.Contains(err.Error(), "TELEGRAM_BOT_TOKEN") {
		t.Fatalf("missing token: %v", err)
	}
	if _, err := readToken("/nonexistent/token", env("")); err == nil || !strings.Contains(err.Error(), "-token-file") {
		t.Fatalf("missing token file: %v", err)
	}
}
