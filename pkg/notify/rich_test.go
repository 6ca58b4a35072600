package notify_test

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// richNotification has every kind of rich content.
func richNotification() notify.Notification {
	n := validNotification()
	n.Email, n.Phone = "ann@example.com", "+79991234567"
	n.ParseMode = notify.ParseModeHTML
	n.Text = "<b>Order A1 accepted</b>"
	n.Buttons = [][]notify.Button{
		{{Text: "Track order", URL: "https://shop.example/orders/A1"}, {Text: "Bot", URL: "tg://resolve?domain=shop_bot"}},
		{{Text: "Help", URL: "http://shop.example/help"}},
	}
	n.MessageThreadID = 7
	n.LinkPreview = notify.LinkPreview{URL: "https://shop.example/orders/A1", PreferLargeMedia: true, ShowAboveText: true}
	n.Bodies = notify.Bodies{
		Max:   &notify.MaxBody{Text: "<b>Order A1 accepted</b>", Format: notify.MaxFormatHTML},
		Email: &notify.EmailBody{HTML: "<p>Order A1 accepted</p>", Text: "Order A1 accepted"},
		SMS:   &notify.SMSBody{Text: "Order A1 accepted"},
	}
	return n
}

func TestRichAccepted(t *testing.T) {
	cases := map[string]func(*notify.Notification){
		"everything": func(*notify.Notification) {},
		"photo with a caption": func(n *notify.Notification) {
			n.LinkPreview = notify.LinkPreview{}
			n.Photo = "https://shop.example/a1.jpg"
			n.Text = strings.Repeat("я", notify.MaxCaptionLength)
		},
		"a long text with a photo off Telegram": func(n *notify.Notification) {
			n.ChatID, n.MessageThreadID, n.LinkPreview = 0, 0, notify.LinkPreview{}
			n.Photo = "https://shop.example/a1.jpg"
			n.Text = strings.Repeat("я", notify.MaxCaptionLength+1)
		},
		"preview disabled": func(n *notify.Notification) { n.LinkPreview = notify.LinkPreview{Disabled: true} },
		"a MAX body frees Telegram's text from MAX's limit": func(n *notify.Notification) {
			n.MaxUserID = 42
			n.Text = strings.Repeat("x", notify.MaxTextLength)
		},
		"eight buttons a row on Telegram": func(n *notify.Notification) {
			n.Buttons = [][]notify.Button{buttons(notify.MaxButtonsPerRow)}
		},
		"a hundred buttons": func(n *notify.Notification) {
			n.Buttons = nil
			for range notify.MaxButtons / 5 {
				n.Buttons = append(n.Buttons, buttons(5))
			}
		},
		"longest label": func(n *notify.Notification) {
			n.Buttons = [][]notify.Button{{{Text: strings.Repeat("ю", notify.MaxButtonTextLength), URL: "https://a.example"}}}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			n := richNotification()
			mutate(&n)
			if err := n.Validate(); err != nil {
				t.Fatalf("Validate = %v, want nil", err)
			}
		})
	}
}

func buttons(n int) []notify.Button {
	row := make([]notify.Button, n)
	for i := range row {
		row[i] = notify.Button{Text: fmt.Sprint("b", i), URL: fmt.Sprintf("https://shop.example/%d", i)}
	}
	return row
}

