package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/internal/useragent"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	maxemu "github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
	smsemu "github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

// world builds a consistent Observed by hand: orders, their outbox rows and
// stream messages in commit order, copies at the providers, dead letters,
// events and hand-overs to the next channel.
type world struct {
	t   *testing.T
	o   Observed
	now time.Time
	seq uint64
}

func newWorld(t *testing.T) *world {
	w := &world{t: t, now: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC),
		o: Observed{Placements: map[string]system.Placement{}, Worker: defaultWorker()}}
	w.o.Plan.DeadRecipients = map[string]map[string]string{"telegram": {}}
	for chat, reason := range startDead() {
		w.o.Plan.DeadRecipients["telegram"][fmt.Sprint(chat)] = reason
	}
	for _, ch := range system.Channels() {
		w.o.Backlogs = append(w.o.Backlogs, system.Backlog{Channel: ch})
	}
	return w
}

// order adds an accepted order to chat, committed (outbox id) in call order.
func (w *world) order(id string, chat int64) string { return w.orderWith(id, chat, Customer{}) }

// orderWith adds an accepted order to chat whose customer has the addresses
// of cu besides the chat.
func (w *world) orderWith(id string, chat int64, cu Customer) string {
	w.seq++
	po := PlannedOrder{Order: shop.Order{ID: id, ChatID: chat, Email: cu.Email, Phone: cu.Phone, MaxUserID: cu.MaxUserID}}
	w.o.Plan.Orders = append(w.o.Plan.Orders, po)
	w.o.Placements[id] = system.Placement{Created: 1, CreatedAt: w.at(0)}
	key := shop.NotificationKey(id)
	route := defaultRoute(po.Order)
	token := tokensOf(po.Order)[route[0]]
	w.o.Outbox = append(w.o.Outbox, system.OutboxRow{ID: int64(w.seq), Key: key, Channel: route[0], Token: token, Chat: chat,
		Route: route, CreatedAt: w.at(0), Published: true})
	w.o.Stream = append(w.o.Stream, system.StreamNotification{Seq: w.seq, Subject: "notify." + route[0] + "." + token,
		Channel: route[0], Recipient: token, Key: key, At: w.at(0)})
	return key
}

func (w *world) at(ms int) time.Time { return w.now.Add(time.Duration(ms) * time.Millisecond) }

// deliver records a Telegram copy of order id in chat at ms.
func (w *world) deliver(id string, chat int64, ms int, dropped bool) {
	w.deliverOn(id, "telegram", fmt.Sprint(chat), ms, dropped)
}

// deliverOn records a copy of order id by channel to recipient at ms.
func (w *world) deliverOn(id, channel, recipient string, ms int, dropped bool) {
	d := system.Delivery{Channel: channel, Recipient: recipient, OrderID: id, Key: shop.NotificationKey(id), At: w.at(ms), AnswerLost: dropped}
	if channel == "email" {
		d.Ref = email.MessageID(d.Key, messageIDDomain)
	}
	w.o.Deliveries = append(w.o.Deliveries, d)
	// The worker tells the application of the first copy.
	told := slices.ContainsFunc(w.o.Events, func(e system.Event) bool { return e.Key == d.Key && e.Event.Event == delivery.EventDelivered })
	if !told {
		w.o.Events = append(w.o.Events, system.Event{Event: delivery.Event{Key: d.Key, Event: delivery.EventDelivered, Channel: channel, Recipient: recipient, At: d.At}})
	}
}

// untold removes the delivered event of order id: the application was not
// told.
func (w *world) untold(id string) {
	key := shop.NotificationKey(id)
	w.o.Events = slices.DeleteFunc(w.o.Events, func(e system.Event) bool { return e.Key == key && e.Event.Event == delivery.EventDelivered })
}

// dead records a Telegram dead letter of order id; the order's last
// channel, so the dead event too.
func (w *world) dead(id string, chat int64, reason string, ms int) {
	w.deadOn(id, "telegram", fmt.Sprint(chat), reason, ms)
	w.deadEvent(id)
}

// deadOn records a dead letter of order id on channel.
func (w *world) deadOn(id, channel, recipient, reason string, ms int) {
	w.o.Dead = append(w.o.Dead, system.DeadLetter{Seq: uint64(len(w.o.Dead) + 1), Key: shop.NotificationKey(id),
		Subject: fmt.Sprintf("dead.notify.%s.%s.%s", channel, reason, recipient), Reason: reason, DeadAt: w.at(ms)})
}

// deadEvent records the dead event of order id.
func (w *world) deadEvent(id string) {
	w.o.Events = append(w.o.Events, system.Event{Event: delivery.Event{Key: shop.NotificationKey(id), Event: delivery.EventDead}})
}

// handOn records order id handed from one channel to the next at ms, to
// recipient.
func (w *world) handOn(id, from, to, recipient, reason string, ms int) {
	w.seq++
	w.o.Stream = append(w.o.Stream, system.StreamNotification{Seq: w.seq, Subject: "notify." + to + "." + recipient, Channel: to,
		Recipient: recipient, Key: shop.NotificationKey(id), At: w.at(ms), FallbackFrom: from, FallbackReason: reason})
}

func (w *world) kill(process string, ms int) {
	w.o.Kills = append(w.o.Kills, KillRecord{Process: process, At: w.at(ms)})
}

// failed returns the texts of the failed checks with their details.
func failed(r Result) []string {
	var out []string
	for _, c := range r.Checks {
		if !c.OK {
			out = append(out, c.Text+": "+strings.Join(c.Detail, " | "))
		}
	}
	return out
}

