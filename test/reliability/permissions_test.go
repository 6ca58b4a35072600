package reliability_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/mailpittest"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// natsUser is one user of configs/nats-server-auth.conf: its name (the
// inbox prefix is _INBOX_<name>), the variable holding its public key, and
// its seed file.
type natsUser struct {
	name, env, seed string
}

// args are the connection flags a daemon of this user runs with.
func (u natsUser) args(url string) []string {
	return []string{"-nats", url, "-nats-nkey", u.seed, "-nats-inbox-prefix", "_INBOX_" + u.name}
}

// connect connects as the user, logging on log.
func (u natsUser) connect(t *testing.T, url string, log *syncLog) *nats.Conn {
	t.Helper()
	nc, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: url, NKeyFile: u.seed, InboxPrefix: "_INBOX_" + u.name}, log.logger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	natstest.WaitFor(t, 10*time.Second, nc.IsConnected, u.name+" connected")
	return nc
}

// authServer starts the real bin/nats-server with the shipped
// nats-server.conf, its include of nats-server-auth.conf switched on as the
// file says, and one fresh nkey per user. It returns the client URL, the
// users by name and the server's process.
func authServer(t *testing.T, sup *procs.Supervisor) (string, map[string]natsUser, *procs.Process) {
	t.Helper()
	dir := t.TempDir()
	ports := make([]int, 2)
	for i := range ports {
		p, err := procs.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	conf := filepath.Join(dir, "nats-server.conf")
	if err := system.WriteNATSConfig("../../configs/nats-server.conf", conf, system.NATSConfig{ClientPort: ports[0], MonitorPort: ports[1], StoreDir: filepath.Join(dir, "jetstream")}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	const include = "# include ./nats-server-auth.conf"
	if !bytes.Contains(b, []byte(include)) {
		t.Fatalf("nats-server.conf has no line %q to switch the users on", include)
	}
	b = bytes.Replace(b, []byte(include), []byte(strings.TrimPrefix(include, "# ")), 1)
	if err := os.WriteFile(conf, b, 0o600); err != nil {
		t.Fatal(err)
	}
	auth, err := os.ReadFile("../../configs/nats-server-auth.conf")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nats-server-auth.conf"), auth, 0o600); err != nil {
		t.Fatal(err)
	}
	users := map[string]natsUser{}
	var env []string
	for _, name := range []string{"publisher", "telegram-worker", "max-worker", "email-worker", "sms-worker", "shop", "provision", "operator"} {
		seed, public := nkeySeedFile(t)
		u := natsUser{name: name, env: "NKEY_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_")), seed: seed}
		users[name] = u
		env = append(env, u.env+"="+public)
	}
	srv := start(t, sup, procs.Spec{Name: "nats-server", Path: bin(t, "nats-server"), Args: []string{"-c", conf}, Env: env},
		fmt.Sprintf("http://127.0.0.1:%d/healthz?js-enabled-only=true", ports[1]))
	return fmt.Sprintf("nats://127.0.0.1:%d", ports[0]), users, srv
}

