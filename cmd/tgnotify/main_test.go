package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/config/configtest"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// run runs tgnotify with args and an environment of env only, and returns
// its exit status, standard output and standard error.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	err := runMain(context.Background(), args, streams{stdout: &stdout, stderr: &stderr, getenv: func(k string) string { return env[k] }})
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		stderr.WriteString("tgnotify: " + err.Error() + "\n")
	}
	return exitCode(err), stdout.String(), stderr.String()
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "jetstream.yaml")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestHelp(t *testing.T) {
	code, _, stderr := run(t, nil, "-h")
	if code != 0 || !strings.Contains(stderr, "provision") || !strings.Contains(stderr, "Usage: tgnotify <command>") {
		t.Errorf("tgnotify -h: exit %d\n%s", code, stderr)
	}
	code, _, stderr = run(t, nil, "provision", "-h")
	if code != 0 {
		t.Errorf("tgnotify provision -h: exit %d", code)
	}
	for _, want := range []string{"-dry-run", "-config file", "-max-age duration", "-channels list", "-nats URLs", "TGNOTIFY_<FLAG>"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("tgnotify provision -h does not show %q:\n%s", want, stderr)
		}
	}
	if code, _, stderr := run(t, nil); code != 2 || !strings.Contains(stderr, "no command") {
		t.Errorf("tgnotify alone: exit %d, %s; want 2 and the usage", code, stderr)
	}
	if code, _, stderr := run(t, nil, "stats"); code != 2 || !strings.Contains(stderr, `unknown command "stats"`) {
		t.Errorf("tgnotify stats: exit %d, %s; want 2", code, stderr)
	}
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"status", "-h"}, []string{"Usage: tgnotify status [-db PATH] [flags] KEY", "-db PATH", "-nats URLs", "-since time"}},
		{[]string{"dlq", "-h"}, []string{"Usage: tgnotify dlq <command>", "list ", "show ", "replay ", "purge "}},
		{[]string{"dlq", "list", "-h"}, []string{"Usage: tgnotify dlq list", "-channel channel", "-reason reason", "-recipient recipient", "-key key", "-since time", "-until time", "-nats URLs"}},
		{[]string{"dlq", "show", "-h"}, []string{"Usage: tgnotify dlq show", "-nats URLs"}},
		{[]string{"dlq", "replay", "-h"}, []string{"Usage: tgnotify dlq replay", "<key>:replay:<dead-letter seq>", "-all", "-reason reason", "-nats URLs"}},
		{[]string{"dlq", "purge", "-h"}, []string{"Usage: tgnotify dlq purge", "-dry-run", "-all", "-nats URLs"}},
		{[]string{"cancel", "-h"}, []string{"Usage: tgnotify cancel [-db PATH] [flags] KEY", "-db PATH", "-nats URLs", "exit 3"}},
		{[]string{"chat", "-h"}, []string{"Usage: tgnotify chat revive [-channel telegram] [flags] ID"}},
		{[]string{"chat", "revive", "-h"}, []string{"Usage: tgnotify chat revive", "-channel channel", "-nats URLs"}},
	} {
		code, _, stderr := run(t, nil, c.args...)
		if code != 0 {
			t.Errorf("tgnotify %v: exit %d, want 0", c.args, code)
		}
		for _, w := range c.wants {
			if !strings.Contains(stderr, w) {
				t.Errorf("tgnotify %v does not show %q:\n%s", c.args, w, stderr)
			}
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"status"}, "want one KEY after the flags"},
		{[]string{"cancel"}, "want one KEY after the flags"},
		{[]string{"dlq"}, "no dlq command given"},
		{[]string{"dlq", "drop"}, `unknown dlq command "drop"`},
		{[]string{"dlq", "show"}, "give the SEQ of at least one dead letter"},
		{[]string{"dlq", "show", "x"}, `"x" is not a sequence number`},
		{[]string{"dlq", "replay"}, "select dead letters with a filter"},
		{[]string{"dlq", "replay", "-reason", "blocked", "7"}, "give either SEQ... or filters/-all, not both"},
		{[]string{"dlq", "purge", "-all", "-reason", "blocked"}, "-all selects every dead letter: give it without filters"},
		{[]string{"dlq", "list", "-reason", "a.b"}, "must be one subject token"},
		{[]string{"dlq", "list", "-since", "yesterday"}, "want an RFC 3339 time"},
		{[]string{"dlq", "list", "-since", "1h", "-until", "2h"}, "is before since"},
		{[]string{"chat", "revive"}, "want one recipient ID"},
		{[]string{"chat", "revive", "abc"}, `"abc" is not a Telegram chat id`},
		{[]string{"chat", "revive", "-channel", "pigeon", "1"}, "-channel pigeon"},
	} {
		if code, _, stderr := run(t, nil, c.args...); code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("tgnotify %v: exit %d, %s; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

func TestProvisionRefusesBadSettings(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"bad flag value", []string{"-max-age", "1m"}, "-max-age 1m: must be at least -duplicate-window 2h"},
		{"unknown key", []string{"-config", writeFile(t, "max-age: 96h\nturbo: true\n")}, `jetstream.yaml:2: unknown key "turbo"`},
		{"connection in the declaration", []string{"-config", writeFile(t, "nats: nats://elsewhere:4222\n")}, `key "nats" does not belong in this file`},
		{"bad value in the file", []string{"-config", writeFile(t, "replicas: 9\n")}, "-replicas 9: must be between 1 and 5"},
		{"bad channel", []string{"-channels", "telegram,E Mail"}, `"E Mail" is not a channel name`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := run(t, nil, append([]string{"provision"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

func TestShippedDeclarationFile(t *testing.T) {
	const path = "../../configs/jetstream.yaml"
	p, err := parseProvision([]string{"-config", path}, streams{stderr: os.Stderr, getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if p.decl.MaxAge != jetstream.DefaultMaxAge || len(p.decl.Channels) != len(jetstream.DefaultChannels()) {
		t.Fatalf("%s declares %+v, want the defaults", path, p.decl)
	}
	fs := flagSetOf(t)
	configtest.CheckCommentedDefaults(t, fs, path)
}

// flagSetOf returns the declaration's flags as the daemons' file reader
// knows them.
func flagSetOf(t *testing.T) *flag.FlagSet {
	t.Helper()
	s := jetstream.DefaultSettings()
	fs := flag.NewFlagSet("jetstream.yaml", flag.ContinueOnError)
	s.RegisterFlags(fs)
	return fs
}

func TestProvision(t *testing.T) {
	srv := natstest.Start(t)
	env := map[string]string{"NATS_URL": srv.URL()}
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	maxAge := func() time.Duration {
		s, err := js.Stream(context.Background(), jetstream.StreamNotify)
		if err != nil {
			t.Fatal(err)
		}
		return s.CachedInfo().Config.MaxAge
	}

	t.Run("dry run on an empty server creates nothing", func(t *testing.T) {
		code, stdout, stderr := run(t, env, "provision", "-dry-run")
		if code != 0 || !strings.Contains(stdout, "would create stream NOTIFY\n") || !strings.Contains(stdout, "nothing was changed") {
			t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
		}
		if _, err := js.Stream(context.Background(), jetstream.StreamNotify); !errors.Is(err, natsjs.ErrStreamNotFound) {
			t.Fatalf("after a dry run: %v, want no stream", err)
		}
	})
	t.Run("creates everything", func(t *testing.T) {
		code, stdout, stderr := run(t, env, "provision")
		want := "created stream NOTIFY\ncreated stream NOTIFY_DEAD\ncreated consumer telegram-worker on NOTIFY\n" +
			"created consumer max-worker on NOTIFY\ncreated consumer email-worker on NOTIFY\ncreated consumer sms-worker on NOTIFY\n" +
			"created bucket notify_delivered\ncreated bucket notify_chats\ncreated bucket notify_attempts\n"
		if code != 0 || !strings.HasPrefix(stdout, want) {
			t.Fatalf("exit %d\n%s%s\nwant the output to start with\n%s", code, stdout, stderr, want)
		}
	})
	t.Run("is idempotent", func(t *testing.T) {
		code, stdout, stderr := run(t, env, "provision")
		if code != 0 || !strings.HasPrefix(stdout, "up to date: the 9 declared objects") {
			t.Fatalf("exit %d\n%s%s", code, stdout, stderr)
		}
	})
	t.Run("updates a changed setting from the file", func(t *testing.T) {
		file := writeFile(t, "max-age: 96h\n")
		code, stdout, stderr := run(t, env, "provision", "-config", file, "-dry-run")
		if code != 0 || !strings.Contains(stdout, "would update stream NOTIFY: max_age 72h -> 96h\n") || maxAge() != jetstream.DefaultMaxAge {
			t.Fatalf("dry run: exit %d, max age %v\n%s%s", code, maxAge(), stdout, stderr)
		}
		code, stdout, stderr = run(t, env, "provision", "-config", file)
		if code != 0 || !strings.Contains(stdout, "updated stream NOTIFY: max_age 72h -> 96h\n") || maxAge() != 96*time.Hour {
			t.Fatalf("exit %d, max age %v\n%s%s", code, maxAge(), stdout, stderr)
		}
	})
	t.Run("a flag beats the environment, which beats the file", func(t *testing.T) {
		file := writeFile(t, "max-age: 80h\nack-wait: 40s\n")
		env := map[string]string{"NATS_URL": srv.URL(), "TGNOTIFY_MAX_AGE": "90h", "TGNOTIFY_ACK_WAIT": "45s"}
		code, stdout, stderr := run(t, env, "provision", "-config", file, "-dry-run", "-ack-wait", "50s")
		for _, want := range []string{"max_age 96h -> 90h", "ack_wait 10s -> 50s"} {
			if code != 0 || !strings.Contains(stdout, want) {
				t.Errorf("exit %d, output does not say %q:\n%s%s", code, want, stdout, stderr)
			}
		}
	})
	t.Run("a conflict is refused", func(t *testing.T) {
		ctx := context.Background()
		if err := js.DeleteConsumer(ctx, jetstream.StreamNotify, jetstream.ConsumerTelegram); err != nil {
			t.Fatal(err)
		}
		if _, err := js.CreateConsumer(ctx, jetstream.StreamNotify, natsjs.ConsumerConfig{Durable: jetstream.ConsumerTelegram, AckPolicy: natsjs.AckAllPolicy, FilterSubject: jetstream.TelegramFilter}); err != nil {
			t.Fatal(err)
		}
		code, stdout, stderr := run(t, env, "provision")
		want := "consumer telegram-worker exists with ack_policy AckAll, want AckExplicit: refusing to change it"
		if code != 1 || !strings.Contains(stderr, want) {
			t.Fatalf("exit %d\n%s%s\nwant 1 and %q", code, stdout, stderr, want)
		}
	})
}

func TestProvisionWithoutServer(t *testing.T) {
	code, _, stderr := run(t, map[string]string{"NATS_URL": "nats://127.0.0.1:1"}, "provision", "-timeout", "500ms")
	if code != 1 || !strings.Contains(stderr, "cannot reach NATS at nats://127.0.0.1:1 within -timeout 500ms") {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
}
