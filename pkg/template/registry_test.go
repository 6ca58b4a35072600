package template_test

import (
	"errors"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/template"
)

type order struct {
	ID, Customer, URL string
}

// registry has "shipped" in English (the fallback) and Russian, and
// "accepted" in Russian only.
func registry(t *testing.T) *template.Registry {
	t.Helper()
	r := template.New("en")
	for _, tc := range []struct {
		event, locale string
		src           template.Source
	}{
		{"shipped", "en", template.Source{
			Telegram:  `<b>Order {{.ID}} shipped</b>, {{.Customer}}! <a href="{{.URL}}">Track it</a>`,
			Max:       `<b>Order {{.ID}} shipped</b>, {{.Customer}}!`,
			EmailHTML: `<h1>Order {{.ID}} shipped</h1><p>Hello, {{.Customer}}!</p>`,
			EmailText: "Order {{.ID}} shipped\nHello, {{.Customer}}!",
			SMS:       "Order {{.ID}} shipped, {{.Customer}}!",
			Subject:   "Order {{.ID}} shipped for\n{{.Customer}}",
			Buttons: [][]template.ButtonSource{
				{{Text: "Track {{.ID}}", URL: "https://shop.example/o/{{.ID | urlquery}}"}, {Text: "Site", URL: "{{with .URL}}{{.}}{{end}}"}},
			},
			Photo: "https://cdn.shop.example/{{.ID | urlquery}}.jpg",
		}},
		{"shipped", "ru", template.Source{Telegram: `<b>Заказ {{.ID}} отправлен</b>`, SMS: "Заказ {{.ID}} отправлен"}},
		{"accepted", "ru", template.Source{Telegram: `<b>Заказ {{.ID}} принят</b>`}},
	} {
		if err := r.Add(tc.event, tc.locale, tc.src); err != nil {
			t.Fatalf("Add(%s, %s): %v", tc.event, tc.locale, err)
		}
	}
	return r
}

// A locale without templates falls back to its base language, then to the
// registry's fallback locale; an event with none of them is ErrNotFound.
func TestLocaleFallback(t *testing.T) {
	r := registry(t)
	for _, tc := range []struct{ event, locale, used, text string }{
		{"shipped", "ru", "ru", "<b>Заказ A1 отправлен</b>"},
		{"shipped", "ru-RU", "ru", "<b>Заказ A1 отправлен</b>"},
		{"shipped", "RU_ru", "ru", "<b>Заказ A1 отправлен</b>"},
		{"shipped", "de", "en", "<b>Order A1 shipped</b>, Ann! <a href=\"https://x.example\">Track it</a>"},
		{"shipped", "", "en", "<b>Order A1 shipped</b>, Ann! <a href=\"https://x.example\">Track it</a>"},
		{"shipped", "not a locale!", "en", "<b>Order A1 shipped</b>, Ann! <a href=\"https://x.example\">Track it</a>"},
		{"accepted", "ru-BY", "ru", "<b>Заказ A1 принят</b>"},
	} {
		m, err := r.Render(tc.event, tc.locale, order{ID: "A1", Customer: "Ann", URL: "https://x.example"})
		if err != nil {
			t.Errorf("Render(%s, %q): %v", tc.event, tc.locale, err)
			continue
		}
		if m.Locale != tc.used || m.Text != tc.text {
			t.Errorf("Render(%s, %q) used %q: %q; want %q: %q", tc.event, tc.locale, m.Locale, m.Text, tc.used, tc.text)
		}
	}
	// "accepted" has no English templates, so German has nothing to fall
	// back to.
	_, err := r.Render("accepted", "de", order{ID: "A1"})
	var te *template.Error
	if !errors.Is(err, template.ErrNotFound) || !errors.As(err, &te) || te.Event != "accepted" || te.Locale != "de" {
		t.Fatalf("Render(accepted, de) = %v, want ErrNotFound naming the event and the locale", err)
	}
	if _, err := r.Render("cancelled", "en", nil); !errors.Is(err, template.ErrNotFound) {
		t.Fatalf("an unknown event: %v, want ErrNotFound", err)
	}
	if got := r.Locales("shipped"); strings.Join(got, ",") != "en,ru" {
		t.Fatalf("Locales(shipped) = %v", got)
	}
}

