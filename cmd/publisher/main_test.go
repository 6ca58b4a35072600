package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/config/configtest"
	"github.com/tgnotify/tgnotify/internal/daemon"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
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
	cfg := writeFile(t, "p.yaml", "db: /file.db\nbatch-size: 100\nmax-in-flight: 1000\npoll-interval: 5ms\nlog-level: debug\n")
	t.Setenv("PUBLISHER_MAX_IN_FLIGHT", "2000")
	t.Setenv("PUBLISHER_POLL_INTERVAL", "6ms")
	s, err := parse([]string{"-config", cfg, "-poll-interval", "7ms"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.dbPath != "/file.db" || s.pub.BatchSize != 100 || s.pub.MaxInFlight != 2000 || s.pub.PollInterval != 7*time.Millisecond || s.log.Level != "debug" {
		t.Fatalf("db %q, batch-size %d (file), max-in-flight %d (env), poll-interval %v (flag), log-level %s; want /file.db, 100, 2000, 7ms, debug",
			s.dbPath, s.pub.BatchSize, s.pub.MaxInFlight, s.pub.PollInterval, s.log.Level)
	}
}

func TestDefaults(t *testing.T) {
	t.Setenv("NATS_URL", "")
	s, err := parse([]string{"-db", "x.db"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.http.Addr != "127.0.0.1:9101" || s.http.Pprof || s.pub.BatchSize != publisher.DefaultBatchSize ||
		s.jetstream.Settings.Duplicates != jetstream.DefaultDuplicates || !s.jetstream.Provision || s.nats.ServerURLs() != jetstream.DefaultURL {
		t.Fatalf("unexpected defaults: %+v", s)
	}
}

// TestShippedConfigFile checks configs/publisher.yaml: it parses, sets
// nothing (so it never overrides the environment), and shows every flag
// commented at its default.
func TestShippedConfigFile(t *testing.T) {
	const path = "../../configs/publisher.yaml"
	t.Setenv("PUBLISHER_BATCH_SIZE", "7")
	s, err := parse([]string{"-config", path, "-db", "x.db"}, io.Discard)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if s.pub.BatchSize != 7 {
		t.Fatalf("batch-size %d with PUBLISHER_BATCH_SIZE=7 and the shipped file, want 7", s.pub.BatchSize)
	}
	configtest.CheckCommentedDefaults(t, s.config.FlagSet(), path, "config", "version")
}

func TestBadConfigurationNamesTheSetting(t *testing.T) {
	cases := []struct {
		name string
		args []string
		file string
		want string
	}{
		{"no database", nil, "", "-db: the outbox database path is required"},
		{"negative batch", []string{"-db", "x", "-batch-size", "-1"}, "", "-batch-size -1: must be positive"},
		{"not a duration", []string{"-db", "x", "-poll-interval", "often"}, "", "poll-interval"},
		{"in flight below batch", []string{"-db", "x", "-batch-size", "100", "-max-in-flight", "10"}, "", "-max-in-flight 10: must be at least -batch-size 100"},
		{"retry max below initial", []string{"-db", "x", "-retry-initial", "1m", "-retry-max", "1s"}, "", "-retry-max 1s: must be at least -retry-initial 1m"},
		{"removed stream flag", []string{"-db", "x", "-max-age", "1m"}, "", "-max-age: removed: max-age is part of the JetStream declaration now: set it in the file given by -jetstream-config"},
		{"removed stream setting in the environment", []string{"-db", "x"}, "", "-replicas (from PUBLISHER_REPLICAS): removed: replicas is part of the JetStream declaration now"},
		{"removed stream setting in the file", nil, "db: x\ndead-max-age: 720h\n", "-dead-max-age (from "},
		{"bad declaration", []string{"-db", "x", "-jetstream-config", writeFile(t, "j.yaml", "max-age: 1m\n")}, "", "-jetstream-config "},
		{"unknown key in the declaration", []string{"-db", "x", "-jetstream-config", writeFile(t, "j.yaml", "db: x\n")}, "", `j.yaml:1: unknown key "db"`},
		{"busy timeout", []string{"-db", "x", "-db-busy-timeout", "0s"}, "", "-db-busy-timeout 0s: must be positive"},
		{"password without user", []string{"-db", "x", "-nats-password", "pw"}, "", "-nats-password: requires -nats-user"},
		{"bad log format", []string{"-db", "x", "-log-format", "xml"}, "", "-log-format xml: want text or json"},
		{"unknown key in file", nil, "db: x\nturbo: true\n", `p.yaml:2: unknown key "turbo"`},
		{"bad value in file", nil, "db: x\nbatch-size: lots\n", "-batch-size lots (from "},
		{"bad value in env", nil, "", "-purge-chunk several (from PUBLISHER_PURGE_CHUNK): not an integer"},
		{"missing file", []string{"-config", "/nonexistent/publisher.yaml"}, "", "publisher.yaml"},
		{"extra argument", []string{"-db", "x", "now"}, "", "unexpected arguments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if tc.file != "" {
				args = append([]string{"-config", writeFile(t, "p.yaml", tc.file)}, args...)
			}
			if strings.Contains(tc.want, "PUBLISHER_PURGE_CHUNK") {
				t.Setenv("PUBLISHER_PURGE_CHUNK", "several")
				args = []string{"-db", "x"}
			}
			if strings.Contains(tc.want, "PUBLISHER_REPLICAS") {
				t.Setenv("PUBLISHER_REPLICAS", "3")
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

func TestHelpAndVersion(t *testing.T) {
	var out strings.Builder
	if err := runMain(context.Background(), []string{"-h"}, &out); !errors.Is(err, flag.ErrHelp) || daemon.ExitCode(err) != 0 {
		t.Fatalf("-h returned %v", err)
	}
	for _, name := range []string{"-db", "-nats", "-nats-creds", "-http", "-batch-size", "-purge-retention", "-jetstream-config", "-provision", "PUBLISHER_"} {
		if !strings.Contains(out.String(), name) {
			t.Errorf("-h does not document %s", name)
		}
	}
	if strings.Contains(out.String(), "-max-age") {
		t.Errorf("-h lists the removed -max-age:\n%s", out.String())
	}
	out.Reset()
	if err := runMain(context.Background(), []string{"-version"}, &out); err != nil || strings.TrimSpace(out.String()) != version {
		t.Fatalf("-version printed %q, %v", out.String(), err)
	}
}

// freeAddr returns a loopback address with a port that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func enqueue(t *testing.T, db *sql.DB, from, to int) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := from; i < to; i++ {
		n := notify.Notification{Key: fmt.Sprintf("order:%05d", i), ChatID: int64(100 + i%7), Text: fmt.Sprintf("order %d shipped", i)}
		if _, err := outbox.Enqueue(ctx, tx, n); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func streamMsgs(js natsjs.JetStream) uint64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		return 0
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0
	}
	return info.State.Msgs
}

func httpStatus(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestRunMainDrainsAndStops runs the daemon in-process: it provisions the
// streams, drains rows, serves its endpoints and returns nil when stopped.
func TestRunMainDrainsAndStops(t *testing.T) {
	srv := natstest.Start(t)
	dbPath := filepath.Join(t.TempDir(), "app.db")
	app, err := outbox.Open(context.Background(), dbPath, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	enqueue(t, app, 0, 500)
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- runMain(ctx, []string{"-db", dbPath, "-nats", srv.URL(), "-http", addr, "-log-format", "json"}, &logs)
	}()
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	natstest.WaitFor(t, 20*time.Second, func() bool { return streamMsgs(js) == 500 }, "500 messages in NOTIFY")
	natstest.WaitFor(t, 10*time.Second, func() bool { code, _ := httpStatus("http://" + addr + "/readyz"); return code == 200 }, "/readyz 200")
	natstest.WaitFor(t, 10*time.Second, func() bool {
		code, body := httpStatus("http://" + addr + "/metrics")
		return code == 200 && strings.Contains(body, "tgnotify_publisher_published_total 500")
	}, "/metrics to report 500 rows published")
	if code, _ := httpStatus("http://" + addr + "/healthz"); code != 200 {
		t.Errorf("/healthz: %d", code)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runMain returned %v after stop, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("runMain did not return after stop")
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

// startRunMain runs the daemon in-process with args and returns its log
// and a function that stops it and returns runMain's error.
func startRunMain(t *testing.T, args ...string) (*syncBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &syncBuffer{}
	done := make(chan error, 1)
	go func() { done <- runMain(ctx, args, logs) }()
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
		case <-time.After(20 * time.Second):
			t.Fatal("runMain did not return after stop")
			return nil
		}
	}
	t.Cleanup(func() { _ = stop() })
	return logs, stop
}

// TestDriftIsReportedAndKept: an operator changed NOTIFY's max age; the
// publisher's start keeps it, logs the drift and sets the gauge.
func TestDriftIsReportedAndKept(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx := context.Background()
	if _, err := jetstream.Provision(ctx, js, jetstream.Declare(jetstream.DefaultSettings()), false); err != nil {
		t.Fatal(err)
	}
	stream, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		t.Fatal(err)
	}
	cfg := stream.CachedInfo().Config
	cfg.MaxAge = 96 * time.Hour
	if _, err := js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	logs, stop := startRunMain(t, "-db", filepath.Join(t.TempDir(), "app.db"), "-nats", srv.URL(), "-http", addr, "-log-format", "json")
	natstest.WaitFor(t, 20*time.Second, func() bool {
		_, body := httpStatus("http://" + addr + "/metrics")
		return strings.Contains(body, `tgnotify_jetstream_drift{field="max_age",kind="stream",name="NOTIFY"} 1`)
	}, "the drift gauge on /metrics")
	if err := stop(); err != nil {
		t.Fatalf("runMain: %v", err)
	}
	if l := logs.String(); !strings.Contains(l, `"msg":"JetStream configuration drift: keeping the live value`) ||
		!strings.Contains(l, `"field":"max_age","live":"96h","declared":"72h"`) {
		t.Errorf("no drift warning naming the field and both values in the log:\n%s", l)
	}
	stream, err = js.Stream(ctx, jetstream.StreamNotify)
	if err != nil || stream.CachedInfo().Config.MaxAge != 96*time.Hour {
		t.Errorf("NOTIFY max age after the publisher's start: %v, want the operator's 96h", err)
	}
}

// TestWithoutProvisionTheDaemonWaits: with -provision=false on an empty
// server the publisher creates nothing and says what it waits for; once the
// streams are provisioned it drains.
func TestWithoutProvisionTheDaemonWaits(t *testing.T) {
	srv := natstest.Start(t)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	dbPath := filepath.Join(t.TempDir(), "app.db")
	app, err := outbox.Open(context.Background(), dbPath, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	enqueue(t, app, 0, 10)
	logs, stop := startRunMain(t, "-db", dbPath, "-nats", srv.URL(), "-http", freeAddr(t), "-provision=false", "-retry-max", "200ms")
	natstest.WaitFor(t, 20*time.Second, func() bool {
		return strings.Contains(logs.String(), "missing stream NOTIFY, stream NOTIFY_DEAD: not created because -provision=false; waiting until `tgnotify provision` creates them")
	}, "the publisher to say what it waits for")
	names := js.StreamNames(context.Background())
	for name := range names.Name() {
		t.Errorf("stream %s exists: the publisher must not create anything with -provision=false", name)
	}
	if _, err := jetstream.Provision(context.Background(), js, jetstream.Declare(jetstream.DefaultSettings()), false); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool { return streamMsgs(js) == 10 }, "the publisher to drain once the streams exist")
	if err := stop(); err != nil {
		t.Fatalf("runMain: %v", err)
	}
}

// TestRunMainUnderAPrefix: the declaration's subject-prefix names the
// streams the publisher creates and the subjects it publishes to.
func TestRunMainUnderAPrefix(t *testing.T) {
	srv := natstest.Start(t)
	dbPath := filepath.Join(t.TempDir(), "app.db")
	app, err := outbox.Open(context.Background(), dbPath, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	enqueue(t, app, 0, 20)
	decl := writeFile(t, "jetstream.yaml", "subject-prefix: staging\n")
	_, stop := startRunMain(t, "-db", dbPath, "-nats", srv.URL(), "-http", freeAddr(t), "-jetstream-config", decl)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := natsjs.New(nc)
	ctx := context.Background()
	var info *natsjs.StreamInfo
	natstest.WaitFor(t, 20*time.Second, func() bool {
		s, err := js.Stream(ctx, "STAGING")
		if err != nil {
			return false
		}
		info, err = s.Info(ctx, natsjs.WithSubjectFilter(">"))
		return err == nil && info.State.Msgs == 20
	}, "20 messages in STAGING")
	if err := stop(); err != nil {
		t.Fatalf("runMain: %v", err)
	}
	for subj := range info.State.Subjects {
		if !strings.HasPrefix(subj, "staging.telegram.") {
			t.Errorf("STAGING holds %s, want staging.telegram.<chat> only", subj)
		}
	}
	if _, err := js.Stream(ctx, "STAGING_DEAD"); err != nil {
		t.Errorf("STAGING_DEAD: %v, want it created", err)
	}
	if _, err := js.Stream(ctx, jetstream.StreamNotify); !errors.Is(err, natsjs.ErrStreamNotFound) {
		t.Errorf("NOTIFY: %v, want no stream of the default prefix", err)
	}
}
