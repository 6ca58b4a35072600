package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/daemon"
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
	if s.telegram.ChatRate != 3 || s.worker.MaxInFlight != 9 || s.worker.BackoffBase != 7*time.Second || s.log.Level != "debug" {
		t.Fatalf("chat-rate %v (file), max-in-flight %d (env), backoff-base %v (flag), log-level %s; want 3, 9, 7s, debug",
			s.telegram.ChatRate, s.worker.MaxInFlight, s.worker.BackoffBase, s.log.Level)
	}
}

func TestPaidBroadcastRaisesBotRate(t *testing.T) {
	s, err := parse([]string{"-paid-broadcast"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.telegram.BotRate != 1000 {
		t.Fatalf("bot rate with -paid-broadcast = %v, want 1000", s.telegram.BotRate)
	}
}

func TestBadConfigurationNamesTheSetting(t *testing.T) {
	cases := []struct {
		name string
		args []string
		file string
		want string
	}{
		{"negative rate", []string{"-bot-rate", "-1"}, "", "-bot-rate"},
		{"not a duration", []string{"-ack-wait", "soon"}, "", "ack-wait"},
		{"small ack wait", []string{"-ack-wait", "10ms"}, "", "-ack-wait"},
		{"cap below base", []string{"-backoff-base", "1m", "-backoff-cap", "1s"}, "", "-backoff-cap"},
		{"max age below window", []string{"-max-age", "1m"}, "", "-max-age"},
		{"unknown key in file", nil, "chat-rate: 1\nturbo: true\n", "turbo"},
		{"bad value in file", nil, "max-in-flight: lots\n", "max-in-flight"},
		{"missing file", []string{"-config", "/nonexistent/worker.yaml"}, "", "worker.yaml"},
		{"extra argument", []string{"now"}, "", "unexpected arguments"},
		{"bad log level", []string{"-log-level", "loud"}, "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"-config", writeFile(t, "w.yaml", tc.file)}, args...)
			}
			s, err := parse(args, io.Discard)
			if err == nil && tc.want == "" {
				_, err = s.log.Logger(io.Discard)
				tc.want = "-log-level"
			}
			var u daemon.UsageError
			if !errors.As(err, &u) || daemon.ExitCode(err) != 2 {
				t.Fatalf("parse(%v) = %v, want a usage error (exit 2)", args, err)
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
