package notify_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// payloadSchemaFile is the published JSON Schema of the payload.
const payloadSchemaFile = "payload.schema.json"

// payloadSchema compiles payload.schema.json with format assertions on
// (created_at and expires_at must be RFC 3339 date-times).
func payloadSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(payloadSchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatalf("%s: %v", payloadSchemaFile, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource(payloadSchemaFile, doc); err != nil {
		t.Fatal(err)
	}
	s, err := c.Compile(payloadSchemaFile)
	if err != nil {
		t.Fatalf("compiling %s: %v", payloadSchemaFile, err)
	}
	return s
}

func validate(s *jsonschema.Schema, payload []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// schemaCases are notifications covering every field of both payload
// versions.
func schemaCases() map[string]notify.Notification {
	base := validNotification()
	with := func(f func(*notify.Notification)) notify.Notification {
		n := base
		f(&n)
		return n
	}
	return map[string]notify.Notification{
		"v1 minimal":     base,
		"v1 group":       with(func(n *notify.Notification) { n.ChatID = -1001234567890 }),
		"v1 largest id":  with(func(n *notify.Notification) { n.ChatID = 1<<53 - 1 }),
		"v1 smallest id": with(func(n *notify.Notification) { n.ChatID = -(1<<53 - 1) }),
		"v1 html": with(func(n *notify.Notification) {
			n.ParseMode, n.Text = notify.ParseModeHTML, "<b>Order</b> "+notify.EscapeHTML(`Ann "<3" & co`)
		}),
		"v1 markdown": with(func(n *notify.Notification) { n.ParseMode, n.Text = notify.ParseModeMarkdownV2, `*ok* \. fine` }),
		"v1 options": with(func(n *notify.Notification) {
			n.DisableNotification, n.ProtectContent, n.Priority = true, true, notify.PriorityBulk
			n.ExpiresAt = n.CreatedAt.Add(90 * time.Minute)
		}),
		"v1 nanoseconds and a zone": with(func(n *notify.Notification) {
			n.CreatedAt = time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("MSK", 3*3600))
		}),
		"v1 longest key":      with(func(n *notify.Notification) { n.Key = strings.Repeat("~", notify.MaxKeyBytes) }),
		"v1 longest text":     with(func(n *notify.Notification) { n.Text = strings.Repeat("я", notify.MaxTextLength) }),
		"v1 explicit channel": with(func(n *notify.Notification) { n.Channel = notify.ChannelTelegram }),
		"v2 email only":       {Key: "k:email", Email: "ann@example.com", Text: "hi", CreatedAt: base.CreatedAt},
		"v2 phone only":       {Key: "k:sms", Phone: "+79991234567", Text: "hi", CreatedAt: base.CreatedAt},
		"v2 max user":         {Key: "k:max", MaxUserID: 42, Text: "hi", CreatedAt: base.CreatedAt},
		"v2 max chat":         {Key: "k:maxc", MaxChatID: -42, Text: "hi", CreatedAt: base.CreatedAt},
		"v2 single channel": {Key: "k:one", Channel: notify.ChannelEmail, Email: "a@b.co", ChatID: 5, Text: "hi",
			CreatedAt: base.CreatedAt},
		"v2 every address, default route": with(func(n *notify.Notification) {
			n.MaxUserID, n.Email, n.Phone = 7, "Ann.Lee+shop@mail.example.org", "+12025550123"
		}),
		"v2 route and fallback": with(func(n *notify.Notification) {
			n.Email, n.Phone = "ann@example.com", "+79991234567"
			n.Route = []notify.Channel{notify.ChannelSMS, notify.ChannelTelegram, notify.ChannelEmail}
			n.FallbackAfter, n.Subject = 90*time.Second, "Order A1 accepted"
		}),
		"v2 fallback never": with(func(n *notify.Notification) {
			n.Email, n.FallbackAfter = "ann@example.com", notify.FallbackNever
		}),
		"v2 fallback with fractions": with(func(n *notify.Notification) {
			n.Phone, n.FallbackAfter = "+79991234567", 1500*time.Millisecond+3*time.Microsecond
		}),
		"v2 telegram with a subject": with(func(n *notify.Notification) { n.Subject = "Order" }),
		"v3 everything":              richNotification(),
		"v3 telegram button": with(func(n *notify.Notification) {
			n.Buttons = [][]notify.Button{{{Text: "Bot", URL: "tg://resolve?domain=shop_bot"}}}
		}),
		"v3 photo": with(func(n *notify.Notification) {
			n.Photo, n.Buttons = "https://cdn.shop.example/A1.jpg?w=600", [][]notify.Button{{{Text: "Track", URL: "HTTPS://shop.example/A1"}}}
		}),
		"v3 topic":            with(func(n *notify.Notification) { n.ChatID, n.MessageThreadID = -1001234567890, 42 }),
		"v3 preview disabled": with(func(n *notify.Notification) { n.LinkPreview.Disabled = true }),
		"v3 MAX buttons": {Key: "k:maxb", MaxUserID: 42, Text: "hi", CreatedAt: base.CreatedAt,
			Buttons: [][]notify.Button{{{Text: "a", URL: "https://a.example"}, {Text: "b", URL: "https://b.example"}, {Text: "c", URL: "https://c.example"}}}},
		"v4 scheduled": with(func(n *notify.Notification) { n.NotBefore = n.CreatedAt.Add(notify.MaxScheduleAhead) }),
		"v4 scheduled with rich content and expiry": with(func(n *notify.Notification) {
			n.NotBefore, n.ExpiresAt = n.CreatedAt.Add(time.Hour), n.CreatedAt.Add(2*time.Hour)
			n.Buttons = [][]notify.Button{{{Text: "Track", URL: "https://shop.example/A1"}}}
		}),
		"v3 bodies": with(func(n *notify.Notification) {
			n.MaxChatID, n.Email, n.Phone = -5, "ann@example.com", "+79991234567"
			n.Bodies = notify.Bodies{Max: &notify.MaxBody{Text: "**hi**", Format: notify.MaxFormatMarkdown},
				Email: &notify.EmailBody{HTML: "<p>hi</p>", Text: "hi"}, SMS: &notify.SMSBody{Text: strings.Repeat("я", notify.MaxSMSBodyLength)}}
		}),
	}
}

// Every payload MarshalPayload writes validates against the published
// schema: the cases above, and a few thousand random notifications.
func TestPayloadSchemaAcceptsWhatMarshalPayloadWrites(t *testing.T) {
	s := payloadSchema(t)
	check := func(t *testing.T, n notify.Notification) {
		t.Helper()
		b, err := n.MarshalPayload()
		if err != nil {
			t.Fatalf("MarshalPayload: %v", err)
		}
		if err := validate(s, b); err != nil {
			t.Fatalf("%s rejects %s:\n%v", payloadSchemaFile, b, err)
		}
	}
	for name, n := range schemaCases() {
		t.Run(name, func(t *testing.T) { check(t, n) })
	}
	t.Run("random", func(t *testing.T) {
		r := rand.New(rand.NewPCG(1, 2))
		for i := range 3000 {
			n := randomNotification(r, i)
			if n.Validate() != nil {
				continue
			}
			check(t, n)
		}
	})
	t.Run("fuzz corpus", func(t *testing.T) {
		files, _ := filepath.Glob("testdata/fuzz/FuzzDecodePayload/*")
		accepted := 0
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			// The corpus files hold Go literals: []byte("...").
			var in []byte
			if _, err := fmt.Sscanf(strings.SplitN(string(b), "\n", 3)[1], "[]byte(%q)", &in); err != nil {
				continue
			}
			if n, err := notify.DecodePayload(in); err == nil {
				check(t, n)
				accepted++
			}
		}
		if accepted == 0 {
			t.Errorf("none of the %d corpus files holds a payload DecodePayload accepts: is the corpus format read right?", len(files))
		}
	})
}