func TestEvaluateCleanRunPasses(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.order("G1", migratedGroup)
	w.order("D1", 3_000_003)
	mail := Customer{Email: "c2000003@mail.example"}
	w.orderWith("F1", 2_000_003, mail)
	w.deliver("A1", 2_000_001, 100, false)
	w.deliver("A2", 2_000_001, 1200, false)
	w.deliver("G1", supergroup, 300, false)
	w.dead("D1", 3_000_003, "deactivated", 50)
	tok := tokensOf(shop.Order{Email: mail.Email})["email"]
	w.handOn("F1", "telegram", "email", tok, "fallback_timeout", 12000)
	w.deadOn("F1", "telegram", "2000003", "fallback_timeout", 12001)
	w.deliverOn("F1", "email", tok, 12300, false)
	r := Evaluate(w.o)
	if f := failed(r); len(f) > 0 || !r.Passed() {
		t.Fatalf("clean run failed: %v", f)
	}
	f := r.Figures
	if f.Delivered != 4 || f.DeliveredOnce != 4 || f.DeadOrders != 1 || f.DeadByReason["deactivated"] != 1 ||
		f.DeliveredBy["telegram"] != 3 || f.DeliveredBy["email"] != 1 || f.Fallbacks["telegram→email fallback_timeout"] != 1 {
		t.Errorf("figures %+v", f)
	}
	if got := f.Latency; len(got) != 4 {
		t.Errorf("latencies %v, want 4", got)
	}
}

func TestEvaluateFallback(t *testing.T) {
	cu := Customer{Email: "c2000004@mail.example", Phone: "+15552000004", MaxUserID: 8_000_004}
	tokens := tokensOf(shop.Order{ChatID: 2_000_004, Email: cu.Email, Phone: cu.Phone, MaxUserID: cu.MaxUserID})
	tests := []struct {
		name  string
		setup func(w *world)
		want  string // in a failed check; empty: passes
	}{
		{"down the whole route to SMS", func(w *world) {
			w.deadOn("F1", "telegram", "2000004", "max_attempts", 100)
			w.handOn("F1", "telegram", "max", tokens["max"], "max_attempts", 100)
			w.deadOn("F1", "max", tokens["max"], "fallback_timeout", 200)
			w.handOn("F1", "max", "email", tokens["email"], "fallback_timeout", 200)
			w.deadOn("F1", "email", tokens["email"], "fallback_timeout", 300)
			w.handOn("F1", "email", "sms", tokens["sms"], "fallback_timeout", 300)
			w.deliverOn("F1", "sms", tokens["sms"], 400, false)
		}, ""},
		{"dead on every channel", func(w *world) {
			w.o.Plan.DeadRecipients["sms"] = map[string]string{tokens["sms"]: "unsubscribed"}
			for i, ch := range []string{"telegram", "max", "email"} {
				next := []string{"max", "email", "sms"}[i]
				w.deadOn("F1", ch, tokens[ch], "fallback_timeout", 100*i)
				w.handOn("F1", ch, next, tokens[next], "fallback_timeout", 100*i)
			}
			w.deadOn("F1", "sms", tokens["sms"], "unsubscribed", 400)
			w.deadEvent("F1")
		}, ""},
		{"dead without its dead event", func(w *world) {
			w.o.Plan.DeadRecipients["sms"] = map[string]string{tokens["sms"]: "unsubscribed"}
			for i, ch := range []string{"telegram", "max", "email"} {
				next := []string{"max", "email", "sms"}[i]
				w.deadOn("F1", ch, tokens[ch], "fallback_timeout", 100*i)
				w.handOn("F1", ch, next, tokens[next], "fallback_timeout", 100*i)
			}
			w.deadOn("F1", "sms", tokens["sms"], "unsubscribed", 400)
		}, "0 dead events, want 1"},
		{"a channel skipped", func(w *world) {
			w.deadOn("F1", "telegram", "2000004", "fallback_timeout", 100)
			w.deliverOn("F1", "email", tokens["email"], 400, false)
		}, "max neither delivered it nor gave up on it"},
		{"a reason the recipient does not call for", func(w *world) {
			w.deadOn("F1", "telegram", "2000004", "blocked", 100)
			w.handOn("F1", "telegram", "max", tokens["max"], "blocked", 100)
			w.deliverOn("F1", "max", tokens["max"], 400, false)
		}, "telegram gave up as blocked"},
		{"the last channel cannot time out", func(w *world) {
			for i, ch := range []string{"telegram", "max", "email"} {
				next := []string{"max", "email", "sms"}[i]
				w.deadOn("F1", ch, tokens[ch], "fallback_timeout", 100*i)
				w.handOn("F1", ch, next, tokens[next], "fallback_timeout", 100*i)
			}
			w.deadOn("F1", "sms", tokens["sms"], "fallback_timeout", 400)
			w.deadEvent("F1")
		}, "sms gave up as fallback_timeout"},
		{"delivered by two channels", func(w *world) {
			w.deliver("F1", 2_000_004, 100, false)
			w.deliverOn("F1", "email", tokens["email"], 400, false)
		}, "a copy by email, off its path"},
		{"handed on after a delivery, without a dead letter or a kill", func(w *world) {
			w.deliver("F1", 2_000_004, 100, false)
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 100)
		}, "without a dead letter, and no telegram worker was killed after"},
		{"given up after a delivery, found delivered by the next channel", func(w *world) {
			w.deliver("F1", 2_000_004, 100, false)
			w.deadOn("F1", "telegram", "2000004", "fallback_timeout", 200)
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 200)
		}, ""},
		{"given up after a delivery the application was not told of", func(w *world) {
			w.deliver("F1", 2_000_004, 100, false)
			w.untold("F1")
			w.deadOn("F1", "telegram", "2000004", "fallback_timeout", 200)
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 200)
		}, "max neither delivered it nor gave up on it"},
		{"given up after a delivery, and sent by the next channel too", func(w *world) {
			w.deliver("F1", 2_000_004, 100, false)
			w.deadOn("F1", "telegram", "2000004", "fallback_timeout", 200)
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 200)
			w.deliverOn("F1", "max", tokens["max"], 400, false)
		}, "delivered by telegram at 12:00:00.100, then it gave up as fallback_timeout"},
		{"handed twice to the next channel", func(w *world) {
			w.deadOn("F1", "telegram", "2000004", "fallback_timeout", 100)
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 100)
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 150)
			w.deliverOn("F1", "max", tokens["max"], 400, false)
		}, "handed to max more than once"},
		{"handed on without a dead letter after a kill", func(w *world) {
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 100)
			w.kill("worker-1", 120)
			w.deliverOn("F1", "max", tokens["max"], 400, false)
		}, ""},
		{"handed on without a dead letter, no kill", func(w *world) {
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 100)
			w.kill("sms-worker", 120)
			w.deliverOn("F1", "max", tokens["max"], 400, false)
		}, "without a dead letter, and no telegram worker was killed after"},
		{"an email with a Message-ID of its own", func(w *world) {
			w.deadOn("F1", "telegram", "2000004", "fallback_timeout", 100)
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 100)
			w.deadOn("F1", "max", tokens["max"], "fallback_timeout", 200)
			w.handOn("F1", "max", "email", tokens["email"], "fallback_timeout", 200)
			w.deliverOn("F1", "email", tokens["email"], 400, false)
			w.o.Deliveries[len(w.o.Deliveries)-1].Ref = "x@shop.example"
		}, "Message-ID x@shop.example"},
		{"to another recipient", func(w *world) {
			w.deadOn("F1", "telegram", "2000004", "fallback_timeout", 100)
			w.handOn("F1", "telegram", "max", tokens["max"], "fallback_timeout", 100)
			w.deliverOn("F1", "max", "u1", 400, false)
		}, "delivered by max to u1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.orderWith("F1", 2_000_004, cu)
			tt.setup(w)
			r := Evaluate(w.o)
			f := failed(r)
			if tt.want == "" {
				if len(f) > 0 {
					t.Fatalf("failed %v, want none", f)
				}
				if strings.Contains(tt.name, "found delivered") && !slices.Equal(r.Figures.FoundDelivered, []string{shop.NotificationKey("F1")}) {
					t.Errorf("FoundDelivered %v, want the order", r.Figures.FoundDelivered)
				}
				return
			}
			if !strings.Contains(strings.Join(f, "\n"), tt.want) {
				t.Fatalf("failed %v, want one mentioning %q", f, tt.want)
			}
		})
	}
}