// Customer data with markup, an ampersand and markdown's special
// characters is escaped for each channel's format: HTML for Telegram, MAX
// and the email's HTML part; as typed in the plain-text ones.
func TestCustomerDataIsEscapedForEachChannel(t *testing.T) {
	r := registry(t)
	const evil = `<script>alert("x")</script> & *Ann* _b_ [c](d) ` + "`e`"
	m, err := r.Render("shipped", "en", order{ID: "A&1", Customer: evil, URL: `javascript:alert(1)`})
	if err != nil {
		t.Fatal(err)
	}
	const escaped = `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; &amp; *Ann* _b_ [c](d) ` + "`e`"
	for _, tc := range []struct{ channel, got, want string }{
		// The href of a javascript: URL is replaced: html/template checks
		// URLs in attributes.
		{"telegram", m.Text, `<b>Order A&amp;1 shipped</b>, ` + escaped + `! <a href="#ZgotmplZ">Track it</a>`},
		{"max", m.Max.Text, `<b>Order A&amp;1 shipped</b>, ` + escaped + `!`},
		{"email html", m.Email.HTML, `<h1>Order A&amp;1 shipped</h1><p>Hello, ` + escaped + `!</p>`},
		{"email text", m.Email.Text, "Order A&1 shipped\nHello, " + evil + "!"},
		{"sms", m.SMS.Text, "Order A&1 shipped, " + evil + "!"},
		{"subject", m.Subject, "Order A&1 shipped for " + evil},
		{"button label", m.Buttons[0][0].Text, "Track A&1"},
		{"button url", m.Buttons[0][0].URL, "https://shop.example/o/A%261"},
		{"photo", m.Photo, "https://cdn.shop.example/A%261.jpg"},
	} {
		if tc.got != tc.want {
			t.Errorf("%s:\n got %s\nwant %s", tc.channel, tc.got, tc.want)
		}
	}
	if m.Max.Format != notify.MaxFormatHTML {
		t.Errorf("MAX format %q, want html", m.Max.Format)
	}
	if len(m.Buttons[0]) != 2 || m.Buttons[0][1].URL != "javascript:alert(1)" {
		// Plain-text templates do not check URLs; notify's validation
		// refuses this one at enqueue (below).
		t.Errorf("buttons %+v", m.Buttons)
	}

	// Telegram parses the text and shows the data exactly as typed.
	emu, err := emulator.New(emulator.Config{Token: "1:t"})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	defer srv.Close()
	api, err := botapi.New("1:t", botapi.WithBaseURL(srv.URL))
	if err != nil {
		t.Fatal(err)
	}
	sent, err := api.SendMessage(t.Context(), botapi.SendMessageParams{ChatID: 1, Text: m.Text, ParseMode: botapi.ParseModeHTML})
	if err != nil {
		t.Fatalf("Telegram refused the rendered text: %v", err)
	}
	if want := "Order A&1 shipped, " + evil + "! Track it"; sent.Text != want {
		t.Errorf("Telegram shows %q, want %q", sent.Text, want)
	}

	// Enqueue refuses the javascript: button, naming it.
	n := notify.Notification{Key: "order:A&1:shipped", ChatID: 1, Email: "ann@example.com", CreatedAt: time.Now()}
	m.Apply(&n)
	var ve *notify.ValidationError
	if _, err := n.MarshalPayload(); !errors.As(err, &ve) || ve.Field != "buttons[0][1].url" {
		t.Fatalf("MarshalPayload = %v, want a refusal of buttons[0][1].url", err)
	}
}

