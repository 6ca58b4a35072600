package telegram_test

import (
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/testenv"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// A notification with a button, and one with a photo and a button, go
// through the whole worker — JetStream, the engine, the channel, real HTTP
// — and reach the emulator as Telegram expects them: an inline keyboard of
// URL buttons on sendMessage, and sendPhoto with the text as its caption.
func TestButtonAndPhotoThroughTheWorker(t *testing.T) {
	t.Parallel()
	env := testenv.New(t, testenv.Options{})
	env.StartWorker(testenv.WorkerOptions{Config: delivery.Config{BackoffBase: 50 * time.Millisecond, BackoffCap: 200 * time.Millisecond}})

	track := [][]notify.Button{{{Text: "Track order", URL: "https://shop.example/orders/A1"}}}
	env.Publish(notify.Notification{Key: "order:A1:shipped", ChatID: 100, Text: "<b>Order A1</b> is on its way", ParseMode: notify.ParseModeHTML,
		Buttons: track, LinkPreview: notify.LinkPreview{Disabled: true}})
	env.Publish(notify.Notification{Key: "order:A1:delivered", ChatID: 100, Text: "Order A1 delivered &amp; signed for", ParseMode: notify.ParseModeHTML,
		Photo: "https://cdn.shop.example/proof/A1.jpg", Buttons: [][]notify.Button{{{Text: "Rate us", URL: "https://shop.example/rate/A1"}}}})
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Emu.ChatMessages(100)) == 2 }, "two messages in chat 100")

	ms := env.Emu.ChatMessages(100)
	text, photo := ms[0], ms[1]
	if text.Method != "sendMessage" || text.Text != "<b>Order A1</b> is on its way" || text.ParseMode != "HTML" ||
		len(text.Buttons) != 1 || len(text.Buttons[0]) != 1 || text.Buttons[0][0] != (emulator.Button{Text: "Track order", URL: "https://shop.example/orders/A1"}) ||
		text.LinkPreview == nil || !text.LinkPreview.IsDisabled {
		t.Errorf("the text message reached Telegram as %+v", text)
	}
	if photo.Method != "sendPhoto" || photo.Photo != "https://cdn.shop.example/proof/A1.jpg" || photo.Text != "Order A1 delivered &amp; signed for" ||
		len(photo.Buttons) != 1 || photo.Buttons[0][0] != (emulator.Button{Text: "Rate us", URL: "https://shop.example/rate/A1"}) {
		t.Errorf("the photo reached Telegram as %+v", photo)
	}
	if s := env.Emu.Stats(); s.ByMethod["sendMessage"] != 1 || s.ByMethod["sendPhoto"] != 1 {
		t.Errorf("by method %v, want one sendMessage and one sendPhoto", s.ByMethod)
	}
	natstest.WaitFor(t, 10*time.Second, func() bool { return len(env.Events(delivery.EventDelivered)) == 2 }, "two delivered events")
}