func TestEvaluateDuplicates(t *testing.T) {
	tests := []struct {
		name   string
		setup  func(w *world)
		cause  string
		failed bool
	}{
		{"answer dropped", func(w *world) {
			w.deliver("A1", 2_000_001, 100, true)
			w.deliver("A1", 2_000_001, 900, false)
		}, CauseAnswerDropped, false},
		{"worker killed after the copy", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.kill("worker-1", 105)
			w.deliver("A1", 2_000_001, 6000, false)
		}, CauseWorkerKilled, false},
		{"request on the wire as the worker died", func(w *world) {
			w.kill("worker-2", 80)
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 6000, false)
		}, CauseWorkerKilled, false},
		{"request slowed by an outage as the worker died", func(w *world) {
			w.o.Outages = []OutageRecord{{Outage: emulator.Outage{Mode: emulator.FaultSlow, Probability: 0.5, Delay: 2 * time.Second},
				Start: w.at(-3000), End: w.at(500)}}
			w.kill("worker-2", -1500)
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 6000, false)
		}, CauseWorkerKilled, false},
		{"kill long before the copy explains nothing", func(w *world) {
			w.kill("worker-2", -1500)
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 6000, false)
		}, "", true},
		{"publisher kill explains nothing", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.kill(namePublisher, 200)
			w.deliver("A1", 2_000_001, 6000, false)
		}, "", true},
		{"kill after the second copy explains nothing", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 6000, false)
			w.kill("worker-1", 7000)
		}, "", true},
		{"no cause", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.deliver("A1", 2_000_001, 900, false)
		}, "", true},
		{"another channel's worker killed explains nothing", func(w *world) {
			w.deliver("A1", 2_000_001, 100, false)
			w.kill("email-worker", 105)
			w.deliver("A1", 2_000_001, 6000, false)
		}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.order("A1", 2_000_001)
			tt.setup(w)
			r := Evaluate(w.o)
			if got := len(failed(r)) > 0; got != tt.failed {
				t.Fatalf("failed = %v (%v), want %v", got, failed(r), tt.failed)
			}
			if tt.cause != "" && r.Figures.Duplicates[tt.cause] != 1 {
				t.Errorf("duplicates by cause %v, want one %q", r.Figures.Duplicates, tt.cause)
			}
		})
	}
}

