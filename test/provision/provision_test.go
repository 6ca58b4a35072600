// Package provision_test runs JetStream provisioning the way an operator
// meets it, with the built binaries: `bin/tgnotify provision`, the daemons
// bin/publisher and bin/telegram-worker, and the real nats CLI (bin/nats)
// editing a stream and a consumer during an "incident". The tests need
// `make build` and find the binaries through $TGNOTIFY_BIN; they skip
// without it.
package provision_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// bundle is a test's server, binaries and process supervisor.
type bundle struct {
	t    *testing.T
	bin  string
	srv  *natstest.Server
	sup  *procs.Supervisor
	home string
	js   natsjs.JetStream
}

func setup(t *testing.T) *bundle {
	t.Helper()
	b := &bundle{t: t, bin: builtbin.Dir(t, "tgnotify", "publisher", "telegram-worker", "nats"), home: t.TempDir()}
	b.srv = natstest.Start(t)
	sup, err := procs.New(filepath.Join(t.TempDir(), "logs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	b.sup = sup
	nc, err := nats.Connect(b.srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if b.js, err = natsjs.New(nc); err != nil {
		t.Fatal(err)
	}
	return b
}

// run runs a short-lived binary with NATS_URL set and returns its exit
// status and output.
func (b *bundle) run(name string, args ...string) (int, string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.bin, name), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + b.home, "XDG_CONFIG_HOME=" + b.home, "NATS_URL=" + b.srv.URL()}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil {
		b.t.Fatalf("%s %v did not exit within 60s:\n%s", name, args, out.String())
	}
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		b.t.Fatalf("running %s: %v", name, err)
	}
	b.t.Logf("$ %s %s (exit %d)\n%s", name, strings.Join(args, " "), code, out.String())
	return code, out.String()
}

// mustRun runs a binary that must succeed.
func (b *bundle) mustRun(name string, args ...string) string {
	b.t.Helper()
	code, out := b.run(name, args...)
	if code != 0 {
		b.t.Fatalf("%s %v: exit %d\n%s", name, args, code, out)
	}
	return out
}

// daemon is a running daemon and its HTTP address.
type daemon struct {
	proc *procs.Process
	addr string
}

// start starts the daemon name (publisher or telegram-worker) with extra
// args on a fresh HTTP port; it does not wait for it.
func (b *bundle) start(name, label string, extra ...string) *daemon {
	b.t.Helper()
	port, err := procs.FreePort()
	if err != nil {
		b.t.Fatal(err)
	}
	d := &daemon{addr: procs.Addr(port)}
	args := []string{"-nats", b.srv.URL(), "-http", d.addr, "-log-format", "json"}
	var env []string
	switch name {
	case "publisher":
		args = append(args, "-db", filepath.Join(b.home, "app.db"))
	case "telegram-worker":
		// Telegram is not reachable (nothing listens on a free port): the
		// worker starts all the same.
		closed, err := procs.FreePort()
		if err != nil {
			b.t.Fatal(err)
		}
		args = append(args, "-telegram-api", "http://"+procs.Addr(closed), "-request-timeout", "1s")
		env = []string{"TELEGRAM_BOT_TOKEN=1:not-used"}
	}
	d.proc, err = b.sup.Start(procs.Spec{Name: label, Path: filepath.Join(b.bin, name), Args: append(args, extra...), Env: env, Unset: system.CleanEnv()})
	if err != nil {
		b.t.Fatal(err)
	}
	return d
}

// waitFor waits until f holds.
func (b *bundle) waitFor(what string, f func() bool) {
	b.t.Helper()
	natstest.WaitFor(b.t, 30*time.Second, f, what)
}