// randomNotification combines the optional fields at random.
func randomNotification(r *rand.Rand, i int) notify.Notification {
	n := notify.Notification{
		Key:       fmt.Sprintf("order:%d:%c", i, '!'+rune(r.IntN(94))),
		Text:      strings.Repeat("x", 1+r.IntN(50)),
		CreatedAt: time.Unix(1_700_000_000+r.Int64N(1e8), r.Int64N(1e9)).UTC(),
	}
	if r.IntN(3) > 0 {
		n.ChatID = r.Int64N(1<<53-1) - 1<<52
	}
	switch r.IntN(3) {
	case 1:
		n.MaxUserID = 1 + r.Int64N(1e12)
	case 2:
		n.MaxChatID = r.Int64N(1e12) - 5e11
	}
	if r.IntN(2) == 0 {
		n.Email = fmt.Sprintf("user%d@example%d.com", r.IntN(1000), r.IntN(10))
	}
	if r.IntN(2) == 0 {
		n.Phone = fmt.Sprintf("+%d%09d", 1+r.IntN(9), r.IntN(1e9))
	}
	if r.IntN(2) == 0 && len(n.DefaultRoute()) > 0 {
		n.Normalize()
		r.Shuffle(len(n.Route), func(a, b int) { n.Route[a], n.Route[b] = n.Route[b], n.Route[a] })
		n.Route = n.Route[:max(1, r.IntN(len(n.Route)+1))]
		n.Channel = ""
	}
	switch r.IntN(4) {
	case 1:
		n.FallbackAfter = time.Duration(1+r.Int64N(1e13)) * time.Microsecond
	case 2:
		n.FallbackAfter = notify.FallbackNever
	}
	if r.IntN(4) == 0 {
		n.Subject = "Order " + n.Key
	}
	if r.IntN(3) == 0 {
		n.ParseMode, n.Text = notify.ParseModeHTML, "<b>"+notify.EscapeHTML(n.Text+` <&>"`)+"</b>"
	}
	n.DisableNotification, n.ProtectContent = r.IntN(2) == 0, r.IntN(2) == 0
	if r.IntN(2) == 0 {
		n.Priority = notify.PriorityBulk
	}
	if r.IntN(3) == 0 {
		n.ExpiresAt = n.CreatedAt.Add(time.Duration(1+r.Int64N(1e12)) * time.Millisecond)
	}
	// Rich content (version 3), now and then.
	if r.IntN(4) == 0 {
		for row := range 1 + r.IntN(3) {
			var buttons []notify.Button
			for b := range 1 + r.IntN(3) {
				url := fmt.Sprintf("https://shop.example/%d/%d?q=%d", row, b, r.IntN(100))
				if r.IntN(4) == 0 {
					url = "tg://resolve?domain=shop_bot"
				}
				buttons = append(buttons, notify.Button{Text: fmt.Sprintf("Button %d", b), URL: url})
			}
			n.Buttons = append(n.Buttons, buttons)
		}
	}
	switch r.IntN(6) {
	case 0:
		n.Photo = fmt.Sprintf("https://cdn.shop.example/%d.jpg", i)
	case 1:
		n.LinkPreview = notify.LinkPreview{URL: "https://shop.example/", PreferLargeMedia: r.IntN(2) == 0, ShowAboveText: r.IntN(2) == 0}
	case 2:
		n.LinkPreview.Disabled = true
	}
	if n.ChatID != 0 && r.IntN(6) == 0 {
		n.MessageThreadID = 1 + r.Int64N(1e6)
	}
	if r.IntN(4) == 0 {
		n.Bodies.SMS = &notify.SMSBody{Text: "SMS " + n.Key}
	}
	if r.IntN(4) == 0 {
		n.Bodies.Email = &notify.EmailBody{HTML: "<p>" + notify.EscapeHTML(n.Key) + "</p>", Text: n.Key}
	}
	return n
}