func TestRichRejected(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*notify.Notification)
		field  string
		reason string
	}{
		{"javascript button", func(n *notify.Notification) { n.Buttons[0][1].URL = "javascript:alert(1)" }, "buttons[0][1].url", `scheme "javascript" is not allowed`},
		{"ftp button", func(n *notify.Notification) { n.Buttons[1][0].URL = "ftp://shop.example/x" }, "buttons[1][0].url", "want an http, https or tg URL"},
		{"relative button", func(n *notify.Notification) { n.Buttons[0][0].URL = "/orders/A1" }, "buttons[0][0].url", "not absolute"},
		{"button without host", func(n *notify.Notification) { n.Buttons[0][0].URL = "https:///x" }, "buttons[0][0].url", "needs a host"},
		{"button with user info", func(n *notify.Notification) { n.Buttons[0][0].URL = "https://me:pw@shop.example" }, "buttons[0][0].url", "no user info"},
		{"button with a space", func(n *notify.Notification) { n.Buttons[0][0].URL = "https://shop.example/a b" }, "buttons[0][0].url", "spaces"},
		{"button with an empty URL", func(n *notify.Notification) { n.Buttons[0][0].URL = "" }, "buttons[0][0].url", "is empty"},
		{"long button URL", func(n *notify.Notification) {
			n.Buttons[0][0].URL = "https://shop.example/" + strings.Repeat("x", notify.MaxURLBytes)
		}, "buttons[0][0].url", "the limit is 2048"},
		{"empty label", func(n *notify.Notification) { n.Buttons[0][0].Text = " " }, "buttons[0][0].text", "empty"},
		{"long label", func(n *notify.Notification) { n.Buttons[0][0].Text = strings.Repeat("x", 65) }, "buttons[0][0].text", "the limit is 64"},
		{"two-line label", func(n *notify.Notification) { n.Buttons[0][0].Text = "a\nb" }, "buttons[0][0].text", "one line"},
		{"empty row", func(n *notify.Notification) { n.Buttons = append(n.Buttons, nil) }, "buttons[2]", "empty row"},
		{"nine a row", func(n *notify.Notification) { n.Buttons[0] = buttons(9) }, "buttons[0]", "Telegram's limit is 8 a row"},
		{"four a row with MAX", func(n *notify.Notification) { n.MaxUserID = 42; n.Buttons[0] = buttons(4) }, "buttons[0]", "MAX's limit is 3 link buttons a row"},
		{"31 rows with MAX", func(n *notify.Notification) {
			n.MaxUserID = 42
			for len(n.Buttons) <= notify.MaxMaxButtonRows {
				n.Buttons = append(n.Buttons, buttons(1))
			}
		}, "buttons", "MAX's limit is 30"},
		{"101 buttons", func(n *notify.Notification) {
			for range 20 {
				n.Buttons = append(n.Buttons, buttons(5))
			}
		}, "buttons", "Telegram's limit is 100"},
		{"photo not a web URL", func(n *notify.Notification) { n.LinkPreview = notify.LinkPreview{}; n.Photo = "tg://x" }, "photo", "want an http or https URL"},
		{"caption too long", func(n *notify.Notification) {
			n.LinkPreview = notify.LinkPreview{}
			n.Photo, n.Text = "https://shop.example/a1.jpg", strings.Repeat("я", notify.MaxCaptionLength+1)
		}, "text", "caption, whose limit is 1024"},
		{"negative thread", func(n *notify.Notification) { n.MessageThreadID = -1 }, "message_thread_id", "must be positive"},
		{"thread without a chat", func(n *notify.Notification) { n.ChatID = 0 }, "message_thread_id", "needs chat_id"},
		{"preview with a photo", func(n *notify.Notification) { n.Photo = "https://shop.example/a1.jpg" }, "link_preview", "photo"},
		{"preview disabled and not", func(n *notify.Notification) { n.LinkPreview.Disabled = true }, "link_preview.disabled", "contradicts"},
		{"small and large", func(n *notify.Notification) { n.LinkPreview.PreferSmallMedia = true }, "link_preview.prefer_small_media", "not both"},
		{"preview of a tg link", func(n *notify.Notification) { n.LinkPreview.URL = "tg://resolve?domain=x" }, "link_preview.url", "want an http or https URL"},
		{"MAX format", func(n *notify.Notification) { n.Bodies.Max.Format = "HTML" }, "bodies.max.format", "unknown format"},
		{"MAX body too long", func(n *notify.Notification) { n.Bodies.Max.Text = strings.Repeat("я", 4001) }, "bodies.max.text", "the limit is 4000"},
		{"email without HTML", func(n *notify.Notification) { n.Bodies.Email.HTML = "" }, "bodies.email.html", "empty"},
		{"email without text", func(n *notify.Notification) { n.Bodies.Email.Text = "\n" }, "bodies.email.text", "empty"},
		{"email not UTF-8", func(n *notify.Notification) { n.Bodies.Email.Text = "\xff" }, "bodies.email.text", "UTF-8"},
		{"SMS too long", func(n *notify.Notification) { n.Bodies.SMS.Text = strings.Repeat("x", 1601) }, "bodies.sms.text", "the limit is 1600"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n := richNotification()
			tc.mutate(&n)
			err := n.Validate()
			var ve *notify.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field || !strings.Contains(ve.Reason, tc.reason) {
				t.Fatalf("Validate = %v, want an error on %q saying %q", err, tc.field, tc.reason)
			}
			if _, err := n.MarshalPayload(); !errors.Is(err, notify.ErrInvalid) {
				t.Fatalf("MarshalPayload = %v, want ErrInvalid", err)
			}
		})
	}
}