func TestEvaluateDuplicatesAcrossChannels(t *testing.T) {
	cu := Customer{Email: "c2000001@mail.example"}
	tok := tokensOf(shop.Order{Email: cu.Email})["email"]
	tests := []struct {
		name   string
		setup  func(w *world)
		cause  string
		failed bool
	}{
		{"answer dropped, then the next channel", func(w *world) {
			w.deliver("M1", 2_000_001, 100, true)
			w.deadOn("M1", "telegram", "2000001", "fallback_timeout", 12000)
			w.handOn("M1", "telegram", "email", tok, "fallback_timeout", 12000)
			w.deliverOn("M1", "email", tok, 12100, false)
		}, CauseAnswerDropped, false},
		{"telegram worker killed after the copy, then the next channel", func(w *world) {
			w.deliver("M1", 2_000_001, 100, false)
			w.kill("worker-2", 110)
			w.deadOn("M1", "telegram", "2000001", "fallback_timeout", 12000)
			w.handOn("M1", "telegram", "email", tok, "fallback_timeout", 12000)
			w.deliverOn("M1", "email", tok, 12100, false)
		}, CauseWorkerKilled, false},
		{"Mailpit stopped after taking the message", func(w *world) {
			w.deadOn("M1", "telegram", "2000001", "fallback_timeout", 12000)
			w.handOn("M1", "telegram", "email", tok, "fallback_timeout", 12000)
			w.deliverOn("M1", "email", tok, 12100, false)
			w.o.MailpitRestarts = []MailpitRestart{{Hard: true, Down: w.at(12120), Up: w.at(15000)}}
			w.deliverOn("M1", "email", tok, 15200, false)
		}, CauseSMTPStopped, false},
		{"two emails, nothing between", func(w *world) {
			w.deadOn("M1", "telegram", "2000001", "fallback_timeout", 12000)
			w.handOn("M1", "telegram", "email", tok, "fallback_timeout", 12000)
			w.deliverOn("M1", "email", tok, 12100, false)
			w.deliverOn("M1", "email", tok, 15200, false)
		}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t)
			w.orderWith("M1", 2_000_001, cu)
			tt.setup(w)
			r := Evaluate(w.o)
			if got := len(failed(r)) > 0; got != tt.failed {
				t.Fatalf("failed = %v (%v), want %v", got, failed(r), tt.failed)
			}
			if tt.cause != "" && r.Figures.Duplicates[tt.cause] != 1 {
				t.Errorf("duplicates by cause %v, want one %q", r.Figures.Duplicates, tt.cause)
			}
		})
	}
}

func TestEvaluateOrder(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.order("B1", 2_000_002)
	w.deliver("A2", 2_000_001, 100, false) // overtook A1
	w.deliver("A1", 2_000_001, 1100, false)
	w.deliver("B1", 2_000_002, 50, false)
	r := Evaluate(w.o)
	if r.Figures.OrderViolations != 1 {
		t.Fatalf("order violations %d, want 1: %v", r.Figures.OrderViolations, failed(r))
	}
	if f := failed(r); len(f) != 1 || !strings.Contains(f[0], "commit order") {
		t.Errorf("failed checks %v, want only the order check", f)
	}
}

func TestEvaluateBlockedDuringTheRun(t *testing.T) {
	const chat = 2_000_005
	setup := func() *world {
		w := newWorld(t)
		w.o.Blocks = map[int64]time.Time{chat: w.at(500)}
		w.order("A1", chat)
		w.order("A2", chat)
		w.order("A3", chat)
		return w
	}
	t.Run("delivered before, dead after", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, false)
		w.dead("A2", chat, "blocked", 600)
		w.dead("A3", chat, "blocked", 700)
		if f := failed(Evaluate(w.o)); len(f) > 0 {
			t.Fatal(f)
		}
	})
	t.Run("delivered after a dead letter", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, false)
		w.dead("A2", chat, "blocked", 600)
		w.deliver("A3", chat, 700, false)
		if r := Evaluate(w.o); r.Figures.OrderViolations != 1 {
			t.Fatalf("order violations %d, want 1: %v", r.Figures.OrderViolations, failed(r))
		}
	})
	t.Run("delivered after a timeout moved an earlier one on", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, false)
		w.deadOn("A2", "telegram", fmt.Sprint(chat), "max_attempts", 400)
		w.deadEvent("A2")
		w.deliver("A3", chat, 450, false)
		if f := failed(Evaluate(w.o)); len(f) > 0 {
			t.Fatal(f)
		}
	})
	t.Run("wrong reason", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, false)
		w.dead("A2", chat, "kicked", 600)
		w.dead("A3", chat, "blocked", 700)
		if f := failed(Evaluate(w.o)); len(f) != 1 || !strings.Contains(f[0], "kicked") {
			t.Fatalf("failed %v, want the wrong reason named", f)
		}
	})
	t.Run("delivered then dead after a dropped answer", func(t *testing.T) {
		w := setup()
		w.deliver("A1", chat, 100, true)
		w.dead("A1", chat, "blocked", 600)
		w.dead("A2", chat, "blocked", 700)
		w.dead("A3", chat, "blocked", 800)
		r := Evaluate(w.o)
		if f := failed(r); len(f) > 0 {
			t.Fatal(f)
		}
		if r.Figures.DeliveredAndDead[CauseAnswerDropped] != 1 {
			t.Errorf("delivered and dead %v", r.Figures.DeliveredAndDead)
		}
	})
}

func TestEvaluateLostAndStray(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.deliver("A1", 2_000_001, 100, false)
	w.deliver("ZZ", 2_000_009, 100, false) // no such order
	w.o.Stream = append(w.o.Stream, system.StreamNotification{Seq: 99, Subject: "notify.telegram.2000001", Channel: "telegram",
		Recipient: "2000001", Key: shop.NotificationKey("A1")})
	w.o.Outbox[1].Published = false
	w.o.Backlogs[0].AckPending = 3
	f := strings.Join(failed(Evaluate(w.o)), "\n")
	for _, want := range []string{
		"A2:accepted (chat 2000001): telegram neither delivered it nor gave up on it",
		"1 unexpected",
		"stored 2 times in NOTIFY",
		"1 outbox rows still pending",
		"telegram 0 pending, 3 unacknowledged",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q:\n%s", want, f)
		}
	}
}

