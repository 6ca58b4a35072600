package reliability_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

const emulatorToken = "123456789:RELIABILITY-test-token"

// pipeline is nats-server, the emulator and a telegram worker, all real
// processes.
type pipeline struct {
	sup         *procs.Supervisor
	natsURL     string
	emulatorURL string
	workerURL   string
	worker      *procs.Process
	js          natsjs.JetStream
}

func startPipeline(t *testing.T) *pipeline {
	t.Helper()
	p := &pipeline{sup: supervisor(t)}
	natsAddr, monAddr := freeAddr(t), freeAddr(t)
	_, natsPort, _ := strings.Cut(natsAddr, ":")
	_, monPort, _ := strings.Cut(monAddr, ":")
	start(t, p.sup, procs.Spec{Name: "nats-server", Path: bin(t, "nats-server"),
		Args: []string{"-js", "-sd", filepath.Join(t.TempDir(), "js"), "-a", "127.0.0.1", "-p", natsPort, "-m", monPort}},
		"http://"+monAddr+"/healthz?js-enabled-only=true")
	p.natsURL = "nats://" + natsAddr
	emuAddr := freeAddr(t)
	p.emulatorURL = "http://" + emuAddr
	start(t, p.sup, procs.Spec{Name: "botapi-emulator", Path: bin(t, "botapi-emulator"),
		Args: []string{"-http", emuAddr, "-token", emulatorToken, "-limits=false"}}, p.emulatorURL+"/emulator/healthz")
	workerAddr := freeAddr(t)
	p.workerURL = "http://" + workerAddr
	p.worker = start(t, p.sup, procs.Spec{Name: "telegram-worker", Path: bin(t, "telegram-worker"),
		Args: []string{"-nats", p.natsURL, "-telegram-api", p.emulatorURL, "-http", workerAddr, "-stats-interval", "200ms"},
		Env:  []string{"TELEGRAM_BOT_TOKEN=" + emulatorToken}}, p.workerURL+"/readyz")
	nc, err := nats.Connect(p.natsURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	if p.js, err = natsjs.New(nc); err != nil {
		t.Fatal(err)
	}
	return p
}

// natsPub publishes body to subject with the real CLI, waiting for the
// stream's acknowledgement.
func (p *pipeline) natsPub(t *testing.T, subject string, body []byte, headers ...string) {
	t.Helper()
	args := []string{"--server", p.natsURL, "pub", "--jetstream", "--no-templates", "--force-stdin"}
	for _, h := range headers {
		args = append(args, "-H", h)
	}
	args = append(args, subject)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin(t, "nats"), args...)
	cmd.Env = cleanEnviron([]string{"NATS_CONTEXT=", "HOME=" + t.TempDir()})
	cmd.Stdin = strings.NewReader(string(body))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nats pub %s: %v\n%s", subject, err, out)
	}
}

// payload is a valid notification payload for chat with key.
func payload(key string, chat int64, text string) []byte {
	return fmt.Appendf(nil, `{"v":1,"key":%q,"channel":"telegram","chat_id":%d,"text":%q,"created_at":%q}`,
		key, chat, text, time.Now().UTC().Format(time.RFC3339Nano))
}

// TestPoisonFromTheNATSCLIIsDeadLettered publishes malformed and oversized
// payloads straight onto notify.telegram.* with the real `nats` CLI, as
// someone publishing by hand would: the real worker dead-letters each as
// poison with the reason in its headers, without a request to Telegram, and
// goes on to deliver the next good notification once.
func TestPoisonFromTheNATSCLIIsDeadLettered(t *testing.T) {
	p := startPipeline(t)
	poison := []struct {
		name, subject string
		body          []byte
		headers       []string
		want          string // in Notify-Error-Description
	}{
		{"not JSON", "notify.telegram.100", []byte("order 17 shipped!"), nil, "malformed JSON"},
		{"fields missing", "notify.telegram.100", []byte(`{"v":1}`), nil, "created_at"},
		{"oversized", "notify.telegram.100", payload("cli:big", 100, strings.Repeat("x", 200<<10)), nil, "limit is"},
		{"newer version", "notify.telegram.100", []byte(`{"v":99,"key":"cli:v99","chat_id":100,"text":"x","created_at":"2026-01-01T00:00:00Z"}`), nil, "unsupported payload version"},
		{"chat does not match the subject", "notify.telegram.100", payload("cli:other-chat", 200, "x"), nil, "does not match subject"},
		{"key does not match the header", "notify.telegram.100", payload("cli:key", 100, "x"), []string{"Notify-Key:cli:another-key"}, "does not match payload key"},
		{"subject without a chat id", "notify.telegram.abc", payload("cli:abc", 100, "x"), nil, "notify.telegram.abc"},
		{"binary", "notify.telegram.100", []byte("\x00\xff\xfe{\"v\":1"), nil, "malformed JSON"},
	}
	for _, c := range poison {
		p.natsPub(t, c.subject, c.body, c.headers...)
	}
	p.natsPub(t, "notify.telegram.100", payload("cli:good", 100, "the good one"), "Notify-Key:cli:good")

	ctx := context.Background()
	var dead []system.DeadLetter
	natstest.WaitFor(t, 20*time.Second, func() bool {
		var err error
		dead, err = system.DeadLetters(ctx, p.js)
		return err == nil && len(dead) == len(poison)
	}, fmt.Sprintf("%d poison dead letters", len(poison)))
	for i, c := range poison {
		dl := dead[i]
		if dl.Reason != "poison" || !strings.Contains(dl.Description, c.want) {
			t.Errorf("%s: dead letter %d is %q: %q, want poison naming %q", c.name, dl.Seq, dl.Reason, dl.Description, c.want)
		}
		if want := "dead.notify.telegram.poison.abc"; c.subject == "notify.telegram.abc" && dl.Subject != want {
			t.Errorf("%s: dead letter on %s, want %s", c.name, dl.Subject, want)
		}
	}

	var msgs struct {
		Messages []emulator.Message `json:"messages"`
	}
	natstest.WaitFor(t, 20*time.Second, func() bool {
		code, body := get(p.emulatorURL + "/emulator/messages")
		return code == 200 && json.Unmarshal([]byte(body), &msgs) == nil && len(msgs.Messages) > 0
	}, "the good notification delivered")
	if len(msgs.Messages) != 1 || msgs.Messages[0].Text != "the good one" || msgs.Messages[0].ChatID != 100 {
		t.Fatalf("Telegram received %+v, want only the good notification", msgs.Messages)
	}
	var st emulator.Stats
	if code, body := get(p.emulatorURL + "/emulator/stats"); code != 200 || json.Unmarshal([]byte(body), &st) != nil || st.ByMethod["sendMessage"] != 1 {
		t.Fatalf("emulator stats %s: want exactly one sendMessage (poison costs no request)", body)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool {
		info, err := system.ConsumerInfo(ctx, p.js)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}, "the consumer drained")
	if code, body := get(p.workerURL + "/readyz"); code != 200 {
		t.Fatalf("worker /readyz = %d %s after the poison", code, body)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool {
		code, body := get(p.workerURL + "/metrics")
		return code == 200 && strings.Contains(body, `tgnotify_worker_dead_letters_total{channel="telegram",reason="poison"} `+strconv.Itoa(len(poison)))
	}, "the poison counted in /metrics")
	if err := p.worker.Stop(); err != nil {
		t.Fatalf("stopping the worker: %v", err)
	}
}
