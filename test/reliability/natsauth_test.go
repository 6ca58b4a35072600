package reliability_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// TestPublisherOverMutualTLSWithCredentials runs bin/publisher against a
// server that requires both a client certificate and a user credentials
// file (decentralized JWT authentication): the outbox drains into NOTIFY,
// and the user's nkey seed appears nowhere in the publisher's log.
func TestPublisherOverMutualTLSWithCredentials(t *testing.T) {
	op := natstest.NewOperator(t)
	certs := natstest.NewCerts(t)
	srv := natstest.Start(t, op.Option(), natstest.WithTLS(t, certs, true))
	url := strings.Replace(srv.URL(), "nats://", "tls://", 1)
	secure := jetstream.Options{URLs: url, CredsFile: op.Creds, TLSCA: certs.CA, TLSCert: certs.ClientCert, TLSKey: certs.ClientKey}

	ctx := context.Background()
	dbPath := filepath.Join(t.TempDir(), "app.db")
	db, err := outbox.Open(ctx, dbPath, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	const rows = 25
	for i := range rows {
		if _, err := outbox.Enqueue(ctx, tx, notify.Notification{Key: fmt.Sprintf("tls:%d", i), ChatID: 100, Text: "hello"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}

	sup := supervisor(t)
	addr := freeAddr(t)
	pub := start(t, sup, procs.Spec{Name: "publisher", Path: bin(t, "publisher"), Args: []string{
		"-db", dbPath, "-http", addr, "-nats", url, "-nats-creds", op.Creds,
		"-nats-tls-ca", certs.CA, "-nats-tls-cert", certs.ClientCert, "-nats-tls-key", certs.ClientKey, "-log-level", "debug",
	}}, "http://"+addr+"/readyz")

	nc, err := jetstream.Connect(ctx, secure, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 20*time.Second, func() bool {
		qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		n, err := system.NotificationsInStream(qctx, js)
		return err == nil && n == rows
	}, fmt.Sprintf("%d notifications in NOTIFY over TLS", rows))
	if err := pub.Stop(); err != nil {
		t.Fatalf("stopping the publisher: %v", err)
	}
	if seed := credsSeed(t, op.Creds); strings.Contains(readLog(t, pub), seed) {
		t.Fatal("the publisher's log shows the credentials' nkey seed")
	}
}

// TestWorkerOverTLSWithPassword runs bin/telegram-worker against a server
// that requires TLS and a user and password, the password in
// TELEGRAM_WORKER_NATS_PASSWORD: with a wrong password it does not get in
// and says so without showing it; with the right one it delivers.
func TestWorkerOverTLSWithPassword(t *testing.T) {
	const user, password, wrong = "worker", "nats-pw-4b1d9", "nats-wrong-77e0"
	certs := natstest.NewCerts(t)
	srv := natstest.Start(t, natstest.WithTLS(t, certs, false), natstest.WithUserPassword(user, password))
	sup := supervisor(t)
	emuAddr := freeAddr(t)
	emuURL := "http://" + emuAddr
	start(t, sup, procs.Spec{Name: "botapi-emulator", Path: bin(t, "botapi-emulator"),
		Args: []string{"-http", emuAddr, "-token", emulatorToken, "-limits=false"}}, emuURL+"/emulator/healthz")

	worker := func(name, pw string) (*procs.Process, string) {
		addr := freeAddr(t)
		p, err := sup.Start(procs.Spec{Name: name, Path: bin(t, "telegram-worker"), Unset: system.CleanEnv(),
			Args: []string{"-nats", srv.URL(), "-nats-user", user, "-nats-tls-ca", certs.CA,
				"-telegram-api", emuURL, "-http", addr, "-log-level", "debug"},
			Env: []string{"TELEGRAM_BOT_TOKEN=" + emulatorToken, "TELEGRAM_WORKER_NATS_PASSWORD=" + pw}})
		if err != nil {
			t.Fatal(err)
		}
		return p, "http://" + addr
	}

	refused, _ := worker("worker-wrong-password", wrong)
	natstest.WaitFor(t, 20*time.Second, func() bool { return strings.Contains(readLog(t, refused), "Authorization Violation") }, "the refusal logged")
	if err := refused.Stop(); err != nil {
		t.Fatalf("stopping the refused worker: %v", err)
	}
	if log := readLog(t, refused); strings.Contains(log, wrong) || strings.Contains(log, password) {
		t.Fatalf("the refused worker's log shows a password:\n%s", log)
	}

	w, url := worker("worker", password)
	if err := w.WaitReady(context.Background(), url+"/readyz", 30*time.Second); err != nil {
		t.Fatal(err)
	}
	nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: srv.URL(), TLSCA: certs.CA, User: user, Password: password}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := notify.Notification{Key: "tls:worker", ChatID: 100, Text: "over TLS", CreatedAt: time.Now()}
	b, err := n.MarshalPayload()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.PublishMsg(context.Background(), jetstream.NotificationMsg(100, n.Key, n.CreatedAt, notify.PayloadContentType, b)); err != nil {
		t.Fatal(err)
	}
	var msgs struct {
		Messages []emulator.Message `json:"messages"`
	}
	natstest.WaitFor(t, 20*time.Second, func() bool {
		code, body := get(emuURL + "/emulator/messages")
		return code == 200 && json.Unmarshal([]byte(body), &msgs) == nil && len(msgs.Messages) == 1
	}, "the notification delivered")
	for _, path := range []string{"/metrics", "/stats", "/readyz"} {
		if _, body := get(url + path); strings.Contains(body, password) {
			t.Errorf("%s shows the NATS password", path)
		}
	}
	if err := w.Stop(); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(readLog(t, w), password) {
		t.Fatal("the worker's log shows the NATS password")
	}
}

// credsSeed returns the nkey seed line of a credentials file.
func credsSeed(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); strings.HasPrefix(line, "SU") {
			return line
		}
	}
	t.Fatalf("no nkey seed in %s", path)
	return ""
}