func TestEvaluateStreamOrder(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.o.Stream[0].Seq, w.o.Stream[1].Seq = 2, 1 // the publisher swapped them
	w.deliver("A1", 2_000_001, 100, false)
	w.deliver("A2", 2_000_001, 1100, false)
	f := failed(Evaluate(w.o))
	if len(f) != 1 || !strings.Contains(f[0], "1 reordered") {
		t.Fatalf("failed %v, want the stream order check", f)
	}
}

// tgUA is the User-Agent of the telegram worker with process id pid.
func tgUA(pid int) string { return useragent.Of("telegram-worker", pid) }

// A request inside a pause is explained only when every pause it was sent
// in was announced to a telegram worker killed after sending the answered
// request and before it could react to the 429: before the 429 was
// written, or within emulator.SenderReactionTime after.
func TestEvaluatePauseAnnouncedToAKilledWorker(t *testing.T) {
	const pid = 4242
	inPause := func(w *world, kill KillRecord, count int64) Result {
		w.order("A1", 2_000_001)
		w.deliver("A1", 2_000_001, 100, false)
		w.o.Kills = append(w.o.Kills, kill)
		w.o.Emulator.SentInAnyPause = count
		w.o.Emulator.SentInPauseRequests = []emulator.SentInPause{{
			ChatID: 2_000_002, Arrived: w.at(1500), PauseLeft: 2 * time.Second, UserAgent: tgUA(pid + 1),
			Openers: []emulator.PauseOpener{{ChatID: 2_000_001, Arrived: w.at(1000), Answered: w.at(1100), UserAgent: tgUA(pid)}},
		}}
		return Evaluate(w.o)
	}
	pauseFailed := func(r Result) bool {
		return slices.ContainsFunc(failed(r), func(f string) bool { return strings.Contains(f, "inside an announced 429 pause") })
	}

	w := newWorld(t)
	r := inPause(w, KillRecord{Process: workerName(0), Pid: pid, At: w.at(1050)}, 1)
	if pauseFailed(r) || r.Figures.SentInPauseToDeadSender != 1 {
		t.Errorf("killed between the request and its 429: failed %v, explained %d; want passed, 1", failed(r), r.Figures.SentInPauseToDeadSender)
	}
	w = newWorld(t)
	r = inPause(w, KillRecord{Process: workerName(0), Pid: pid, At: w.at(1100).Add(emulator.SenderReactionTime - time.Millisecond)}, 1)
	if pauseFailed(r) || r.Figures.SentInPauseToDeadSender != 1 {
		t.Errorf("killed %v after its 429 was written: failed %v, explained %d; want passed, 1",
			emulator.SenderReactionTime-time.Millisecond, failed(r), r.Figures.SentInPauseToDeadSender)
	}
	for name, tt := range map[string]struct {
		kill  KillRecord
		count int64
	}{
		"killed after the 429 was written": {KillRecord{Process: workerName(0), Pid: pid, At: w.at(1150)}, 1},
		"killed as it could have reacted":  {KillRecord{Process: workerName(0), Pid: pid, At: w.at(1100).Add(emulator.SenderReactionTime)}, 1},
		"killed before the request":        {KillRecord{Process: workerName(0), Pid: pid, At: w.at(900)}, 1},
		"another worker killed":            {KillRecord{Process: workerName(1), Pid: pid + 7, At: w.at(1050)}, 1},
		"the publisher killed":             {KillRecord{Process: namePublisher, Pid: pid, At: w.at(1050)}, 1},
		"more in pause than kept":          {KillRecord{Process: workerName(0), Pid: pid, At: w.at(1050)}, 2},
	} {
		w := newWorld(t)
		if r := inPause(w, tt.kill, tt.count); !pauseFailed(r) {
			t.Errorf("%s: the pause check passed", name)
		}
	}
}

// A request inside a pause is explained when the worker that sent it read
// the 429 and its log names the request's chat among those it had
// admitted before: it crossed the 429 on the wire, however late it
// arrived. Anything else about it fails the check.
func TestEvaluatePauseCrossedByAnAdmittedRequest(t *testing.T) {
	const pid = 4242
	inPause := func(w *world, sender int, crossings ...CrossingRecord) Result {
		w.order("A1", 2_000_001)
		w.deliver("A1", 2_000_001, 100, false)
		w.o.Crossings = crossings
		w.o.Emulator.SentInAnyPause = 1
		w.o.Emulator.SentInPauseRequests = []emulator.SentInPause{{
			ChatID: 2_000_002, Arrived: w.at(1110), PauseLeft: 2 * time.Second, UserAgent: tgUA(sender),
			Openers: []emulator.PauseOpener{{ChatID: 2_000_001, Arrived: w.at(1000), Answered: w.at(1100), UserAgent: tgUA(pid)}},
		}}
		return Evaluate(w.o)
	}
	pauseFailed := func(r Result) bool {
		return slices.ContainsFunc(failed(r), func(f string) bool { return strings.Contains(f, "inside an announced 429 pause") })
	}
	logged := func(p int, at time.Time, recipient string, crossed ...string) CrossingRecord {
		return CrossingRecord{Process: workerName(0), Pid: p, At: at, Recipient: recipient, Crossed: crossed}
	}

	w := newWorld(t)
	r := inPause(w, pid, logged(pid, w.at(1105), "2000001", "2000007", "2000002"))
	if pauseFailed(r) || r.Figures.SentInPauseCrossed != 1 || r.Figures.SentInPauseToDeadSender != 0 {
		t.Errorf("admitted before the 429 was read: failed %v, crossed %d; want passed, 1", failed(r), r.Figures.SentInPauseCrossed)
	}
	// An earlier 429 of the same chat says nothing about this one.
	w = newWorld(t)
	if r := inPause(w, pid, logged(pid, w.at(400), "2000001", "2000002"), logged(pid, w.at(1105), "2000001", "2000007")); !pauseFailed(r) {
		t.Error("named by an earlier 429 only: the pause check passed")
	}
	for name, tt := range map[string]struct {
		sender int
		logged CrossingRecord
	}{
		"not named":                          {pid, CrossingRecord{Process: workerName(0), Pid: pid, At: time.Time{}, Recipient: "2000001", Crossed: []string{"2000007"}}},
		"named by another process":           {pid, CrossingRecord{Process: workerName(0), Pid: pid + 1, Recipient: "2000001", Crossed: []string{"2000002"}}},
		"named for another chat's 429":       {pid, CrossingRecord{Process: workerName(0), Pid: pid, Recipient: "2000009", Crossed: []string{"2000002"}}},
		"sent by a worker that did not read": {pid + 1, CrossingRecord{Process: workerName(1), Pid: pid, Recipient: "2000001", Crossed: []string{"2000002"}}},
		"nothing logged":                     {pid, CrossingRecord{}},
	} {
		w := newWorld(t)
		if tt.logged.At.IsZero() {
			tt.logged.At = w.at(1105)
		}
		if r := inPause(w, tt.sender, tt.logged); !pauseFailed(r) {
			t.Errorf("%s: the pause check passed", name)
		}
	}
}