// A button whose URL renders empty is left out, and a row left empty with
// it.
func TestOptionalButton(t *testing.T) {
	r := template.New("en")
	err := r.Add("shipped", "en", template.Source{Telegram: "x", Buttons: [][]template.ButtonSource{
		{{Text: "Track", URL: "{{with .URL}}{{.}}{{end}}"}},
		{{Text: "Help", URL: "https://shop.example/help"}, {Text: "Track", URL: "{{with .URL}}{{.}}{{end}}"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.Render("shipped", "en", order{})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Buttons) != 1 || len(m.Buttons[0]) != 1 || m.Buttons[0][0].Text != "Help" {
		t.Fatalf("buttons %+v, want only Help", m.Buttons)
	}
}

// A template that does not execute is an error at Render — the
// application's enqueue — naming the part, never a broken message later.
func TestRenderErrors(t *testing.T) {
	r := template.New("en", template.WithFuncs(map[string]any{
		"fail": func() (string, error) { return "", errors.New("no such price") },
	}))
	for _, tc := range []struct {
		name string
		src  template.Source
		data any
		part string
	}{
		{"missing field", template.Source{Telegram: "Order {{.Nope}}"}, order{}, "telegram"},
		{"missing map key", template.Source{Telegram: "ok", SMS: "Order {{.id}}"}, map[string]string{"ID": "A1"}, "sms"},
		{"function error", template.Source{Telegram: "ok", EmailHTML: "<p>{{fail}}</p>", EmailText: "x"}, order{}, "email_html"},
		{"empty text", template.Source{Telegram: "{{.Customer}} "}, order{}, "telegram"},
		{"button", template.Source{Telegram: "ok", Buttons: [][]template.ButtonSource{{{Text: "{{.Missing}}", URL: "https://a.example"}}}}, order{}, "buttons[0][0].text"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := r.Add("e", "en", tc.src); err != nil {
				t.Fatal(err)
			}
			m, err := r.Render("e", "en", tc.data)
			var te *template.Error
			if m != nil || !errors.Is(err, template.ErrRender) || !errors.As(err, &te) || te.Part != tc.part || te.Locale != "en" {
				t.Fatalf("Render = %v, %v; want ErrRender on %s", m, err, tc.part)
			}
		})
	}
}

func TestAddErrors(t *testing.T) {
	r := template.New("en")
	for _, tc := range []struct {
		name          string
		event, locale string
		src           template.Source
		kind          error
		part          string
	}{
		{"syntax", "e", "en", template.Source{Telegram: "{{.ID"}, template.ErrParse, "telegram"},
		{"unknown function", "e", "en", template.Source{Telegram: "x", SMS: "{{price .}}"}, template.ErrParse, "sms"},
		{"html that cannot be escaped", "e", "en", template.Source{Telegram: `<a href="{{.URL}}`}, template.ErrParse, "telegram"},
		{"no telegram", "e", "en", template.Source{SMS: "x"}, template.ErrInvalid, "telegram"},
		{"half an email", "e", "en", template.Source{Telegram: "x", EmailHTML: "<p>x</p>"}, template.ErrInvalid, "email_html"},
		{"button without URL", "e", "en", template.Source{Telegram: "x", Buttons: [][]template.ButtonSource{{{Text: "a"}}}}, template.ErrInvalid, "buttons[0][0]"},
		{"bad locale", "e", "en US", template.Source{Telegram: "x"}, template.ErrInvalid, ""},
		{"no event", " ", "en", template.Source{Telegram: "x"}, template.ErrInvalid, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.Add(tc.event, tc.locale, tc.src)
			var te *template.Error
			if !errors.Is(err, tc.kind) || !errors.As(err, &te) || te.Part != tc.part {
				t.Fatalf("Add = %v, want %v on %q", err, tc.kind, tc.part)
			}
		})
	}
	if len(r.Locales("e")) != 0 {
		t.Fatal("a failed Add registered templates")
	}
}

// Apply puts the bodies of the channels on the route only: a
// Telegram-only notification stays a plain payload an older worker reads.
func TestApply(t *testing.T) {
	r := registry(t)
	m, err := r.Render("shipped", "en", order{ID: "A1", Customer: "Ann"})
	if err != nil {
		t.Fatal(err)
	}
	n := notify.Notification{Key: "order:A1:shipped", ChatID: 1, Phone: "+79991234567", CreatedAt: time.Now()}
	m.Apply(&n)
	if n.ParseMode != notify.ParseModeHTML || n.Text != m.Text || n.Subject != "" || n.Bodies.SMS == nil || n.Bodies.Max != nil || n.Bodies.Email != nil || n.Photo == "" {
		t.Fatalf("applied %+v", n)
	}
	if err := n.Validate(); err != nil {
		t.Fatal(err)
	}

	r = template.New("en")
	if err := r.Add("accepted", "en", template.Source{Telegram: "<b>Order {{.ID}}</b>", SMS: "Order {{.ID}}", EmailHTML: "<p>x</p>", EmailText: "x"}); err != nil {
		t.Fatal(err)
	}
	m, err = r.Render("accepted", "en", order{ID: "A1"})
	if err != nil {
		t.Fatal(err)
	}
	n = notify.Notification{Key: "order:A1:accepted", ChatID: 1, CreatedAt: time.Now()}
	m.Apply(&n)
	b, err := n.MarshalPayload()
	if err != nil || !strings.HasPrefix(string(b), `{"v":1,`) {
		t.Fatalf("a Telegram-only notification from templates encoded as %s (%v), want version 1", b, err)
	}
}

// Rendered for a route, a message applies to a notification on that route
// exactly as one rendered for every channel does, and a template of a
// channel off the route is not executed: here the email's, which would fail.
func TestRenderForARoute(t *testing.T) {
	r := registry(t)
	data := order{ID: "A1", Customer: "Ann", URL: "https://shop.example/o/A1"}
	all, err := r.Render("shipped", "en", data)
	if err != nil {
		t.Fatal(err)
	}
	for _, route := range [][]notify.Channel{
		{notify.ChannelTelegram},
		{notify.ChannelTelegram, notify.ChannelMax},
		{notify.ChannelTelegram, notify.ChannelEmail},
		{notify.ChannelTelegram, notify.ChannelSMS},
		{notify.ChannelMax, notify.ChannelEmail, notify.ChannelSMS},
		{notify.ChannelEmail},
	} {
		m, err := r.Render("shipped", "en", data, route...)
		if err != nil {
			t.Fatalf("Render for %v: %v", route, err)
		}
		base := notify.Notification{Key: "order:A1:shipped", ChatID: 1, MaxUserID: 2, Email: "ann@example.com", Phone: "+79991234567", Route: route}
		want, got := base, base
		all.Apply(&want)
		m.Apply(&got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("route %v: applied\n%+v\nwant\n%+v", route, got, want)
		}
		for c, rendered := range map[notify.Channel]bool{
			notify.ChannelMax: m.Max != nil, notify.ChannelEmail: m.Email != nil || m.Subject != "", notify.ChannelSMS: m.SMS != nil,
		} {
			if rendered != slices.Contains(route, c) {
				t.Errorf("route %v: %s rendered = %v", route, c, rendered)
			}
		}
	}

	r = template.New("en", template.WithFuncs(map[string]any{
		"fail": func() (string, error) { return "", errors.New("no such price") },
	}))
	if err := r.Add("e", "en", template.Source{Telegram: "ok", SMS: "sms", EmailHTML: "<p>{{fail}}</p>", EmailText: "x", Subject: "{{fail}}"}); err != nil {
		t.Fatal(err)
	}
	m, err := r.Render("e", "en", order{}, notify.ChannelTelegram, notify.ChannelSMS)
	if err != nil || m.Text != "ok" || m.SMS == nil || m.SMS.Text != "sms" || m.Email != nil {
		t.Fatalf("Render for telegram and sms = %+v, %v; want the text and the SMS, no email", m, err)
	}
	if _, err := r.Render("e", "en", order{}, notify.ChannelEmail); !errors.Is(err, template.ErrRender) {
		t.Fatalf("Render for email = %v, want ErrRender", err)
	}

	// A button whose URL renders empty is left out, its label not executed.
	if err := r.Add("b", "en", template.Source{Telegram: "ok", Buttons: [][]template.ButtonSource{
		{{Text: "{{fail}}", URL: "{{with .URL}}{{.}}{{end}}"}},
	}}); err != nil {
		t.Fatal(err)
	}
	if m, err := r.Render("b", "en", order{}); err != nil || len(m.Buttons) != 0 {
		t.Fatalf("Render without a URL = %+v, %v; want no button and no error", m, err)
	}
	if _, err := r.Render("b", "en", order{URL: "https://shop.example/o/A1"}); !errors.Is(err, template.ErrRender) || !strings.Contains(err.Error(), "buttons[0][0].text") {
		t.Fatalf("Render with a URL = %v, want ErrRender naming buttons[0][0].text", err)
	}
}
