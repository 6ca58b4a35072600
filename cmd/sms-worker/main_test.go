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

// The shipped configs/sms-worker.yaml parses, sets nothing (so NATS_URL is
// never overridden by it), and shows every flag commented at its default.
func TestShippedConfigFile(t *testing.T) {
	const path = "../../configs/sms-worker.yaml"
	t.Setenv("NATS_URL", "nats://from-env:4222")
	s, _, err := parse(append([]string{"-config", path}, []string{"-from", "+15005550006"}...))
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
		{"no sender", nil, "give exactly one of -from and -messaging-service"},
		{"two senders", []string{"-from", "+15005550006", "-messaging-service", "MG1"}, "give exactly one of -from and -messaging-service"},
		{"too many segments", []string{"-from", "+15005550006", "-max-segments", "11"}, "-max-segments 11"},
		{"removed consumer flag", append([]string{"-ack-wait", "10s"}, []string{"-from", "+15005550006"}...), "-ack-wait: removed"},
		{"fallback not a duration", append([]string{"-fallback-after-transactional", "soon"}, []string{"-from", "+15005550006"}...), "fallback-after-transactional"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := parse(tc.args)
			if !errors.Is(err, config.ErrInvalid) || daemon.ExitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("parse(%v) = %v, want an invalid configuration (exit 2) naming %q", tc.args, err, tc.want)
			}
		})
	}
}