// MAX's and SMS's requests inside a pause are explained as Telegram's:
// crossed, by the max or sms worker's log naming the recipient (an SMS
// recipient by the hash of the number, as the worker logs it), or sent in
// a pause announced to a killed worker. Anything else fails the check,
// and so does a request the emulator counted but could not describe.
func TestEvaluatePauseOnMAXAndSMS(t *testing.T) {
	const pid = 5151
	phone, other := "+79990000001", "+79990000002"
	type setup struct {
		sender    int
		crossings []CrossingRecord
		kills     []KillRecord
		count     int64
	}
	maxRun := func(w *world, s setup) Result {
		w.order("A1", 2_000_001)
		w.deliver("A1", 2_000_001, 100, false)
		w.o.Crossings, w.o.Kills = s.crossings, s.kills
		w.o.MaxEmulator.SentInPause = s.count
		w.o.MaxEmulator.SentInPauseRequests = []maxemu.SentInPause{{
			Endpoint: maxemu.EndpointSend, Recipient: "u8000002", Arrived: w.at(1110), PauseLeft: time.Second,
			UserAgent: useragent.Of("max-worker", s.sender),
			Openers: []maxemu.PauseOpener{{Endpoint: maxemu.EndpointSend, Recipient: "u8000001", Arrived: w.at(1000), Answered: w.at(1100),
				UserAgent: useragent.Of("max-worker", pid)}},
		}}
		return Evaluate(w.o)
	}
	smsRun := func(w *world, s setup) Result {
		w.order("A1", 2_000_001)
		w.deliver("A1", 2_000_001, 100, false)
		w.o.Crossings, w.o.Kills = s.crossings, s.kills
		w.o.SMSEmulator.InPause = s.count
		w.o.SMSEmulator.InPauseRequests = []smsemu.InPauseRequest{{
			To: other, Arrived: w.at(1110), PauseLeft: time.Second, UserAgent: useragent.Of("sms-worker", s.sender),
			Opener: smsemu.PauseOpener{To: phone, Arrived: w.at(1000), Answered: w.at(1100), UserAgent: useragent.Of("sms-worker", pid)},
		}}
		return Evaluate(w.o)
	}
	pauseFailed := func(r Result) bool {
		return slices.ContainsFunc(failed(r), func(f string) bool { return strings.Contains(f, "inside an announced 429 pause") })
	}
	crossedMax := CrossingRecord{Process: "max-worker", Pid: pid, Recipient: "u8000001", Crossed: []string{"u8000007", "u8000002"}}
	crossedSMS := CrossingRecord{Process: "sms-worker", Pid: pid, Recipient: phoneRecipient(phone), Crossed: []string{phoneRecipient(other)}}
	for _, tc := range []struct {
		name    string
		run     func(*world, setup) Result
		channel string
		crossed CrossingRecord
	}{
		{"max", maxRun, "max", crossedMax},
		{"sms", smsRun, "sms", crossedSMS},
	} {
		w := newWorld(t)
		c := tc.crossed
		c.At = w.at(1105)
		r := tc.run(w, setup{sender: pid, crossings: []CrossingRecord{c}, count: 1})
		if pauseFailed(r) || r.Figures.PauseCrossed[tc.channel] != 1 {
			t.Errorf("%s: crossed the 429: failed %v, crossed %d; want passed, 1", tc.name, failed(r), r.Figures.PauseCrossed[tc.channel])
		}
		w = newWorld(t)
		r = tc.run(w, setup{sender: pid + 1, kills: []KillRecord{{Process: channelWorkerName(tc.channel), Pid: pid, At: w.at(1050)}}, count: 1})
		if pauseFailed(r) || r.Figures.PauseDeadSender[tc.channel] != 1 {
			t.Errorf("%s: 429 to a killed worker: failed %v, dead sender %d; want passed, 1", tc.name, failed(r), r.Figures.PauseDeadSender[tc.channel])
		}
		for name, s := range map[string]func(w *world) setup{
			"nothing logged": func(*world) setup { return setup{sender: pid, count: 1} },
			"sent by the next process": func(w *world) setup {
				c := tc.crossed
				c.At = w.at(1105)
				return setup{sender: pid + 1, crossings: []CrossingRecord{c}, count: 1}
			},
			"killed after it could react": func(w *world) setup {
				return setup{sender: pid + 1, kills: []KillRecord{{Process: channelWorkerName(tc.channel), Pid: pid, At: w.at(1150)}}, count: 1}
			},
			"a Telegram worker killed": func(w *world) setup {
				return setup{sender: pid + 1, kills: []KillRecord{{Process: workerName(0), Pid: pid, At: w.at(1050)}}, count: 1}
			},
			"more counted than described": func(w *world) setup {
				c := tc.crossed
				c.At = w.at(1105)
				return setup{sender: pid, crossings: []CrossingRecord{c}, count: 2}
			},
		} {
			w := newWorld(t)
			if r := tc.run(w, s(w)); !pauseFailed(r) {
				t.Errorf("%s: %s: the pause check passed", tc.name, name)
			}
		}
	}
}

