package template

import (
	"bytes"
	"errors"
	"fmt"
	htmltemplate "html/template"
	"io"
	"slices"
	"strings"
	"sync"
	texttemplate "text/template"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Sentinels matched by the [*Error] values of this package.
var (
	// ErrParse: a template of a Source does not parse.
	ErrParse = errors.New("template does not parse")
	// ErrNotFound: no template for the event in the locale, its base
	// language or the fallback locale.
	ErrNotFound = errors.New("no template")
	// ErrRender: a template failed to execute with the data given, or
	// rendered an empty Telegram text.
	ErrRender = errors.New("template does not render")
	// ErrInvalid: Add was called with an empty event, a malformed locale, a
	// Source without a Telegram template, or an email HTML part without its
	// text part (or the reverse).
	ErrInvalid = errors.New("invalid template source")
)

// Error says which template failed and why. It matches one of the
// sentinels above with errors.Is, and unwraps to the underlying parse or
// execution error.
type Error struct {
	// Kind is ErrParse, ErrNotFound, ErrRender or ErrInvalid.
	Kind error
	// Event and Locale name the template set.
	Event, Locale string
	// Part is the template: telegram, max, email_html, email_text, sms,
	// subject, photo, buttons[i][j].text or .url; empty when the whole set
	// is concerned.
	Part string
	// Err is the cause, if any.
	Err error
}

// Error names the event, the locale, the part and the cause.
func (e *Error) Error() string {
	s := fmt.Sprintf("%v: event %q, locale %q", e.Kind, e.Event, e.Locale)
	if e.Part != "" {
		s += ", " + e.Part
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the kind and the cause.
func (e *Error) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Source is the templates of one event in one locale, in Go's template
// syntax ({{.Customer}}, {{range .Items}}…{{end}}). Only Telegram is
// required; a channel without its template converts the Telegram text.
type Source struct {
	// Telegram is the message in Telegram's HTML (parse mode HTML):
	// <b>, <i>, <a href>, <code>, … . Required. html/template.
	Telegram string
	// Max is the message in MAX's HTML (format "html"): <b>, <i>, <a>,
	// <code>, <pre>, <blockquote>, <mark>, <h1>. html/template.
	Max string
	// EmailHTML and EmailText are the email's parts: an HTML fragment put
	// inside <body>, and its plain text. Both or neither. html/template
	// and text/template.
	EmailHTML string
	EmailText string
	// SMS is the SMS, plain text. text/template.
	SMS string
	// Subject is the email subject, plain text on one line.
	// text/template.
	Subject string
	// Buttons are link buttons, in rows. text/template; a button whose URL
	// renders empty is left out (so {{with .URL}}{{.}}{{end}} makes a
	// button optional), and so is a row left empty.
	Buttons [][]ButtonSource
	// Photo is the URL of a picture sent with the message (Telegram's
	// sendPhoto, with the text as its caption). text/template; empty
	// output sends no photo.
	Photo string
}

// ButtonSource is a link button's templates.
type ButtonSource struct {
	// Text is the label.
	Text string
	// URL is the address: http, https or tg.
	URL string
}

// executor is a parsed template of either package.
type executor interface {
	Execute(w *bytes.Buffer, data any) error
}

type htmlExec struct{ t *htmltemplate.Template }

func (h htmlExec) Execute(w *bytes.Buffer, data any) error { return h.t.Execute(w, data) }

type textExec struct{ t *texttemplate.Template }

func (x textExec) Execute(w *bytes.Buffer, data any) error { return x.t.Execute(w, data) }

// set is a parsed Source.
type set struct {
	telegram, max, emailHTML, emailText, sms, subject, photo executor
	buttons                                                  [][]button
}

// button is a parsed ButtonSource; textPart and urlPart name its templates
// in errors (buttons[i][j].text, .url).
type button struct {
	text, url         executor
	textPart, urlPart string
}

// Registry holds templates by event and locale. It is safe for concurrent
// use: Add and Render may be called from any goroutine.
type Registry struct {
	fallback string
	funcs    map[string]any

	mu   sync.RWMutex
	sets map[string]map[string]*set // event → locale → templates
}

// Option configures a [Registry].
type Option func(*Registry)

// WithFuncs adds functions the templates can call, as text/template's and
// html/template's FuncMap do. A function's result is escaped like any
// other value in an HTML template.
func WithFuncs(funcs map[string]any) Option {
	return func(r *Registry) {
		for k, v := range funcs {
			r.funcs[k] = v
		}
	}
}

// New returns an empty registry whose fallback locale is fallback (such as
// "en"): the templates used when an event has none in the wanted locale or
// its base language. It panics if fallback is not a locale tag, which is a
// programming error.
func New(fallback string, opts ...Option) *Registry {
	loc, ok := normalizeLocale(fallback)
	if !ok {
		panic(fmt.Sprintf("template.New: fallback locale %q is not a locale tag such as en or ru-RU", fallback))
	}
	r := &Registry{fallback: loc, funcs: map[string]any{}, sets: map[string]map[string]*set{}}
	for _, o := range opts {
		o(r)
	}
	return r
}

// Fallback returns the fallback locale.
func (r *Registry) Fallback() string { return r.fallback }

// Add parses the templates of event in locale, replacing any it had. A
// template that does not parse, a Source without a Telegram template or
// with only one of EmailHTML and EmailText, an empty event or a locale
// that is not a tag (letters, digits and hyphens: en, ru-RU) is an
// [*Error] matching ErrParse or ErrInvalid.
func (r *Registry) Add(event, locale string, src Source) error {
	loc, ok := normalizeLocale(locale)
	fail := func(kind error, part string, err error) error {
		return &Error{Kind: kind, Event: event, Locale: locale, Part: part, Err: err}
	}
	switch {
	case strings.TrimSpace(event) == "":
		return fail(ErrInvalid, "", errors.New("the event is empty"))
	case !ok:
		return fail(ErrInvalid, "", errors.New("the locale is not a tag such as en or ru-RU"))
	case strings.TrimSpace(src.Telegram) == "":
		return fail(ErrInvalid, "telegram", errors.New("required"))
	case (src.EmailHTML == "") != (src.EmailText == ""):
		return fail(ErrInvalid, "email_html", errors.New("give both the HTML and the text part of the email, or neither"))
	}
	name := event + "." + loc + "."
	s := &set{}
	var err error
	parseHTML := func(part, text string, dst *executor) {
		if err != nil || text == "" {
			return
		}
		t, perr := htmltemplate.New(name + part).Funcs(r.funcs).Option("missingkey=error").Parse(text)
		if perr != nil {
			err = fail(ErrParse, part, perr)
			return
		}
		// html/template works out each action's escaping on the first
		// execution, and a template it cannot escape (an action inside an
		// unclosed attribute, say) fails then: execute it once, without
		// data, to learn that here. Execution errors for want of data are
		// expected and ignored.
		var herr *htmltemplate.Error
		if xerr := t.Execute(io.Discard, nil); errors.As(xerr, &herr) {
			err = fail(ErrParse, part, xerr)
			return
		}
		*dst = htmlExec{t}
	}
	parseText := func(part, text string, dst *executor) {
		if err != nil || text == "" {
			return
		}
		t, perr := texttemplate.New(name + part).Funcs(r.funcs).Option("missingkey=error").Parse(text)
		if perr != nil {
			err = fail(ErrParse, part, perr)
			return
		}
		*dst = textExec{t}
	}
	parseHTML("telegram", src.Telegram, &s.telegram)
	parseHTML("max", src.Max, &s.max)
	parseHTML("email_html", src.EmailHTML, &s.emailHTML)
	parseText("email_text", src.EmailText, &s.emailText)
	parseText("sms", src.SMS, &s.sms)
	parseText("subject", src.Subject, &s.subject)
	parseText("photo", src.Photo, &s.photo)
	for i, row := range src.Buttons {
		out := make([]button, len(row))
		for j, b := range row {
			part := fmt.Sprintf("buttons[%d][%d]", i, j)
			if strings.TrimSpace(b.Text) == "" || strings.TrimSpace(b.URL) == "" {
				return fail(ErrInvalid, part, errors.New("a button needs a text and a URL template"))
			}
			out[j].textPart, out[j].urlPart = part+".text", part+".url"
			parseText(out[j].textPart, b.Text, &out[j].text)
			parseText(out[j].urlPart, b.URL, &out[j].url)
		}
		s.buttons = append(s.buttons, out)
	}
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.sets[event] == nil {
		r.sets[event] = map[string]*set{}
	}
	r.sets[event][loc] = s
	return nil
}

// Locales returns the locales that have templates for event, sorted.
func (r *Registry) Locales(event string) []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []string
	for l := range r.sets[event] {
		out = append(out, l)
	}
	slices.Sort(out)
	return out
}

// lookup returns the templates of event for locale: the locale itself, its
// base language, then the fallback locale.
func (r *Registry) lookup(event, locale string) (*set, string, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	byLocale := r.sets[event]
	var candidates []string
	if loc, ok := normalizeLocale(locale); ok {
		candidates = append(candidates, loc)
		if base, _, cut := strings.Cut(loc, "-"); cut {
			candidates = append(candidates, base)
		}
	}
	candidates = append(candidates, r.fallback)
	for _, c := range candidates {
		if s, ok := byLocale[c]; ok {
			return s, c, true
		}
	}
	return nil, "", false
}

// Message is an event rendered for every channel that has a template (of
// those [Registry.Render] was asked for).
type Message struct {
	// Event is the event rendered; Locale the locale whose templates were
	// used (the wanted one, its base language, or the fallback).
	Event, Locale string
	// Text is Telegram's text, in Telegram's HTML.
	Text string
	// Max, Email and SMS are the other channels' bodies; nil when the
	// event has no template for the channel.
	Max   *notify.MaxBody
	Email *notify.EmailBody
	SMS   *notify.SMSBody
	// Subject is the email subject, empty without a template.
	Subject string
	// Buttons are the link buttons rendered.
	Buttons [][]notify.Button
	// Photo is the photo's URL, empty without one.
	Photo string
}

// Render executes the templates of event in locale (or its fallback) with
// data. An event without templates in any of them is an [*Error] matching
// ErrNotFound; a template that fails to execute, or a Telegram text that
// renders empty, one matching ErrRender, naming the part.
//
// channels, when given, are the only channels whose bodies are rendered:
// pass the notification's route, since [Message.Apply] drops the bodies of
// the channels off it. Telegram's text, the buttons and the photo are
// always rendered (the other channels convert Telegram's text when they
// have no template); MAX's body only with [notify.ChannelMax] among them,
// the subject and the email only with [notify.ChannelEmail], the SMS only
// with [notify.ChannelSMS]. Without channels every template is rendered.
// A template left out is not executed, so it cannot fail the render; nor
// is the label of a button whose URL renders empty (the button is left
// out).
func (r *Registry) Render(event, locale string, data any, channels ...notify.Channel) (*Message, error) {
	s, used, ok := r.lookup(event, locale)
	if !ok {
		return nil, &Error{Kind: ErrNotFound, Event: event, Locale: locale,
			Err: fmt.Errorf("none in %q, its base language or the fallback %q", locale, r.fallback)}
	}
	wants := func(c notify.Channel) bool { return len(channels) == 0 || slices.Contains(channels, c) }
	m := &Message{Event: event, Locale: used}
	var buf bytes.Buffer
	var err error
	exec := func(part string, e executor) string {
		if err != nil || e == nil {
			return ""
		}
		buf.Reset()
		if xerr := e.Execute(&buf, data); xerr != nil {
			err = &Error{Kind: ErrRender, Event: event, Locale: used, Part: part, Err: xerr}
			return ""
		}
		return buf.String()
	}
	m.Text = exec("telegram", s.telegram)
	if err == nil && strings.TrimSpace(m.Text) == "" {
		err = &Error{Kind: ErrRender, Event: event, Locale: used, Part: "telegram", Err: errors.New("rendered an empty text")}
	}
	if s.max != nil && wants(notify.ChannelMax) {
		m.Max = &notify.MaxBody{Text: exec("max", s.max), Format: notify.MaxFormatHTML}
	}
	if wants(notify.ChannelEmail) {
		if s.emailHTML != nil {
			h, t := exec("email_html", s.emailHTML), exec("email_text", s.emailText)
			m.Email = &notify.EmailBody{HTML: h, Text: t}
		}
		m.Subject = oneLine(exec("subject", s.subject))
	}
	if s.sms != nil && wants(notify.ChannelSMS) {
		m.SMS = &notify.SMSBody{Text: exec("sms", s.sms)}
	}
	m.Photo = strings.TrimSpace(exec("photo", s.photo))
	for _, row := range s.buttons {
		var out []notify.Button
		for _, b := range row {
			// The URL first: a button whose URL renders empty is left out,
			// and its label is not executed.
			if url := strings.TrimSpace(exec(b.urlPart, b.url)); url != "" {
				out = append(out, notify.Button{Text: oneLine(exec(b.textPart, b.text)), URL: url})
			}
		}
		if len(out) > 0 {
			m.Buttons = append(m.Buttons, out)
		}
	}
	if err != nil {
		return nil, err
	}
	return m, nil
}

// Apply puts the message into n: Telegram's text with parse mode HTML, the
// buttons and photo, and the subject and bodies of the channels on n's
// route (its Route, or the default route of its addresses): a body for a
// channel the notification will not reach would only make its payload
// larger, or of a newer version than it needs. Set the addresses and the
// route before calling it.
func (m *Message) Apply(n *notify.Notification) {
	n.Text, n.ParseMode = m.Text, notify.ParseModeHTML
	n.Subject, n.Buttons, n.Photo = "", m.Buttons, m.Photo
	route := n.Route
	if len(route) == 0 {
		c := *n
		c.Normalize()
		route = c.Route
	}
	n.Bodies = notify.Bodies{}
	if slices.Contains(route, notify.ChannelMax) {
		n.Bodies.Max = m.Max
	}
	if slices.Contains(route, notify.ChannelEmail) {
		n.Subject, n.Bodies.Email = m.Subject, m.Email
	}
	if slices.Contains(route, notify.ChannelSMS) {
		n.Bodies.SMS = m.SMS
	}
}

// oneLine collapses white space, newlines included, to single spaces.
func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// NormalizeLocale returns the form of a locale tag the registry uses
// (lower case, '-' between parts: "ru_RU" is "ru-ru"), and false when l is
// not a tag: letters and digits in parts of 1 to 8 characters.
func NormalizeLocale(l string) (string, bool) { return normalizeLocale(l) }

// normalizeLocale lower-cases a locale tag and turns '_' into '-' (ru_RU
// is ru-ru); it reports false for anything but letters, digits and
// hyphens in parts of 1 to 8 characters.
func normalizeLocale(l string) (string, bool) {
	l = strings.ToLower(strings.ReplaceAll(strings.TrimSpace(l), "_", "-"))
	if l == "" || len(l) > 35 {
		return "", false
	}
	for _, part := range strings.Split(l, "-") {
		if part == "" || len(part) > 8 {
			return "", false
		}
		for _, c := range part {
			if (c < 'a' || c > 'z') && (c < '0' || c > '9') {
				return "", false
			}
		}
	}
	return l, true
}
