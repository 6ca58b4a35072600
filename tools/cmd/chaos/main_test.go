package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeBin makes a directory with empty files named like the binaries, so
// that the configuration validates.
func fakeBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range []string{"nats-server", "botapi-emulator", "max-emulator", "sms-emulator", "mailpit", "shop", "publisher",
		"telegram-worker", "max-worker", "email-worker", "sms-worker"} {
		if err := os.WriteFile(filepath.Join(dir, name), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func env(kv map[string]string) func(string) string { return func(k string) string { return kv[k] } }

func TestPresetsAndFlags(t *testing.T) {
	bin, conf := fakeBin(t), "../../../configs/nats-server.conf"
	c, o, err := parseFlags([]string{"-bin", bin, "-nats-config", conf}, env(nil), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "long" || c.FaultPhase != 25*time.Minute || o.verbose {
		t.Errorf("default: %s run of %v, verbose %v; want the long run, quiet", c.Name, c.FaultPhase, o.verbose)
	}
	c, o, err = parseFlags([]string{"-bin", bin, "-nats-config", conf, "-seed", "42", "-duration", "30s"}, env(map[string]string{"CHAOS_SHORT": "1"}), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "short" || c.Seed != 42 || c.FaultPhase != 30*time.Second || !o.verbose {
		t.Errorf("CHAOS_SHORT=1 -seed 42 -duration 30s: %s run, seed %d, %v, verbose %v", c.Name, c.Seed, c.FaultPhase, o.verbose)
	}
}

func TestBadSettings(t *testing.T) {
	bin, conf := fakeBin(t), "../../../configs/nats-server.conf"
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"-rate", "100"}, nil, "-rate"},
		{[]string{"-duration", "1s"}, nil, "-duration"},
		{[]string{"-orders-per-chat", "1"}, nil, "-orders-per-chat"},
		{[]string{"-hard-nats", "2"}, nil, "-hard-nats"},
		{[]string{"-email-share", "1.5"}, nil, "-email-share"},
		{[]string{"-fallback-after", "0s"}, nil, "-fallback-after"},
		{nil, map[string]string{"CHAOS_SHORT": "yes please"}, "CHAOS_SHORT"},
		{[]string{"extra"}, nil, "unexpected arguments"},
	} {
		var stderr strings.Builder
		args := append([]string{"-bin", bin, "-nats-config", conf}, tc.args...)
		if code := runMain(context.Background(), args, env(tc.env), io.Discard, &stderr); code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%v %v: exit %d, %q; want %d naming %s", tc.args, tc.env, code, stderr.String(), exitUsage, tc.want)
		}
	}
	var stderr strings.Builder
	if code := runMain(context.Background(), []string{"-bin", t.TempDir(), "-nats-config", conf}, env(nil), io.Discard, &stderr); code != exitUsage ||
		!strings.Contains(stderr.String(), "make build") {
		t.Errorf("missing binaries: exit %d, %q; want a hint to run make build", code, stderr.String())
	}
}

func TestRecheckOfAMissingRun(t *testing.T) {
	var stderr strings.Builder
	if code := runMain(context.Background(), []string{"-recheck", t.TempDir()}, env(nil), io.Discard, &stderr); code != exitFailed {
		t.Errorf("-recheck of an empty directory: exit %d (%s), want %d", code, stderr.String(), exitFailed)
	}
}