// readCrossings reads each worker process's 429s from the logs, with the
// pid of the configuration line before them; it skips a line it cannot
// read unless it is one of those it needs, and fails on that.
func TestReadCrossings(t *testing.T) {
	dir := t.TempDir()
	log := `--- procs 2026-12-04T21:22:34.319060929Z: starting /work/main/bin/telegram-worker -nats x
time=2026-12-04T21:22:34.347Z level=INFO msg=configuration daemon=telegram-worker pid=101 settings.http="127.0.0.1:35193 (flag)"
time=2026-12-04T21:22:39.000Z level=INFO msg="a line cut short by a SIGK
time=2026-12-04T21:22:40.100Z level=WARN msg="rate limit hit: pausing every request" daemon=telegram-worker retry_after=3s recipient=2002860 key=order:S1:accepted crossing=0 in_flight_with=""
--- procs 2026-12-04T21:23:00.000000000Z: starting /work/main/bin/telegram-worker -nats x
time=2026-12-04T21:23:00.050Z level=INFO msg=configuration daemon=telegram-worker pid=202 settings.http="127.0.0.1:35193 (flag)"
time=2026-12-04T21:23:49.276Z level=WARN msg="rate limit hit: pausing every request" daemon=telegram-worker retry_after=1s recipient=2001529 key="order:S \"2\":accepted" crossing=1 in_flight_with=2000280,2000350
`
	if err := os.WriteFile(filepath.Join(dir, "worker-2.log"), []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "publisher.log"), []byte("time=x msg=\"unrelated\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	maxLog := `time=2026-12-04T21:24:00.000Z level=INFO msg=configuration daemon=max-worker pid=303
time=2026-12-04T21:24:01.500Z level=WARN msg="rate limit hit: pausing every request" daemon=max-worker component=max-worker retry_after=1s recipient=u8001431 key=order:S3:accepted crossing=1 in_flight_with=u8001063
`
	if err := os.WriteFile(filepath.Join(dir, "max-worker.log"), []byte(maxLog), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readCrossings(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := []CrossingRecord{
		{Process: "worker-2", Pid: 101, At: time.Date(2026, 12, 4, 21, 22, 40, 100e6, time.UTC), Recipient: "2002860"},
		{Process: "worker-2", Pid: 202, At: time.Date(2026, 12, 4, 21, 23, 49, 276e6, time.UTC), Recipient: "2001529", Crossed: []string{"2000280", "2000350"}},
		{Process: "max-worker", Pid: 303, At: time.Date(2026, 12, 4, 21, 24, 1, 500e6, time.UTC), Recipient: "u8001431", Crossed: []string{"u8001063"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("readCrossings = %+v\nwant %+v", got, want)
	}

	// A line it cannot read is an error that names it, not a silent skip.
	bad := "time=2026-12-04T21:22:34.347Z level=INFO msg=configuration pid=7\ntime=2026-12-04T21:22:40.100Z msg=\"rate limit hit: pausing every request\" recipient=\"unterminated\n"
	if err := os.WriteFile(filepath.Join(dir, "worker-1.log"), []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readCrossings(dir); err == nil || !strings.Contains(err.Error(), "worker-1.log: line 2") {
		t.Fatalf("readCrossings of a broken line: %v, want an error naming worker-1.log line 2", err)
	}
}

// A delivered order without a delivered event fails the run: the
// application never hears of it.
func TestEvaluateDeliveredWithoutEvent(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_001)
	w.deliver("A1", 2_000_001, 100, false)
	w.deliver("A2", 2_000_001, 1100, false)
	if f := failed(Evaluate(w.o)); len(f) != 0 {
		t.Fatalf("both told: failed %v", f)
	}
	w.untold("A2")
	f := failed(Evaluate(w.o))
	if len(f) != 1 || !strings.Contains(f[0], "1 without a delivered event") || !strings.Contains(f[0], shop.NotificationKey("A2")) {
		t.Fatalf("failed %v, want the events check naming A2", f)
	}
}

func TestEvaluatePausesAndBreaker(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.deliver("A1", 2_000_001, 100, false)
	w.o.Emulator.SentInAnyPause = 1
	w.o.MaxEmulator.SentInPause = 2
	ws := w.o.Worker
	lives := []time.Duration{5 * time.Second}
	bound := breakerBound(ws, lives)
	if want := int64(ws.MaxInFlight + ws.BreakerFailures - 1 + 1 + 2); bound != want {
		t.Fatalf("bound %d, want %d", bound, want)
	}
	w.o.Outages = []OutageRecord{
		{Outage: emulator.Outage{Mode: emulator.Fault5xx, Probability: 1}, Failing: bound + 1, Lives: lives},
		{Outage: emulator.Outage{Mode: emulator.Fault5xx, Probability: 0.5}, Failing: 1000, Lives: lives}, // no bound
		{Outage: emulator.Outage{Mode: emulator.FaultSlow, Probability: 1}, Failing: 1000, Lives: lives},  // no bound
	}
	f := strings.Join(failed(Evaluate(w.o)), "\n")
	if !strings.Contains(f, "sent_in_any_pause 1") || !strings.Contains(f, "MAX sent_in_pause 2") {
		t.Errorf("a request inside a pause passed:\n%s", f)
	}
	if !strings.Contains(f, fmt.Sprintf("%d failed calls, the breaker allows %d", bound+1, bound)) || strings.Contains(f, "1000 failed") {
		t.Errorf("breaker check:\n%s", f)
	}
}

func TestEvaluatePlacementsAndProcesses(t *testing.T) {
	w := newWorld(t)
	w.order("A1", 2_000_001)
	w.deliver("A1", 2_000_001, 100, false)
	w.o.Plan.Orders = append(w.o.Plan.Orders, PlannedOrder{Order: shop.Order{ID: "A2", ChatID: 2_000_001}})
	w.o.Placements["A2"] = system.Placement{Errors: []string{"HTTP 500"}}
	w.o.Failures = []string{"publisher (pid 7) ended unexpectedly: exit status 1"}
	w.o.Leftovers = []string{"shop (pid 9)"}
	f := strings.Join(failed(Evaluate(w.o)), "\n")
	for _, want := range []string{"A2: HTTP 500", "ended unexpectedly", "still running: shop (pid 9)"} {
		if !strings.Contains(f, want) {
			t.Errorf("failures lack %q:\n%s", want, f)
		}
	}
}

// A run's record, saved as JSON and read back, gives the same verdict and
// figures: -recheck can evaluate a run again without running it.
func TestRecordRoundTrip(t *testing.T) {
	w := newWorld(t)
	w.o.Blocks = map[int64]time.Time{2_000_002: w.at(50)}
	w.order("A1", 2_000_001)
	w.order("B1", 2_000_002)
	w.deliver("A1", 2_000_001, 100, true)
	w.deliver("A1", 2_000_001, 900, false)
	w.dead("B1", 2_000_002, "blocked", 60)
	w.kill("worker-1", 2000)
	w.o.Outages = []OutageRecord{{Outage: emulator.Outage{Mode: emulator.FaultSlow, Probability: 1, Delay: time.Second, Duration: 3 * time.Second},
		Start: w.at(0), End: w.at(3000), Lives: []time.Duration{3 * time.Second}}}
	dir := t.TempDir()
	rec := Record{Config: ShortConfig(), Observed: w.o, Elapsed: time.Minute}
	if err := rec.save(dir + "/" + recordFile); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	got, err := Recheck(dir, &out)
	if err != nil {
		t.Fatal(err)
	}
	want := Evaluate(w.o)
	if got.Passed() != want.Passed() || fmt.Sprint(got.Figures) != fmt.Sprint(want.Figures) {
		t.Fatalf("recheck differs:\n got %+v\nwant %+v", got.Figures, want.Figures)
	}
	if !strings.Contains(out.String(), "RESULT: PASS") {
		t.Errorf("the recheck report:\n%s", out.String())
	}
}

// The report's silences: the longest stretch of the fault phase without any
// delivery while an order waited, with the faults under way; a cluster
// run's faults are summed up.
func TestEvaluateSilencesAndClusterFigures(t *testing.T) {
	w := newWorld(t)
	w.o.FaultStart, w.o.FaultEnd = w.at(0), w.at(20000)
	// Both orders are committed at 0; A1 is delivered at 1000, A2 only at
	// 9000: 8 s without any delivery while A2 waited.
	w.order("A1", 2_000_001)
	w.order("A2", 2_000_002)
	w.deliver("A1", 2_000_001, 1000, false)
	w.deliver("A2", 2_000_002, 9000, false)
	w.o.ClusterFaults = []ClusterFault{
		{Kind: KillNode, Node: "n2", WasLeader: true, Start: w.at(1500), End: w.at(3500), Leader: "n1", Elected: 5 * time.Second},
		{Kind: StepDown, Target: "NOTIFY", Node: "n1", WasLeader: true, Start: w.at(15000), End: w.at(15001), Leader: "n3", Elected: 150 * time.Millisecond},
		{Kind: Partition, Node: "n3", Clients: "refuse", Start: w.at(16000), End: w.at(19000)},
	}
	w.o.Plan.Events = []Event{{Kind: KillNode}}
	w.o.NATSRestarts = []NATSRestart{{Node: "n1", Hard: true, Down: w.at(17000), Up: w.at(18000)}}
	r := Evaluate(w.o)
	if f := failed(r); len(f) > 0 {
		t.Fatalf("checks failed: %v", f)
	}
	s := r.Figures.Silences
	if len(s) != 1 || s[0].Duration() != 8*time.Second || s[0].Offset != time.Second || s[0].Waiting != 1 {
		t.Fatalf("silences %+v, want one of 8s at +1s with 1 waiting", s)
	}
	if got := strings.Join(s[0].During, ", "); got != "kill node n2 (NOTIFY's leader)" {
		t.Errorf("faults during the silence: %q", got)
	}
	cl := r.Figures.Cluster
	if cl == nil || cl.NodeKills != 1 || cl.LeaderKills != 1 || cl.NodeRestarts != 1 || cl.HardRestarts != 1 ||
		cl.Partitions["clients refuse"] != 1 || cl.StepDowns["NOTIFY"] != 1 ||
		len(cl.Elections) != 1 || cl.Elections[0] != 5*time.Second || len(cl.StepDownElections) != 1 {
		t.Errorf("cluster figures %+v", cl)
	}
}