// The schema is not vacuous: it refuses what DecodePayload refuses for the
// reasons a schema can express, and a misspelt field, which DecodePayload
// ignores.
func TestPayloadSchemaRejects(t *testing.T) {
	s := payloadSchema(t)
	const created = `"created_at":"2026-01-01T00:00:00Z"`
	for _, tc := range []struct{ name, payload string }{
		{"no version", `{"key":"k","chat_id":1,"text":"t",` + created + `}`},
		{"future version", `{"v":5,"key":"k","chat_id":1,"text":"t",` + created + `}`},
		{"no key", `{"v":1,"chat_id":1,"text":"t",` + created + `}`},
		{"key with a space", `{"v":1,"key":"a b","chat_id":1,"text":"t",` + created + `}`},
		{"no created_at", `{"v":1,"key":"k","chat_id":1,"text":"t"}`},
		{"created_at not RFC 3339", `{"v":1,"key":"k","chat_id":1,"text":"t","created_at":"yesterday"}`},
		{"empty text", `{"v":1,"key":"k","chat_id":1,"text":"",` + created + `}`},
		{"chat id as a string", `{"v":1,"key":"k","chat_id":"1","text":"t",` + created + `}`},
		{"chat id zero", `{"v":1,"key":"k","chat_id":0,"text":"t",` + created + `}`},
		{"v1 with an email", `{"v":1,"key":"k","chat_id":1,"email":"a@b.co","text":"t",` + created + `}`},
		{"v1 with a route", `{"v":1,"key":"k","chat_id":1,"route":["telegram"],"text":"t",` + created + `}`},
		{"v1 without a chat", `{"v":1,"key":"k","text":"t",` + created + `}`},
		{"v2 without an address", `{"v":2,"key":"k","text":"t",` + created + `}`},
		{"v2 email with a name", `{"v":2,"key":"k","email":"Ann <a@b.co>","text":"t",` + created + `}`},
		{"v2 national phone", `{"v":2,"key":"k","phone":"89991234567","text":"t",` + created + `}`},
		{"v2 both MAX ids", `{"v":2,"key":"k","max_user_id":1,"max_chat_id":2,"text":"t",` + created + `}`},
		{"v2 route without its address", `{"v":2,"key":"k","chat_id":1,"route":["telegram","sms"],"text":"t",` + created + `}`},
		{"v2 unknown channel", `{"v":2,"key":"k","chat_id":1,"route":["pigeon"],"text":"t",` + created + `}`},
		{"v2 channel twice", `{"v":2,"key":"k","chat_id":1,"route":["telegram","telegram"],"text":"t",` + created + `}`},
		{"v2 bad fallback", `{"v":2,"key":"k","email":"a@b.co","fallback_after":"soon","text":"t",` + created + `}`},
		{"v2 two-line subject", `{"v":2,"key":"k","email":"a@b.co","subject":"a\nb","text":"t",` + created + `}`},
		{"unknown field", `{"v":1,"key":"k","chat_id":1,"text":"t","chatid":2,` + created + `}`},
		{"v2 with buttons", `{"v":2,"key":"k","chat_id":1,"buttons":[[{"text":"a","url":"https://a.example"}]],"text":"t",` + created + `}`},
		{"v1 with a photo", `{"v":1,"key":"k","chat_id":1,"photo":"https://a.example/p.jpg","text":"t",` + created + `}`},
		{"v2 with bodies", `{"v":2,"key":"k","phone":"+79991234567","bodies":{"sms":{"text":"x"}},"text":"t",` + created + `}`},
		{"v3 javascript button", `{"v":3,"key":"k","chat_id":1,"buttons":[[{"text":"a","url":"javascript:alert(1)"}]],"text":"t",` + created + `}`},
		{"v3 relative button", `{"v":3,"key":"k","chat_id":1,"buttons":[[{"text":"a","url":"/orders/A1"}]],"text":"t",` + created + `}`},
		{"v3 button with a space", `{"v":3,"key":"k","chat_id":1,"buttons":[[{"text":"a","url":"https://a.example/a b"}]],"text":"t",` + created + `}`},
		{"v3 empty label", `{"v":3,"key":"k","chat_id":1,"buttons":[[{"text":" ","url":"https://a.example"}]],"text":"t",` + created + `}`},
		{"v3 two-line label", `{"v":3,"key":"k","chat_id":1,"buttons":[[{"text":"a\nb","url":"https://a.example"}]],"text":"t",` + created + `}`},
		{"v3 empty row", `{"v":3,"key":"k","chat_id":1,"buttons":[[]],"text":"t",` + created + `}`},
		{"v3 nine a row", `{"v":3,"key":"k","chat_id":1,"buttons":[[` + strings.TrimSuffix(strings.Repeat(`{"text":"a","url":"https://a.example"},`, 9), ",") + `]],"text":"t",` + created + `}`},
		{"v3 four a row with MAX", `{"v":3,"key":"k","max_user_id":1,"buttons":[[` + strings.TrimSuffix(strings.Repeat(`{"text":"a","url":"https://a.example"},`, 4), ",") + `]],"text":"t",` + created + `}`},
		{"v3 photo over tg", `{"v":3,"key":"k","chat_id":1,"photo":"tg://x","text":"t",` + created + `}`},
		{"v3 thread without a chat", `{"v":3,"key":"k","email":"a@b.co","message_thread_id":3,"text":"t",` + created + `}`},
		{"v3 negative thread", `{"v":3,"key":"k","chat_id":-1001234567890,"message_thread_id":-3,"text":"t",` + created + `}`},
		{"v3 preview with a photo", `{"v":3,"key":"k","chat_id":1,"photo":"https://a.example/p.jpg","link_preview":{"show_above_text":true},"text":"t",` + created + `}`},
		{"v3 preview disabled and not", `{"v":3,"key":"k","chat_id":1,"link_preview":{"disabled":true,"url":"https://a.example"},"text":"t",` + created + `}`},
		{"v3 small and large", `{"v":3,"key":"k","chat_id":1,"link_preview":{"prefer_small_media":true,"prefer_large_media":true},"text":"t",` + created + `}`},
		{"v3 MAX format", `{"v":3,"key":"k","max_user_id":1,"bodies":{"max":{"text":"x","format":"HTML"}},"text":"t",` + created + `}`},
		{"v3 half an email", `{"v":3,"key":"k","email":"a@b.co","bodies":{"email":{"html":"<p>x</p>"}},"text":"t",` + created + `}`},
		{"v3 long SMS", `{"v":3,"key":"k","phone":"+79991234567","bodies":{"sms":{"text":"` + strings.Repeat("x", 1601) + `"}},"text":"t",` + created + `}`},
		{"v3 with not_before", `{"v":3,"key":"k","chat_id":1,"not_before":"2026-01-01T08:00:00Z","text":"t",` + created + `}`},
		{"v4 not_before not RFC 3339", `{"v":4,"key":"k","chat_id":1,"not_before":"tomorrow","text":"t",` + created + `}`},
		{"bad priority", `{"v":1,"key":"k","chat_id":1,"text":"t","priority":"urgent",` + created + `}`},
		{"bad parse mode", `{"v":1,"key":"k","chat_id":1,"text":"t","parse_mode":"Markdown",` + created + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := validate(s, []byte(tc.payload)); err == nil {
				t.Errorf("%s accepts %s", payloadSchemaFile, tc.payload)
			}
			if _, err := notify.DecodePayload([]byte(tc.payload)); err == nil && tc.name != "unknown field" {
				t.Errorf("DecodePayload accepts %s, which the schema refuses", tc.payload)
			}
		})
	}
}
