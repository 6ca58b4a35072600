package reliability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
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
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// secretToken is the bot token of these tests, in Telegram's format. Its
// second half must never appear anywhere either.
const (
	secretToken = "987654321:AAF-secret_Token-0123456789abcdefXYZ"
	secretHalf  = "AAF-secret_Token-0123456789abcdefXYZ"
)

// leaks returns where the token appears in text, if anywhere.
func leaks(text string) bool {
	return strings.Contains(text, secretToken) || strings.Contains(text, secretHalf)
}

// TestWorkerNeverExposesTheToken runs bin/telegram-worker with a real bot
// token against bin/botapi-emulator and takes the API through every
// failure: 5xx pages, dropped connections, answers that never come, a token
// rejected with 401 while running, and an API that cannot be reached. The
// token must appear in no log line (debug level), and in none of /metrics,
// /stats, /readyz and /healthz.
func TestWorkerNeverExposesTheToken(t *testing.T) {
	sup := supervisor(t)
	srv := natstest.Start(t)
	emuAddr := freeAddr(t)
	emuURL := "http://" + emuAddr
	emulatorWith := func(name, token string) *procs.Process {
		return start(t, sup, procs.Spec{Name: name, Path: bin(t, "botapi-emulator"),
			Args: []string{"-http", emuAddr, "-token", token, "-limits=false"}}, emuURL+"/emulator/healthz")
	}
	emu := emulatorWith("emulator-1", secretToken)

	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(secretToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	workerAddr := freeAddr(t)
	workerURL := "http://" + workerAddr
	worker := start(t, sup, procs.Spec{Name: "telegram-worker", Path: bin(t, "telegram-worker"), Args: []string{
		"-nats", srv.URL(), "-telegram-api", emuURL, "-http", workerAddr, "-token-file", tokenFile,
		"-log-level", "debug", "-request-timeout", "1s", "-backoff-base", "100ms", "-backoff-cap", "500ms",
		"-breaker-open", "1s", "-token-probe", "300ms", "-max-attempts", "1000", "-stats-interval", "200ms",
	}}, workerURL+"/readyz")

	nc, err := nats.Connect(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	publish := func() {
		t.Helper()
		n++
		note := notify.Notification{Key: "secret:" + strings.Repeat("x", n), ChatID: 100, Text: "order accepted", CreatedAt: time.Now()}
		b, err := note.MarshalPayload()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.PublishMsg(context.Background(), jetstream.NotificationMsg(100, note.Key, note.CreatedAt, notify.PayloadContentType, b)); err != nil {
			t.Fatal(err)
		}
	}
	control := func(method, path, body string) {
		t.Helper()
		req, err := http.NewRequest(method, emuURL+path, bytes.NewReader([]byte(body)))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s %s: %s", method, path, resp.Status)
		}
	}
	logHas := func(s string) func() bool {
		return func() bool { return strings.Contains(readLog(t, worker), s) }
	}

	publish()
	natstest.WaitFor(t, 10*time.Second, logHas(`msg=delivered`), "a delivery")
	for _, o := range []struct{ mode, want string }{
		{"5xx", "reason=server"}, {"json5xx", "Internal Server Error"}, {"drop", "reason=network"}, {"blackhole", "reason=timeout"},
	} {
		control(http.MethodPost, "/emulator/outage", `{"mode":"`+o.mode+`"}`)
		publish()
		natstest.WaitFor(t, 15*time.Second, logHas(o.want), o.mode+" failures logged")
		control(http.MethodDelete, "/emulator/outage", "")
	}

	// The token is revoked: another emulator on the same address accepts
	// only another token, so the next request gets 401.
	if err := emu.Stop(); err != nil {
		t.Fatal(err)
	}
	emu = emulatorWith("emulator-2", "111:another-token")
	publish()
	natstest.WaitFor(t, 20*time.Second, func() bool {
		code, body := get(workerURL + "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "401")
	}, "/readyz to report the rejected token")
	natstest.WaitFor(t, 10*time.Second, logHas("credentials still rejected"), "a getMe probe rejected")

	// And then the API cannot be reached at all.
	if err := emu.Stop(); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 10*time.Second, logHas("connection refused"), "probes failing to connect")

	var stats map[string]any
	_, statsBody := get(workerURL + "/stats")
	if err := json.Unmarshal([]byte(statsBody), &stats); err != nil || stats["token_rejected"] != true {
		t.Errorf("/stats = %s, want token_rejected true", statsBody)
	}
	for _, path := range []string{"/metrics", "/stats", "/readyz", "/healthz"} {
		if _, body := get(workerURL + path); leaks(body) {
			t.Errorf("%s shows the token:\n%s", path, body)
		}
	}
	if _, body := get(workerURL + "/metrics"); !strings.Contains(body, "tgnotify_worker_token_rejected 1") {
		t.Errorf("/metrics lacks tgnotify_worker_token_rejected 1")
	}
	if err := worker.Stop(); err != nil {
		t.Fatalf("stopping the worker: %v", err)
	}
	if log := readLog(t, worker); leaks(log) {
		t.Fatalf("the worker's log shows the token:\n%s", log)
	}
}

// TestWorkerStartRefusalsDoNotShowTheToken starts bin/telegram-worker with a
// token the API rejects (it must stop with a clear error) and with an API
// that cannot be reached (it must start anyway): neither says the token.
func TestWorkerStartRefusalsDoNotShowTheToken(t *testing.T) {
	sup := supervisor(t)
	emuAddr := freeAddr(t)
	start(t, sup, procs.Spec{Name: "botapi-emulator", Path: bin(t, "botapi-emulator"),
		Args: []string{"-http", emuAddr, "-token", "111:another-token"}}, "http://"+emuAddr+"/emulator/healthz")
	env := []string{"TELEGRAM_BOT_TOKEN=" + secretToken}

	r := runBinary(t, bin(t, "telegram-worker"), env, "-nats", "nats://"+freeAddr(t), "-telegram-api", "http://"+emuAddr,
		"-http", freeAddr(t), "-log-level", "debug")
	if r.code == 0 || !strings.Contains(r.output, "telegram rejected the credentials") {
		t.Fatalf("exit %d, want a refusal naming the rejected token:\n%s", r.code, r.output)
	}
	if leaks(r.output) {
		t.Fatalf("the refusal shows the token:\n%s", r.output)
	}

	srv := natstest.Start(t)
	addr := freeAddr(t)
	w := start(t, sup, procs.Spec{Name: "telegram-worker", Path: bin(t, "telegram-worker"), Env: env, Args: []string{
		"-nats", srv.URL(), "-telegram-api", closedURL(t), "-http", addr, "-log-level", "debug", "-request-timeout", "1s",
	}}, "http://"+addr+"/healthz")
	if !strings.Contains(readLog(t, w), "cannot check the credentials now") {
		t.Errorf("the worker did not say it could not check the token:\n%s", readLog(t, w))
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if log := readLog(t, w); leaks(log) {
		t.Fatalf("the worker's log shows the token:\n%s", log)
	}
}
