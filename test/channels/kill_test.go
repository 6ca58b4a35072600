package channels_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/mailpittest"
	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	botemulator "github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	maxemulator "github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
	smsemulator "github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

// provider is one channel's provider for the kill test: where the worker
// sends, what it is told to reach it, and what arrived there.
type provider struct {
	args []string
	env  []string
	// delivered returns the keys of the messages that arrived, in order,
	// by recipient token.
	delivered func() map[string][]string
	// notification returns the i-th notification to recipient r (0..).
	notification func(key string, r int) notify.Notification
}

var keyInText = regexp.MustCompile(`key=(\S+)`)

// keysOf extracts the keys from delivered texts, by recipient.
func keysOf(by map[string][]string) map[string][]string {
	out := map[string][]string{}
	for r, texts := range by {
		for _, t := range texts {
			if m := keyInText.FindStringSubmatch(t); m != nil {
				out[r] = append(out[r], m[1])
			}
		}
	}
	return out
}

// SIGKILL of each channel's worker while it delivers loses nothing, keeps
// each recipient's order, and sends a second copy only of what was in
// flight when it died: the documented window (WORKER.md), bounded by
// -max-in-flight.
func TestKillingAChannelWorkerLosesNothing(t *testing.T) {
	const recipients, each, inFlight = 6, 6, 4
	for _, channel := range []string{"telegram", "max", "email", "sms"} {
		t.Run(channel, func(t *testing.T) {
			dir := builtbin.Dir(t, channel+"-worker")
			srv := natstest.Start(t)
			_, js := srv.Connect(t)
			ctx := context.Background()
			// A short ack wait: the next worker waits for what the killed
			// one held until JetStream hands it back.
			decl := jetstream.DefaultSettings()
			decl.AckWait, decl.PinnedTTL = 3*time.Second, 2*time.Second
			if _, err := jetstream.Provision(ctx, js, jetstream.Declare(decl), false); err != nil {
				t.Fatal(err)
			}
			p := providerFor(t, channel)

			sup, err := procs.New(filepath.Join(t.TempDir(), "logs"), nil)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(sup.Close)
			startWorker := func(name string) (*procs.Process, string) {
				addr := procs.Addr(mustPort(t))
				args := append([]string{"-nats", srv.URL(), "-http", addr, "-max-in-flight", fmt.Sprint(inFlight),
					"-backoff-base", "50ms", "-backoff-cap", "500ms", "-shutdown-timeout", "1s"}, p.args...)
				w, err := sup.Start(procs.Spec{Name: name, Path: filepath.Join(dir, channel+"-worker"), Args: args, Env: p.env,
					Unset: system.CleanEnv()})
				if err != nil {
					t.Fatal(err)
				}
				if err := w.WaitReady(ctx, "http://"+addr+"/readyz", 30*time.Second); err != nil {
					t.Fatal(err)
				}
				return w, addr
			}
			first, _ := startWorker(channel + "-worker-1")

			var keys []string
			for i := range each {
				for r := range recipients {
					key := fmt.Sprintf("kill:%s:%d:%d", channel, r, i)
					keys = append(keys, key)
					n := p.notification(key, r)
					n.CreatedAt = time.Now().UTC()
					payload, err := n.MarshalPayload()
					if err != nil {
						t.Fatal(err)
					}
					n.Normalize()
					token, _ := n.Recipient(n.Route[0])
					if _, err := js.PublishMsg(ctx, jetstream.Msg(jetstream.Subject(channel, token), key, n.CreatedAt, notify.PayloadContentType, payload)); err != nil {
						t.Fatal(err)
					}
				}
			}
			count := func() int {
				n := 0
				for _, ks := range keysOf(p.delivered()) {
					n += len(ks)
				}
				return n
			}
			natstest.WaitFor(t, 60*time.Second, func() bool { return count() >= len(keys)/4 }, "a quarter delivered")
			first.Kill() // SIGKILL, requests in flight
			<-first.Done()
			startWorker(channel + "-worker-2")

			seen := func() map[string]int {
				m := map[string]int{}
				for _, ks := range keysOf(p.delivered()) {
					for _, k := range ks {
						m[k]++
					}
				}
				return m
			}
			natstest.WaitFor(t, 120*time.Second, func() bool { return len(seen()) == len(keys) }, "every notification delivered")
			extra := 0
			for k, n := range seen() {
				if n > 1 {
					extra += n - 1
					t.Logf("%s delivered %d times (in flight when the worker was killed)", k, n)
				}
			}
			if extra > inFlight {
				t.Fatalf("%d second copies, more than the %d requests that can be in flight at the kill", extra, inFlight)
			}
			for r, ks := range keysOf(p.delivered()) {
				last := -1
				for _, k := range ks {
					var i int
					if _, err := fmt.Sscanf(k[strings.LastIndex(k, ":")+1:], "%d", &i); err != nil {
						t.Fatal(err)
					}
					if i < last {
						t.Fatalf("recipient %s got %v: out of order", r, ks)
					}
					last = max(last, i)
				}
			}
		})
	}
}