// Rich content is payload version 3 and survives a round trip; without it
// the payload stays at the version an older worker reads.
func TestRichPayloadVersion(t *testing.T) {
	n := richNotification()
	b, err := n.MarshalPayload()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(b), `{"v":3,`) {
		t.Fatalf("rich notification encoded as %s, want version 3", b)
	}
	got, err := notify.DecodePayload(b)
	if err != nil {
		t.Fatalf("DecodePayload(%s): %v", b, err)
	}
	n.Normalize()
	if !reflect.DeepEqual(got, n) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, n)
	}
	for name, mutate := range map[string]func(*notify.Notification){
		"buttons":     func(n *notify.Notification) { n.Buttons = [][]notify.Button{{{Text: "a", URL: "https://a.example"}}} },
		"photo":       func(n *notify.Notification) { n.Photo = "https://a.example/p.png" },
		"thread":      func(n *notify.Notification) { n.MessageThreadID = 3 },
		"preview":     func(n *notify.Notification) { n.LinkPreview.Disabled = true },
		"an SMS body": func(n *notify.Notification) { n.Phone = "+79991234567"; n.Bodies.SMS = &notify.SMSBody{Text: "hi"} },
	} {
		n := validNotification()
		mutate(&n)
		b, err := n.MarshalPayload()
		if err != nil || !strings.HasPrefix(string(b), `{"v":3,`) {
			t.Errorf("%s: encoded as %s (%v), want version 3", name, b, err)
		}
	}
	if b, _ := validNotification().MarshalPayload(); !strings.HasPrefix(string(b), `{"v":1,`) {
		t.Errorf("plain Telegram notification encoded as %s, want version 1", b)
	}
}

// A payload that says version 2 but carries buttons is invalid: a worker
// must not take it for a version 2 payload and send it without them.
func TestOlderVersionWithRichFieldsRejected(t *testing.T) {
	for _, payload := range []string{
		`{"v":2,"key":"k","chat_id":1,"text":"t","buttons":[[{"text":"a","url":"https://a.example"}]],"created_at":"2026-01-01T00:00:00Z"}`,
		`{"v":1,"key":"k","chat_id":1,"text":"t","photo":"https://a.example/p.png","created_at":"2026-01-01T00:00:00Z"}`,
		`{"v":2,"key":"k","chat_id":1,"text":"t","bodies":{"sms":{"text":"x"}},"created_at":"2026-01-01T00:00:00Z"}`,
	} {
		_, err := notify.DecodePayload([]byte(payload))
		var ve *notify.ValidationError
		if !errors.As(err, &ve) || ve.Field != "v" || !strings.Contains(ve.Reason, "need version 3") {
			t.Errorf("DecodePayload(%s) = %v, want an error on v", payload, err)
		}
	}
}

// A payload of a version this program does not know is refused with an
// error that names the version.
func TestNewerVersionRefused(t *testing.T) {
	_, err := notify.DecodePayload([]byte(`{"v":5,"key":"k","chat_id":1,"text":"t","carousel":[1],"created_at":"2026-01-01T00:00:00Z"}`))
	var ve *notify.VersionError
	if !errors.As(err, &ve) || ve.Version != 5 || ve.Newest != notify.PayloadVersion || !errors.Is(err, notify.ErrUnsupportedPayloadVersion) {
		t.Fatalf("DecodePayload = %v, want a *VersionError for version 5", err)
	}
	if !strings.Contains(err.Error(), "version 5") {
		t.Fatalf("error %q does not name the version", err)
	}
}

// An encoded payload that DecodePayload would refuse for its size is
// refused at enqueue.
func TestMarshalPayloadRefusesOversized(t *testing.T) {
	n := richNotification()
	big := strings.Repeat("<", notify.MaxTextBytes-10) // JSON writes each as \u003c
	n.Bodies.Email.HTML = big
	_, err := n.MarshalPayload()
	var ve *notify.ValidationError
	if !errors.As(err, &ve) || ve.Field != "payload" {
		t.Fatalf("MarshalPayload = %v, want an error on payload", err)
	}
}
