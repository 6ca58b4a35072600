package shop_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

func publishEvent(t *testing.T, env *testenv.Env, subject, id string, v any) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	env.PublishRaw(subject, b, nats.Header{nats.MsgIdHdr: []string{id}})
}

func status(t *testing.T, b *bundle, id string) shop.NotificationStatus {
	t.Helper()
	p, err := b.svc.Order(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return p.Notification
}

// The shop follows the pipeline's events: GET /orders/{id} says how the
// notification arrived; a delivery is final whatever arrives after it; a
// dead Telegram chat is left out of the customer's next notifications.
func TestShopFollowsTheEvents(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- shop.NewEvents(b.svc, env.JS, jetstream.DefaultNames(), env.Log).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	o := order("E1")
	o.Email = "ann@example.com"
	if _, _, err := b.svc.PlaceOrder(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	if st := status(t, b, "E1"); st.Status != shop.StatusPending || st.At != nil {
		t.Fatalf("a new order's notification: %+v, want pending", st)
	}
	at := time.Now().UTC()
	key := shop.NotificationKey("E1")
	publishEvent(t, env, "notify.events.delivered", "delivered:"+key, shop.Event{Key: key, Event: "delivered", Channel: "email", At: at})
	// A fallback event stored after the delivery it led to changes nothing.
	publishEvent(t, env, "notify.events.fallback", "fallback:"+key, shop.Event{Key: key, Event: "fallback", Channel: "telegram", Next: "email", Reason: "blocked", At: at})
	publishEvent(t, env, "notify.events.recipient_dead", "rd:100", shop.RecipientEvent{Channel: "telegram", Recipient: "100", Reason: "blocked", At: at})
	publishEvent(t, env, "notify.events.delivered", "delivered:order:other", shop.Event{Key: "promo:1", Event: "delivered", Channel: "telegram", At: at})
	natstest.WaitFor(t, 10*time.Second, func() bool {
		dead, err := b.svc.TelegramUnavailable(context.Background(), 100)
		return err == nil && dead
	}, "chat 100 to be marked unavailable")
	if st := status(t, b, "E1"); st.Status != shop.StatusDelivered || st.Channel != "email" || st.At == nil {
		t.Fatalf("after a delivery by email and a late fallback event: %+v, want delivered by email", st)
	}

	// The next order of that customer goes to email first.
	o = order("E2")
	o.Email = "ann@example.com"
	if _, _, err := b.svc.PlaceOrder(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	rows, err := outbox.NewReader(b.db).Pending(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	last := rows[len(rows)-1]
	n, err := notify.DecodePayload(last.Payload)
	if err != nil {
		t.Fatal(err)
	}
	if last.Channel != notify.ChannelEmail || len(n.Route) != 1 || n.Route[0] != notify.ChannelEmail {
		t.Fatalf("the order after the chat was found dead goes to %s with route %v, want email only", last.Channel, n.Route)
	}

	// Every channel dead.
	o = order("E3")
	o.ChatID, o.Phone = 0, "+79991234567"
	if _, _, err := b.svc.PlaceOrder(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	k3 := shop.NotificationKey("E3")
	publishEvent(t, env, "notify.events.dead", "dead:"+k3, shop.Event{Key: k3, Event: "dead", Channel: "sms", Reason: "invalid_number", At: at})
	natstest.WaitFor(t, 10*time.Second, func() bool { return status(t, b, "E3").Status == shop.StatusDead }, "E3 dead")
	if st := status(t, b, "E3"); st.Channel != "sms" || st.Reason != "invalid_number" {
		t.Fatalf("dead: %+v", st)
	}
}

// A chat the pipeline revived (the customer unblocked the bot) is offered
// again: the customer's next notification goes to Telegram first.
func TestShopOffersARevivedChatAgain(t *testing.T) {
	env := testenv.New(t, testenv.Options{})
	b := setup(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- shop.NewEvents(b.svc, env.JS, jetstream.DefaultNames(), env.Log).Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	at := time.Now().UTC()
	publishEvent(t, env, "notify.events.recipient_dead", "rd:100", shop.RecipientEvent{Channel: "telegram", Recipient: "100", Reason: "blocked", At: at})
	publishEvent(t, env, "notify.events.recipient_revived", "rr:100", shop.RecipientEvent{Channel: "telegram", Recipient: "100", Reason: "unblocked", At: at})
	publishEvent(t, env, "notify.events.recipient_dead", "rd:101", shop.RecipientEvent{Channel: "telegram", Recipient: "101", Reason: "blocked", At: at})
	natstest.WaitFor(t, 10*time.Second, func() bool {
		dead, err := b.svc.TelegramUnavailable(context.Background(), 101)
		return err == nil && dead
	}, "chat 101 marked unavailable, after the events of chat 100")
	if dead, err := b.svc.TelegramUnavailable(context.Background(), 100); err != nil || dead {
		t.Fatalf("chat 100 after it was revived: unavailable %v, %v", dead, err)
	}
	o := order("R1")
	o.Email = "ann@example.com"
	if _, _, err := b.svc.PlaceOrder(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	rows, err := outbox.NewReader(b.db).Pending(context.Background(), 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if last := rows[len(rows)-1]; last.Channel != notify.ChannelTelegram {
		t.Fatalf("the order after the chat was revived goes to %s first, want telegram", last.Channel)
	}
}
