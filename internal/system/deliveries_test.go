package system_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/internal/system"
	botemu "github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	maxemu "github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/smstext"
	smsemu "github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

func TestDeliveriesFindTheOrder(t *testing.T) {
	o := shop.Order{ID: "A-1", Customer: "Ann", Items: []shop.Item{{Name: "Tea <green>", Qty: 2, PriceCents: 350}}}
	html := shop.AcceptedMessage(o)
	key := shop.NotificationKey(o.ID)
	at := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	var got []system.Delivery
	got = append(got, system.TelegramDeliveries([]botemu.Message{{ChatID: 42, MessageID: 7, Text: html, Time: at, ResponseDropped: true}})...)
	got = append(got, system.MaxDeliveries([]maxemu.Message{{MessageID: "mid.1", Recipient: maxemu.User(9), Text: html, Time: at}})...)
	got = append(got, system.SMSDeliveries([]smsemu.Message{{SID: "SM1", To: "+15550000001", Body: smstext.Fit(html, smstext.MarkupHTML, 2), Time: at}})...)
	got = append(got, system.EmailDeliveries([]system.Mail{{MessageID: "order.A-1.accepted.x@shop.example", Subject: "Order A-1 accepted",
		To: []system.MailAddress{{Address: "Ann@Mail.example"}}, Created: at}})...)
	want := []struct{ channel, recipient string }{
		{"telegram", "42"}, {"max", "u9"}, {"sms", "p" + notify.HashAddress("+15550000001")}, {"email", "e" + notify.HashAddress("ann@mail.example")},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d deliveries, want %d", len(got), len(want))
	}
	for i, d := range got {
		if d.Channel != want[i].channel || d.Recipient != want[i].recipient || d.OrderID != "A-1" || d.Key != key || !d.At.Equal(at) {
			t.Errorf("delivery %d: got %+v, want channel %s, recipient %s, order A-1", i, d, want[i].channel, want[i].recipient)
		}
	}
	if !got[0].AnswerLost || got[1].AnswerLost {
		t.Error("AnswerLost does not follow the record's response_dropped")
	}
	stranger := system.TelegramDeliveries([]botemu.Message{{ChatID: 1, Text: "<b>Orders shipped</b>"}})
	if stranger[0].OrderID != "" {
		t.Errorf("a message of no order: got order %q, want none", stranger[0].OrderID)
	}
}

func TestMailpitMessagesReadsEveryPageOldestFirst(t *testing.T) {
	const total = 2345
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start, _ := strconv.Atoi(r.URL.Query().Get("start"))
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		var page []system.Mail
		for i := start; i < min(start+limit, total); i++ {
			page = append(page, system.Mail{ID: fmt.Sprint(total - i)}) // newest first, as Mailpit lists
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"total": total, "messages": page})
	}))
	defer srv.Close()
	mails, err := system.MailpitMessages(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if len(mails) != total || mails[0].ID != "1" || mails[total-1].ID != fmt.Sprint(total) {
		t.Fatalf("got %d messages from %v to %v, want %d from 1 to %d", len(mails), mails[0].ID, mails[len(mails)-1].ID, total, total)
	}
}