func (d *daemon) log(t *testing.T) string {
	t.Helper()
	out, err := os.ReadFile(d.proc.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func (d *daemon) metrics() string {
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get("http://" + d.addr + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	return string(out)
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

// liveMaxAge reads NOTIFY's max age with the nats CLI.
func (b *bundle) liveMaxAge() time.Duration {
	b.t.Helper()
	var info struct {
		Config struct {
			MaxAge time.Duration `json:"max_age"`
		} `json:"config"`
	}
	out := b.mustRun("nats", "stream", "info", jetstream.StreamNotify, "--json")
	if err := json.Unmarshal([]byte(out), &info); err != nil {
		b.t.Fatalf("nats stream info --json: %v", err)
	}
	return info.Config.MaxAge
}

const (
	streamDrift   = `tgnotify_jetstream_drift{field="max_age",kind="stream",name="NOTIFY"} 1`
	consumerDrift = `tgnotify_jetstream_drift{field="ack_wait",kind="consumer",name="telegram-worker"} 1`
)

// TestOperatorEditSurvivesRestart: `tgnotify provision` creates the
// objects; during an incident an operator raises NOTIFY's max age and the
// consumer's ack wait with the nats CLI; restarting both daemons keeps both
// values, each daemon logs the drift and shows it on /metrics, and the
// worker keeps messages alive by the live ack wait. `tgnotify provision
// -dry-run` then shows what applying the declaration would undo, without
// undoing it.
func TestOperatorEditSurvivesRestart(t *testing.T) {
	b := setup(t)
	out := b.mustRun("tgnotify", "provision")
	for _, want := range []string{"created stream NOTIFY\n", "created consumer telegram-worker on NOTIFY\n", "created bucket notify_attempts\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("tgnotify provision on an empty server did not print %q", want)
		}
	}
	if out := b.mustRun("tgnotify", "provision"); !strings.HasPrefix(out, "up to date") {
		t.Errorf("a second tgnotify provision changed something:\n%s", out)
	}

	pub := b.start("publisher", "publisher")
	worker := b.start("telegram-worker", "telegram-worker")
	for _, d := range []*daemon{pub, worker} {
		if err := d.proc.WaitReady(context.Background(), "http://"+d.addr+"/healthz", 30*time.Second); err != nil {
			t.Fatal(err)
		}
		if m := d.metrics(); strings.Contains(m, "tgnotify_jetstream_drift{") {
			t.Fatalf("%s reports drift right after provisioning:\n%s", d.proc.Name(), m)
		}
	}

	b.mustRun("nats", "stream", "edit", jetstream.StreamNotify, "--max-age", "96h", "-f")
	b.mustRun("nats", "consumer", "edit", jetstream.StreamNotify, jetstream.ConsumerTelegram, "--wait", "20s", "-f")
	for _, d := range []*daemon{pub, worker} {
		if err := d.proc.Stop(); err != nil {
			t.Fatalf("stopping %s: %v", d.proc.Name(), err)
		}
	}
	pub = b.start("publisher", "publisher-restarted")
	worker = b.start("telegram-worker", "telegram-worker-restarted")
	b.waitFor("the restarted publisher to report the stream's drift", func() bool { return strings.Contains(pub.metrics(), streamDrift) })
	b.waitFor("the restarted worker to report both drifts", func() bool {
		m := worker.metrics()
		return strings.Contains(m, streamDrift) && strings.Contains(m, consumerDrift)
	})
	for _, d := range []*daemon{pub, worker} {
		if l := d.log(t); !logLine(l, `"msg":"JetStream configuration drift`, `"kind":"stream","name":"NOTIFY","field":"max_age","live":"96h","declared":"72h"`) {
			t.Errorf("%s does not log the stream's drift:\n%s", d.proc.Name(), l)
		}
	}
	if l := worker.log(t); !logLine(l, `"msg":"consumer ready"`, `"ack_wait":"20s"`) {
		t.Errorf("the worker does not keep messages alive by the live ack wait of 20s:\n%s", l)
	}
	if got := b.liveMaxAge(); got != 96*time.Hour {
		t.Fatalf("NOTIFY's max age after the restarts is %v, want the operator's 96h", got)
	}

	out = b.mustRun("tgnotify", "provision", "-dry-run")
	for _, want := range []string{"would update stream NOTIFY: max_age 96h -> 72h\n", "would update consumer telegram-worker on NOTIFY: ack_wait 20s -> 10s\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("tgnotify provision -dry-run did not print %q", want)
		}
	}
	if got := b.liveMaxAge(); got != 96*time.Hour {
		t.Fatalf("the dry run changed NOTIFY's max age to %v", got)
	}
	if out := b.mustRun("tgnotify", "provision"); !strings.Contains(out, "updated stream NOTIFY: max_age 96h -> 72h\n") {
		t.Errorf("tgnotify provision did not apply the declaration:\n%s", out)
	}
	if got := b.liveMaxAge(); got != jetstream.DefaultMaxAge {
		t.Errorf("NOTIFY's max age after tgnotify provision is %v, want the declared %v", got, jetstream.DefaultMaxAge)
	}
}

// TestDaemonsWithoutProvisionWait: with -provision=false on an empty
// server neither daemon creates anything; both say what they wait for, and
// both start once `tgnotify provision` has run.
func TestDaemonsWithoutProvisionWait(t *testing.T) {
	b := setup(t)
	pub := b.start("publisher", "publisher", "-provision=false")
	worker := b.start("telegram-worker", "telegram-worker", "-provision=false")
	for _, d := range []*daemon{pub, worker} {
		b.waitFor(d.proc.Name()+" to say what it waits for", func() bool {
			return strings.Contains(d.log(t), "not created because -provision=false; waiting until `tgnotify provision` creates them")
		})
	}
	for name := range b.js.StreamNames(context.Background()).Name() {
		t.Errorf("stream %s exists: with -provision=false the daemons must not create anything", name)
	}
	b.mustRun("tgnotify", "provision")
	if err := pub.proc.WaitReady(context.Background(), "http://"+pub.addr+"/readyz", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := worker.proc.WaitReady(context.Background(), "http://"+worker.addr+"/healthz", 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// TestProvisionRefusesAConflict: a NOTIFY made by hand with other subjects
// is not rewritten; tgnotify provision says what conflicts and exits 1.
func TestProvisionRefusesAConflict(t *testing.T) {
	b := setup(t)
	b.mustRun("nats", "stream", "add", jetstream.StreamNotify, "--subjects", "notify.telegram.>", "--storage", "file", "--defaults")
	code, out := b.run("tgnotify", "provision")
	want := "stream NOTIFY exists with subjects [notify.telegram.>], want [notify.>]: refusing to change it"
	if code != 1 || !strings.Contains(out, want) {
		t.Fatalf("exit %d, output:\n%s\nwant exit 1 and %q", code, out, want)
	}
}