// TestLeastPrivilegeEndToEnd runs the whole system against the real
// nats-server with the shipped least-privilege users: tgnotify provision
// creates the objects, and the shop, the publisher and the four channel
// workers each run under their own nkey user with -provision=false, against
// the emulators and Mailpit. An order to a reachable chat is delivered by
// the telegram worker; an order to a chat that blocked the bot falls back to
// email and is delivered through Mailpit; orders with only a MAX user or a
// phone are delivered by the MAX and SMS workers. No daemon is refused anything it needs (the server logs no
// permissions violation), and what a user may not do is refused with an
// error naming the subject: the shop publishing a notification, a worker
// deleting a stream, the shop provisioning.
func TestLeastPrivilegeEndToEnd(t *testing.T) {
	sup := supervisor(t)
	url, users, srv := authServer(t, sup)
	mail := mailpittest.Start(t, mailpittest.Options{})

	if r := runBinary(t, bin(t, "tgnotify"), nil, append([]string{"provision", "-log-level", "info"}, users["provision"].args(url)...)...); r.code != 0 {
		t.Fatalf("tgnotify provision as the provision user: exit %d\n%s", r.code, r.output)
	}

	const blocked = 200
	emuAddr := freeAddr(t)
	emuURL := "http://" + emuAddr
	start(t, sup, procs.Spec{Name: "botapi-emulator", Path: bin(t, "botapi-emulator"),
		Args: []string{"-http", emuAddr, "-token", emulatorToken, "-limits=false", "-blocked", fmt.Sprint(blocked)}}, emuURL+"/emulator/healthz")

	maxAddr, smsAddr := freeAddr(t), freeAddr(t)
	start(t, sup, procs.Spec{Name: "max-emulator", Path: bin(t, "max-emulator"), Args: []string{"-http", maxAddr, "-limits=false"}}, "http://"+maxAddr+"/emulator/healthz")
	start(t, sup, procs.Spec{Name: "sms-emulator", Path: bin(t, "sms-emulator"), Args: []string{"-http", smsAddr, "-limits=false"}}, "http://"+smsAddr+"/emulator/healthz")

	db := filepath.Join(t.TempDir(), "shop.db")
	shopAddr := freeAddr(t)
	shopProc := start(t, sup, procs.Spec{Name: "shop", Path: bin(t, "shop"),
		Args: append([]string{"-db", db, "-http", shopAddr}, users["shop"].args(url)...)}, "http://"+shopAddr+"/healthz")
	daemons := []*procs.Process{shopProc}
	for _, d := range []struct {
		user string
		args []string
		env  []string
	}{
		{"publisher", []string{"-db", db}, nil},
		{"telegram-worker", []string{"-telegram-api", emuURL, "-intake", "poll"}, []string{"TELEGRAM_BOT_TOKEN=" + emulatorToken}},
		{"email-worker", []string{"-smtp", mail.SMTPAddr, "-smtp-tls", "none", "-from", "Shop <noreply@shop.example>"}, nil},
		{"max-worker", []string{"-max-api", "http://" + maxAddr}, []string{"MAX_BOT_TOKEN=max-emulator-token"}},
		{"sms-worker", []string{"-sms-api", "http://" + smsAddr, "-from", "+15005550006"},
			[]string{"TWILIO_ACCOUNT_SID=AC00000000000000000000000000000000", "TWILIO_AUTH_TOKEN=emulator-auth-token"}},
	} {
		addr := freeAddr(t)
		args := append(append(d.args, "-http", addr, "-provision=false", "-log-level", "debug"), users[d.user].args(url)...)
		daemons = append(daemons, start(t, sup, procs.Spec{Name: d.user, Path: bin(t, d.user), Args: args, Env: d.env}, "http://"+addr+"/readyz"))
	}

	place := func(o shop.Order) {
		t.Helper()
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post("http://"+shopAddr+"/orders", "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
			t.Fatalf("placing order %s: status %d", o.ID, resp.StatusCode)
		}
	}
	items := []shop.Item{{Name: "Green tea", Qty: 1, PriceCents: 450}}
	place(shop.Order{ID: "P1", ChatID: 100, Customer: "Ann", Items: items})
	place(shop.Order{ID: "P2", ChatID: blocked, Email: "bob@shop.example", Customer: "Bob", Items: items})
	place(shop.Order{ID: "P3", MaxUserID: 4242, Customer: "Cid", Items: items})
	place(shop.Order{ID: "P4", Phone: "+447700900123", Customer: "Dee", Items: items})

	status := func(id string) shop.NotificationStatus {
		var o shop.PlacedOrder
		if code, body := get("http://" + shopAddr + "/orders/" + id); code == 200 {
			_ = json.Unmarshal([]byte(body), &o)
		}
		return o.Notification
	}
	for id, channel := range map[string]string{"P1": "telegram", "P2": "email", "P3": "max", "P4": "sms"} {
		natstest.WaitFor(t, 60*time.Second, func() bool {
			s := status(id)
			return s.Status == shop.StatusDelivered && s.Channel == channel
		}, fmt.Sprintf("order %s's notification delivered by %s, as the shop's events say", id, channel))
	}
	var msgs struct {
		Messages []emulator.Message `json:"messages"`
	}
	if code, body := get(emuURL + "/emulator/messages"); code != 200 || json.Unmarshal([]byte(body), &msgs) != nil || len(msgs.Messages) != 1 {
		t.Errorf("the emulator holds %d messages, want 1 (order P1)", len(msgs.Messages))
	}
	if got := mail.WaitForMessages(1, 10*time.Second); len(got) != 1 || len(got[0].To) != 1 || got[0].To[0].Address != "bob@shop.example" {
		t.Errorf("Mailpit holds %+v, want one message to bob@shop.example", got)
	}
	// Cancels under these users: the application cancels P1's published
	// row, and the publisher carries it to the workers (a cancel mark in
	// notify_delivered, the cancel_too_late event: P1 was delivered); the
	// operator's tgnotify cancel of P3 is too late as well.
	app, err := outbox.Open(context.Background(), db, outbox.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Close()
	if st, err := outbox.Cancel(context.Background(), app, shop.NotificationKeyFor("P1", "accepted")); err != nil || st != outbox.CancelledPublished {
		t.Fatalf("cancelling P1's row: %v, %v; want published", st, err)
	}
	natstest.WaitFor(t, 30*time.Second, func() bool {
		var r *string
		err := app.QueryRow(`SELECT cancel_result FROM outbox WHERE key = ?`, shop.NotificationKeyFor("P1", "accepted")).Scan(&r)
		return err == nil && r != nil && *r == outbox.CancelResultTooLate
	}, "the publisher to carry P1's cancel and find it too late")
	if r := runBinary(t, bin(t, "tgnotify"), nil, "cancel", "-nats", url, "-nats-nkey", users["operator"].seed,
		shop.NotificationKeyFor("P3", "accepted")); r.code != 3 || !strings.Contains(r.output, "too late") {
		t.Errorf("tgnotify cancel as the operator: exit %d, want 3 (too late):\n%s", r.code, r.output)
	}

	// The customer of chat 200 unblocks the bot: the telegram worker's
	// update intake (its lease and offset in notify_chats, the revive, the
	// recipient_revived event) revives the chat, and the next order to it
	// is delivered by Telegram.
	if code, body := post(emuURL + "/emulator/chats/200/user-unblock"); code != http.StatusOK {
		t.Fatalf("unblocking chat 200 in the emulator: %d %s", code, body)
	}
	var opLog syncLog
	opNC, err := jetstream.Connect(context.Background(), jetstream.Options{URLs: url, NKeyFile: users["operator"].seed}, opLog.logger()) // the nats CLI's _INBOX
	if err != nil {
		t.Fatal(err)
	}
	defer opNC.Close()
	opJS, err := natsjs.New(opNC)
	if err != nil {
		t.Fatal(err)
	}
	chats, err := opJS.KeyValue(context.Background(), jetstream.BucketChats)
	if err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, 30*time.Second, func() bool {
		_, err := chats.Get(context.Background(), "dead.200")
		return errors.Is(err, natsjs.ErrKeyNotFound)
	}, "chat 200 revived by the update intake")
	place(shop.Order{ID: "P6", ChatID: blocked, Customer: "Bob", Items: items})
	natstest.WaitFor(t, 60*time.Second, func() bool {
		s := status("P6")
		return s.Status == shop.StatusDelivered && s.Channel == "telegram"
	}, "order P6 delivered by Telegram to the revived chat")

	// A standby telegram worker under the same user takes over when the
	// active one is killed: the failover's ping, its answer, the unpin and
	// the takeover's reads of NOTIFY are all allowed; it waits for the intake's
	// lease.
	standbyAddr := freeAddr(t)
	standbyArgs := append([]string{"-telegram-api", emuURL, "-http", standbyAddr, "-provision=false", "-log-level", "debug", "-intake", "poll"}, users["telegram-worker"].args(url)...)
	standby := start(t, sup, procs.Spec{Name: "telegram-worker-standby", Path: bin(t, "telegram-worker"), Args: standbyArgs,
		Env: []string{"TELEGRAM_BOT_TOKEN=" + emulatorToken}}, "http://"+standbyAddr+"/readyz")
	daemons[2].Kill()
	daemons[2] = standby
	place(shop.Order{ID: "P5", ChatID: 101, Customer: "Eve", Items: items})
	natstest.WaitFor(t, 60*time.Second, func() bool {
		s := status("P5")
		return s.Status == shop.StatusDelivered && s.Channel == "telegram"
	}, "order P5 delivered by the standby telegram worker")
	if !strings.Contains(readLog(t, standby), "this worker takes over") {
		t.Errorf("the standby did not unpin the killed worker")
	}

	// A takeover reads a recipient's messages from NOTIFY's leader, and a
	// give-up the delivery record from notify_delivered's leader; the kill
	// above need not leave anything unacknowledged for the standby to read,
	// nor is anything given up on before a send here, so every channel's
	// worker user reads both once here.
	for _, channel := range []string{"telegram", "max", "email", "sms"} {
		var log syncLog
		nc := users[channel+"-worker"].connect(t, url, &log)
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := jetstream.NextMsg(rctx, nc, "", jetstream.StreamNotify, "notify."+channel+".1", 1)
		cancel()
		if err != nil {
			t.Errorf("%s-worker reading NOTIFY from its leader: %v", channel, jetstream.Denied(nc, err))
		}
		rctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
		_, err = jetstream.LastMsg(rctx, nc, "", "KV_"+jetstream.BucketDelivered, "$KV."+jetstream.BucketDelivered+".x")
		cancel()
		if err != nil {
			t.Errorf("%s-worker reading a delivery record from notify_delivered's leader: %v", channel, jetstream.Denied(nc, err))
		}
		nc.Close()
	}

	// The server logs "Publish Violation - Subject ..." and "Subscription
	// Violation - ..." for every refusal.
	if log := readLog(t, srv); strings.Contains(log, "Violation") {
		t.Errorf("the server refused a daemon something it needs; add it to nats-server-auth.conf:\n%s", grepLines(log, "Violation"))
	}

	t.Run("refused", func(t *testing.T) {
		ctx := context.Background()
		for _, tc := range []struct {
			user, subject string
			op            func(ctx context.Context, js natsjs.JetStream) error
		}{
			{"shop", "notify.telegram.1", func(ctx context.Context, js natsjs.JetStream) error {
				_, err := js.Publish(ctx, "notify.telegram.1", []byte(`{"v":1}`))
				return err
			}},
			{"telegram-worker", "$JS.API.STREAM.DELETE.NOTIFY", func(ctx context.Context, js natsjs.JetStream) error {
				return js.DeleteStream(ctx, jetstream.StreamNotify)
			}},
			{"publisher", "notify.events.delivered", func(ctx context.Context, js natsjs.JetStream) error {
				_, err := js.Publish(ctx, "notify.events.delivered", []byte(`{}`))
				return err
			}},
			{"email-worker", "dead.notify.telegram.blocked.1", func(ctx context.Context, js natsjs.JetStream) error {
				_, err := js.Publish(ctx, "dead.notify.telegram.blocked.1", []byte(`{}`))
				return err
			}},
		} {
			t.Run(tc.user+" "+tc.subject, func(t *testing.T) {
				var log syncLog
				nc := users[tc.user].connect(t, url, &log)
				js, err := natsjs.New(nc)
				if err != nil {
					t.Fatal(err)
				}
				octx, cancel := context.WithTimeout(ctx, 3*time.Second)
				defer cancel()
				err = jetstream.Denied(nc, tc.op(octx, js))
				var pe *jetstream.PermissionError
				if !errors.As(err, &pe) || pe.Subject != tc.subject {
					t.Fatalf("got %v, want a PermissionError naming %s", err, tc.subject)
				}
				natstest.WaitFor(t, 5*time.Second, func() bool { return strings.Contains(log.String(), tc.subject) }, "the refusal logged with its subject")
			})
		}
		// The operator's tool, run with the wrong user, says what was refused.
		r := runBinary(t, bin(t, "tgnotify"), nil, append([]string{"provision", "-timeout", "5s"}, users["shop"].args(url)...)...)
		if r.code == 0 || !strings.Contains(r.output, "permissions violation") || !strings.Contains(r.output, `"$JS.API.STREAM.INFO.NOTIFY"`) {
			t.Errorf("tgnotify provision as the shop: exit %d, want a failure naming $JS.API.STREAM.INFO.NOTIFY:\n%s", r.code, r.output)
		}
	})

	for _, p := range daemons {
		if err := p.Stop(); err != nil {
			t.Errorf("stopping %s: %v", p.Name(), err)
		}
		if strings.Contains(readLog(t, p), "refused an operation") {
			t.Errorf("%s was refused an operation:\n%s", p.Name(), grepLines(readLog(t, p), "refused"))
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