func mustPort(t *testing.T) int {
	t.Helper()
	port, err := procs.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// providerFor starts the provider of channel with a little latency, so
// that requests are in flight when the worker dies.
func providerFor(t *testing.T, channel string) provider {
	t.Helper()
	text := func(key string) string { return "Order accepted key=" + key }
	switch channel {
	case "telegram":
		const token = "123456:kill-test_token"
		emu, err := botemulator.New(botemulator.Config{Token: token, Latency: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(emu)
		t.Cleanup(func() { emu.Close(); srv.Close() })
		return provider{
			args: []string{"-telegram-api", srv.URL, "-bot-rate", "300", "-chat-rate", "20"},
			env:  []string{"TELEGRAM_BOT_TOKEN=" + token},
			delivered: func() map[string][]string {
				by := map[string][]string{}
				for _, m := range emu.Messages() {
					by[fmt.Sprint(m.ChatID)] = append(by[fmt.Sprint(m.ChatID)], m.Text)
				}
				return by
			},
			notification: func(key string, r int) notify.Notification {
				return notify.Notification{Key: key, ChatID: int64(1000 + r), Text: text(key)}
			},
		}
	case "max":
		const token = "max-kill-test-token"
		emu, err := maxemulator.New(maxemulator.Config{Token: token, Latency: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(emu)
		t.Cleanup(func() { emu.Close(); srv.Close() })
		return provider{
			args: []string{"-max-api", srv.URL, "-bot-rate", "300", "-user-rate", "20"},
			env:  []string{"MAX_BOT_TOKEN=" + token},
			delivered: func() map[string][]string {
				by := map[string][]string{}
				for _, m := range emu.Messages() {
					by[fmt.Sprint(m.UserID)] = append(by[fmt.Sprint(m.UserID)], m.Text)
				}
				return by
			},
			notification: func(key string, r int) notify.Notification {
				return notify.Notification{Key: key, MaxUserID: int64(1000 + r), Text: text(key)}
			},
		}
	case "email":
		mp := mailpittest.Start(t, mailpittest.Options{})
		return provider{
			args: []string{"-smtp", mp.SMTPAddr, "-smtp-tls", "none", "-from", "Shop <noreply@shop.example>", "-rate", "300", "-recipient-per-minute", "1200"},
			delivered: func() map[string][]string {
				by := map[string][]string{}
				ms := mp.Messages()
				for i := len(ms) - 1; i >= 0; i-- { // newest first
					to := ms[i].To[0].Address
					by[to] = append(by[to], ms[i].Snippet)
				}
				return by
			},
			notification: func(key string, r int) notify.Notification {
				return notify.Notification{Key: key, Email: fmt.Sprintf("c%d@example.com", r), Text: text(key)}
			},
		}
	}
	emu, err := smsemulator.New(smsemulator.Config{AccountSID: accountSID, AuthToken: authToken, Latency: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() { emu.Close(); srv.Close() })
	return provider{
		args: []string{"-sms-api", srv.URL, "-from", sender, "-segments-per-second", "300", "-recipient-per-minute", "1200"},
		env:  []string{"TWILIO_ACCOUNT_SID=" + accountSID, "TWILIO_AUTH_TOKEN=" + authToken},
		delivered: func() map[string][]string {
			by := map[string][]string{}
			for _, m := range emu.Messages() {
				by[m.To] = append(by[m.To], m.Body)
			}
			return by
		},
		notification: func(key string, r int) notify.Notification {
			return notify.Notification{Key: key, Phone: fmt.Sprintf("+7999123%04d", r), Text: text(key)}
		},
	}
}
