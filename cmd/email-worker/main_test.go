package main

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/config/configtest"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/workerd"
)

func parse(args []string) (*workerd.Settings, *flags, error) {
	f := &flags{}
	s, err := workerd.Parse(spec(f), args, os.Getenv, io.Discard)
	return s, f, err
}

// The shipped configs/email-worker.yaml parses, sets nothing (so NATS_URL is
// never overridden by it), and shows every flag commented at its default.
func TestShippedConfigFile(t *testing.T) {
	const path = "../../configs/email-worker.yaml"
	t.Setenv("NATS_URL", "nats://from-env:4222")
	s, _, err := parse(append([]string{"-config", path}, []string{"-smtp", "127.0.0.1:25", "-from", "a@shop.example"}...))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if got := s.NATS.URLs; got != "nats://from-env:4222" {
		t.Fatalf("-nats with NATS_URL set and the shipped file = %q, want NATS_URL's", got)
	}
	configtest.CheckCommentedDefaults(t, s.FlagSet(), path, "config", "version")
}

func TestBadConfigurationNamesTheSetting(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no server", []string{"-from", "a@shop.example"}, "-smtp"},
		{"no sender", []string{"-smtp", "127.0.0.1:25"}, "-from"},
		{"bad tls", []string{"-smtp", "127.0.0.1:25", "-from", "a@shop.example", "-smtp-tls", "ssl"}, "-smtp-tls ssl"},
		{"removed consumer flag", append([]string{"-ack-wait", "10s"}, []string{"-smtp", "127.0.0.1:25", "-from", "a@shop.example"}...), "-ack-wait: removed"},
		{"fallback not a duration", append([]string{"-fallback-after-transactional", "soon"}, []string{"-smtp", "127.0.0.1:25", "-from", "a@shop.example"}...), "fallback-after-transactional"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parse(tc.args)
			if !errors.Is(err, config.ErrInvalid) || daemon.ExitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parse(%v) = %v, want an invalid configuration (exit 2) naming %q", tc.args, err, tc.want)
			}
		})
	}
}
