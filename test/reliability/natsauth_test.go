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

	"github.com/nats-io/nats-server/v2/server"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

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

// TestDaemonsConnectLikeTheNATSClients starts the built daemons with the
// connection settings of the NATS ecosystem's clients: NATS_URL and
// NATS_CREDS alone (decentralized JWT authentication), an nkey seed file
// (-nats-nkey), and a `nats` CLI context saved by the real bin/nats (named by
// NATS_CONTEXT). Each connects, its start-up log says where the URL and the
// credentials came from, and no secret is in it.
func TestDaemonsConnectLikeTheNATSClients(t *testing.T) {
	natsCLI := bin(t, "nats")
	sup := supervisor(t)
	// publisher starts bin/publisher on an empty outbox with env and args,
	// waits until it is ready (connected and draining) and returns its log.
	publisher := func(t *testing.T, name string, env []string, args ...string) string {
		t.Helper()
		addr := freeAddr(t)
		args = append([]string{"-db", filepath.Join(t.TempDir(), "app.db"), "-http", addr}, args...)
		p := start(t, sup, procs.Spec{Name: name, Path: bin(t, "publisher"), Args: args, Env: env}, "http://"+addr+"/readyz")
		if err := p.Stop(); err != nil {
			t.Fatalf("stopping the publisher: %v", err)
		}
		return readLog(t, p)
	}

	t.Run("NATS_URL and NATS_CREDS alone", func(t *testing.T) {
		op := natstest.NewOperator(t)
		srv := natstest.Start(t, op.Option())
		log := publisher(t, "publisher-creds-env", []string{"NATS_URL=" + srv.URL(), "NATS_CREDS=" + op.Creds})
		for _, want := range []string{`url_from="env NATS_URL"`, `auth="credentials file ` + op.Creds + `"`, `auth_from="env NATS_CREDS"`} {
			if !strings.Contains(log, want) {
				t.Errorf("the log lacks %s:\n%s", want, log)
			}
		}
		if strings.Contains(log, credsSeed(t, op.Creds)) {
			t.Fatal("the log shows the credentials' nkey seed")
		}
	})

	seedFile, public := nkeySeedFile(t)
	srv := natstest.Start(t, natstest.WithOptions(func(o *server.Options) { o.Nkeys = []*server.NkeyUser{{Nkey: public}} }))
	seed, err := os.ReadFile(seedFile)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("an nkey seed file", func(t *testing.T) {
		log := publisher(t, "publisher-nkey", nil, "-nats", srv.URL(), "-nats-nkey", seedFile)
		if want := `auth="nkey seed file ` + seedFile + `" auth_from="flag -nats-nkey"`; !strings.Contains(log, want) {
			t.Errorf("the log lacks %s:\n%s", want, log)
		}
		if strings.Contains(log, strings.TrimSpace(string(seed))) {
			t.Fatal("the log shows the nkey seed")
		}
	})

	t.Run("a nats CLI context", func(t *testing.T) {
		xdg := t.TempDir()
		env := []string{"XDG_CONFIG_HOME=" + xdg}
		// The CLI reads NATS_* too: a clean environment, so the context
		// holds what the flags say and nothing of the developer's.
		if r := runBinary(t, natsCLI, env, "context", "save", "tgnotify-test", "--server", srv.URL(), "--nkey", seedFile); r.code != 0 {
			t.Fatalf("nats context save: exit %d\n%s", r.code, r.output)
		}
		path := filepath.Join(xdg, "nats", "context", "tgnotify-test.json")
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the CLI did not write the context where the daemons look: %v", err)
		}
		log := publisher(t, "publisher-context", append(env, "NATS_CONTEXT=tgnotify-test"))
		from := "context tgnotify-test (" + path + ")"
		for _, want := range []string{`url_from="` + from + `"`, `auth="nkey seed file ` + seedFile + `" auth_from="` + from + `"`} {
			if !strings.Contains(log, want) {
				t.Errorf("the log lacks %s:\n%s", want, log)
			}
		}
		// The operator's command reads the same context.
		r := runBinary(t, bin(t, "tgnotify"), env, "provision", "-nats-context", "tgnotify-test", "-dry-run")
		if r.code != 0 || !strings.Contains(r.output, srv.URL()) {
			t.Errorf("tgnotify provision with the context: exit %d\n%s", r.code, r.output)
		}
	})
}

// nkeySeedFile creates a user nkey, writes its seed to a file readable only
// by its owner and returns the file and the public key.
func nkeySeedFile(t *testing.T) (string, string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	seed, err := kp.Seed()
	if err != nil {
		t.Fatal(err)
	}
	public, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "user.nk")
	if err := os.WriteFile(path, seed, 0o600); err != nil {
		t.Fatal(err)
	}
	return path, public
}
