package emulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/testclock"
	"github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

const (
	sid   = "AC0123456789abcdef0123456789abcdef"
	token = "f00dfeedf00dfeedf00dfeedf00dfeed"
	from  = "+15005550006"
	to    = "+79991234567"
)

// newClock is a manual clock for the emulator's Config.Now.
func newClock() *testclock.Clock { return testclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

// syncBuffer collects log output.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type bundle struct {
	emu  *emulator.Emulator
	url  string
	logs *syncBuffer
}

func setup(t *testing.T, cfg emulator.Config) *bundle {
	t.Helper()
	cfg.AccountSID, cfg.AuthToken = sid, token
	logs := &syncBuffer{}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	emu, err := emulator.New(cfg)
	if err != nil {
		t.Fatalf("emulator.New: %v", err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(func() {
		emu.Close()
		srv.Close()
		if s := logs.String(); strings.Contains(s, to) || strings.Contains(s, token) {
			t.Errorf("the emulator logged a number or the token:\n%s", s)
		}
	})
	return &bundle{emu: emu, url: srv.URL, logs: logs}
}

// answer is an HTTP answer, decoded.
type answer struct {
	status int
	header http.Header
	json   map[string]any
}

func (a answer) num(key string) int {
	f, _ := a.json[key].(float64)
	return int(f)
}

func (a answer) str(key string) string {
	s, _ := a.json[key].(string)
	return s
}

// do makes a request with the test credentials (unless user is set).
func (b *bundle) do(t *testing.T, method, path string, form url.Values, auth ...string) answer {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.url+path, body)
	if err != nil {
		t.Fatal(err)
	}
	user, pass := sid, token
	if len(auth) == 2 {
		user, pass = auth[0], auth[1]
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	data, _ := io.ReadAll(resp.Body)
	if len(data) > 0 && data[0] == '{' {
		if err := json.Unmarshal(data, &a.json); err != nil {
			t.Fatalf("%s %s: invalid JSON %q: %v", method, path, data, err)
		}
	}
	return a
}

const messagesPath = "/2010-04-01/Accounts/" + sid + "/Messages.json"

func (b *bundle) send(t *testing.T, form url.Values) answer {
	t.Helper()
	return b.do(t, http.MethodPost, messagesPath, form)
}

func msg(to, body string) url.Values { return url.Values{"To": {to}, "From": {from}, "Body": {body}} }

func TestCreateMessage(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	body := strings.Repeat("Заказ принят. ", 6) // 84 UCS-2 characters: 2 segments
	a := b.send(t, msg(to, body))
	if a.status != http.StatusCreated {
		t.Fatalf("status %d %v, want 201", a.status, a.json)
	}
	if a.str("sid") != "SM00000000000000000000000000000001" || a.str("status") != "queued" || a.str("num_segments") != "2" ||
		a.str("to") != to || a.str("from") != from || a.str("body") != body || a.str("account_sid") != sid ||
		a.str("direction") != "outbound-api" || a.json["error_code"] != nil || a.json["messaging_service_sid"] != nil {
		t.Errorf("resource %v", a.json)
	}
	if _, err := time.Parse(time.RFC1123Z, a.str("date_created")); err != nil {
		t.Errorf("date_created %q is not RFC 2822: %v", a.str("date_created"), err)
	}
	ms := b.emu.Messages()
	if len(ms) != 1 || ms[0].Body != body || ms[0].Encoding != "UCS-2" || ms[0].NumSegments != 2 || ms[0].To != to {
		t.Errorf("recorded %+v", ms)
	}
	if s := b.emu.Stats(); s.Created != 1 || s.Segments != 2 || s.ByCode[201] != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestCreateThroughMessagingService(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	const service = "MG0123456789abcdef0123456789abcdef"
	a := b.send(t, url.Values{"To": {to}, "MessagingServiceSid": {service}, "Body": {"hi"}})
	if a.status != 201 || a.str("status") != "accepted" || a.str("num_segments") != "0" || a.str("messaging_service_sid") != service || a.json["from"] != nil {
		t.Errorf("answer %d %v", a.status, a.json)
	}
}

// Every error answer has Twilio's shape and code.
func TestErrorAnswers(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{
		Senders:        []string{from},
		BlockedRegions: []string{"+98"},
		Numbers: map[string]emulator.NumberState{
			"+15005550001": emulator.NumberInvalid,
			"+15005550002": emulator.NumberUnsubscribed,
			"+15005550003": emulator.NumberNotMobile,
			"+15005550004": emulator.NumberUnverified,
			"+15005550005": emulator.NumberUnreachable,
			"+15005550007": emulator.NumberForbidden,
		},
	})
	tests := []struct {
		name   string
		form   url.Values
		status int
		code   int
	}{
		{"no To", url.Values{"From": {from}, "Body": {"x"}}, 400, 21604},
		{"no sender", url.Values{"To": {to}, "Body": {"x"}}, 400, 21603},
		{"no body", url.Values{"To": {to}, "From": {from}}, 400, 21602},
		{"body too long", msg(to, strings.Repeat("a", 1601)), 400, 21617},
		{"To not E.164", msg("89991234567", "x"), 400, 21211},
		{"From not valid", url.Values{"To": {to}, "From": {"+0"}, "Body": {"x"}}, 400, 21212},
		{"From not owned", url.Values{"To": {to}, "From": {"+15005550009"}, "Body": {"x"}}, 400, 21606},
		{"region blocked", msg("+989121234567", "x"), 400, 21408},
		{"invalid", msg("+15005550001", "x"), 400, 21211},
		{"unsubscribed", msg("+15005550002", "x"), 400, 21610},
		{"not mobile", msg("+15005550003", "x"), 400, 21614},
		{"unverified", msg("+15005550004", "x"), 400, 21608},
		{"unreachable", msg("+15005550005", "x"), 400, 21612},
		{"forbidden", msg("+15005550007", "x"), 403, 20403},
	}
	for _, tt := range tests {
		a := b.send(t, tt.form)
		if a.status != tt.status || a.num("code") != tt.code || a.num("status") != tt.status ||
			a.str("more_info") != fmt.Sprintf("https://www.twilio.com/docs/errors/%d", tt.code) || a.str("message") == "" {
			t.Errorf("%s: %d %v, want %d with code %d", tt.name, a.status, a.json, tt.status, tt.code)
		}
	}
	if n := len(b.emu.Messages()); n != 0 {
		t.Errorf("%d messages created from refused requests", n)
	}
	if s := b.emu.Stats(); s.ByErrorCode[21610] != 1 || s.ByCode[400] != int64(len(tests)-1) {
		t.Errorf("stats %+v", s)
	}
}

func TestAuthenticationAndRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	for _, tt := range []struct {
		name       string
		method     string
		path       string
		user, pass string
		status     int
		code       int
	}{
		{"no credentials", "POST", messagesPath, "", "", 401, 20003},
		{"wrong token", "POST", messagesPath, sid, "nope", 401, 20003},
		{"another account", "POST", "/2010-04-01/Accounts/AC00000000000000000000000000000000/Messages.json", sid, token, 404, 20404},
		{"unknown resource", "GET", "/2010-04-01/Accounts/" + sid + "/Calls.json", sid, token, 404, 20404},
		{"GET messages", "GET", messagesPath, sid, token, 405, 20004},
	} {
		a := b.do(t, tt.method, tt.path, nil, tt.user, tt.pass)
		if a.status != tt.status || a.num("code") != tt.code {
			t.Errorf("%s: %d %v, want %d / %d", tt.name, a.status, a.json, tt.status, tt.code)
		}
	}
	if s := b.emu.Stats(); s.AuthFailures != 2 {
		t.Errorf("AuthFailures = %d, want 2", s.AuthFailures)
	}
}

func TestFetchAccount(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{FriendlyName: "Shop"})
	a := b.do(t, "GET", "/2010-04-01/Accounts/"+sid+".json", nil)
	if a.status != 200 || a.str("sid") != sid || a.str("status") != "active" || a.str("friendly_name") != "Shop" || a.str("type") != "Full" {
		t.Errorf("account %d %v", a.status, a.json)
	}
	if err := b.emu.SetAccountStatus(emulator.AccountSuspended); err != nil {
		t.Fatal(err)
	}
	if a := b.do(t, "GET", "/2010-04-01/Accounts/"+sid+".json", nil); a.status != 401 || a.num("code") != 20003 {
		t.Errorf("suspended account: %d %v, want 401 / 20003", a.status, a.json)
	}
}

// The request bucket refuses with 429 / 20429 and an honest Retry-After.
func TestRequestRate(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := setup(t, emulator.Config{Limits: emulator.Limits{Enabled: true, RequestRate: 1, RequestBurst: 2}, Now: clk.Now})
	for i := range 2 {
		if a := b.send(t, msg(to, "x")); a.status != 201 {
			t.Fatalf("request %d: %d %v", i, a.status, a.json)
		}
	}
	a := b.send(t, msg(to, "x"))
	if a.status != 429 || a.num("code") != 20429 || a.header.Get("Retry-After") != "1" {
		t.Fatalf("third request at once: %d %v Retry-After %q, want 429 / 20429 after 1", a.status, a.json, a.header.Get("Retry-After"))
	}
	clk.Advance(time.Second)
	if a := b.send(t, msg(to, "x")); a.status != 201 {
		t.Errorf("after a second: %d %v", a.status, a.json)
	}
	if s := b.emu.Stats(); s.RateLimited != 1 || s.ByErrorCode[20429] != 1 {
		t.Errorf("stats %+v", s)
	}
}

// A pause from the control API is announced by the next request, refuses
// everything until it ends, and counts what its sender sent inside it.
func TestPause(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := setup(t, emulator.Config{Now: clk.Now})
	if a := b.do(t, "POST", "/emulator/ratelimit", nil); a.status != 400 {
		t.Errorf("ratelimit without a body: %d", a.status)
	}
	postJSON(t, b.url+"/emulator/ratelimit", `{"retry_after":2}`)
	a := b.send(t, msg(to, "x"))
	if a.status != 429 || a.header.Get("Retry-After") != "2" {
		t.Fatalf("first request: %d Retry-After %q, want 429 after 2", a.status, a.header.Get("Retry-After"))
	}
	clk.Advance(time.Second)
	a = b.send(t, msg(to, "x"))
	if a.status != 429 || a.header.Get("Retry-After") != "1" {
		t.Errorf("inside the pause: %d Retry-After %q, want 429 after 1", a.status, a.header.Get("Retry-After"))
	}
	clk.Advance(time.Second)
	if a := b.send(t, msg(to, "x")); a.status != 201 {
		t.Errorf("after the pause: %d %v", a.status, a.json)
	}
	s := b.emu.Stats()
	if s.InPause != 1 || s.RateLimited != 2 {
		t.Errorf("InPause %d, RateLimited %d; want 1 and 2", s.InPause, s.RateLimited)
	}
	// The request inside the pause is described with the 429 that
	// announced it, so that a harness can tell whether its sender could
	// have held it back.
	start := clk.Now().Add(-2 * time.Second)
	want := []emulator.InPauseRequest{{
		To: to, Arrived: start.Add(time.Second), PauseLeft: time.Second, UserAgent: "Go-http-client/1.1",
		Opener: emulator.PauseOpener{To: to, Arrived: start, Answered: start, UserAgent: "Go-http-client/1.1"},
	}}
	if !reflect.DeepEqual(s.InPauseRequests, want) {
		t.Errorf("InPauseRequests %+v\nwant %+v", s.InPauseRequests, want)
	}
}

// A request over the concurrency cap gets 429 at once.
func TestConcurrencyCap(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{
		Limits: emulator.Limits{Enabled: true, MaxConcurrent: 1},
		Outage: &emulator.Outage{Mode: emulator.FaultBlackhole},
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { // held by the blackhole until canceled
		defer close(done)
		req, _ := http.NewRequestWithContext(ctx, "POST", b.url+messagesPath, strings.NewReader(msg(to, "x").Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(sid, token)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	}()
	waitFor(t, "the first request to arrive", func() bool { return b.emu.Stats().Requests == 1 })
	a := b.send(t, msg(to, "x"))
	if a.status != 429 || a.num("code") != 20429 || a.header.Get("Retry-After") != "1" {
		t.Errorf("second concurrent request: %d %v", a.status, a.json)
	}
	cancel()
	<-done
	if s := b.emu.Stats(); s.MaxConcurrent != 2 {
		t.Errorf("MaxConcurrent = %d, want 2", s.MaxConcurrent)
	}
}

// Each sender's queue releases segments at its rate and refuses more than
// its window.
func TestSenderQueue(t *testing.T) {
	t.Parallel()
	clk := newClock()
	start := clk.Now()
	b := setup(t, emulator.Config{Limits: emulator.Limits{Enabled: true, SegmentsPerSecond: 1, QueueWindow: 4 * time.Second}, Now: clk.Now})
	two := strings.Repeat("a", 200) // two GSM-7 segments
	for i, want := range []time.Duration{0, 2 * time.Second} {
		if a := b.send(t, msg(to, two)); a.status != 201 {
			t.Fatalf("message %d: %d %v", i, a.status, a.json)
		}
		if got := b.emu.Messages()[i].SendAt.Sub(start); got != want {
			t.Errorf("message %d leaves the queue at +%s, want +%s", i, got, want)
		}
	}
	// Another sender has a queue of its own.
	if a := b.send(t, url.Values{"To": {to}, "From": {"+15005550010"}, "Body": {two}}); a.status != 201 {
		t.Errorf("another sender: %d %v", a.status, a.json)
	}
	if a := b.send(t, msg(to, "x")); a.status != 201 {
		t.Errorf("third message, waiting 4s of a 4s window: %d %v", a.status, a.json)
	}
	a := b.send(t, msg(to, "x"))
	if a.status != 400 || a.num("code") != 21611 {
		t.Errorf("message beyond the window: %d %v, want 400 / 21611", a.status, a.json)
	}
	if s := b.emu.Stats(); s.QueueBacklogSeconds != 5 || s.MaxQueueBacklogSeconds != 4 {
		t.Errorf("backlog %vs (max %vs), want 5s and 4s", s.QueueBacklogSeconds, s.MaxQueueBacklogSeconds)
	}
	clk.Advance(5 * time.Second)
	if s := b.emu.Stats(); s.QueueBacklogSeconds != 0 {
		t.Errorf("backlog after draining: %vs", s.QueueBacklogSeconds)
	}
}

func TestFaults(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	for _, tt := range []struct {
		outage string
		status int
		code   int
	}{
		{`{"mode":"5xx"}`, 500, 20500},
		{`{"mode":"5xx","status":503}`, 503, 20503},
		{`{"mode":"html5xx"}`, 502, 0},
	} {
		postJSON(t, b.url+"/emulator/outage", tt.outage)
		a := b.send(t, msg(to, "x"))
		if a.status != tt.status || a.num("code") != tt.code {
			t.Errorf("outage %s: %d %v", tt.outage, a.status, a.json)
		}
	}
	postJSON(t, b.url+"/emulator/outage", `{"mode":"deliver-drop"}`)
	req, _ := http.NewRequest("POST", b.url+messagesPath, strings.NewReader(msg(to, "x").Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(sid, token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Errorf("deliver-drop answered %d", resp.StatusCode)
	}
	if ms := b.emu.Messages(); len(ms) != 1 || !ms[0].ResponseDropped {
		t.Errorf("deliver-drop recorded %+v, want one message whose answer was dropped", ms)
	}
	if a := b.do(t, "DELETE", "/emulator/outage", nil); a.status != 200 {
		t.Errorf("DELETE outage: %d", a.status)
	}
	if a := b.send(t, msg(to, "x")); a.status != 201 {
		t.Errorf("after the outage: %d %v", a.status, a.json)
	}
	if s := b.emu.Stats(); s.Faulted != 4 || s.ByFault[emulator.FaultDeliverDrop] != 1 || s.Dropped != 1 {
		t.Errorf("stats %+v", s)
	}
}

// An outage with a duration ends on the emulator's clock.
func TestOutageEnds(t *testing.T) {
	t.Parallel()
	clk := newClock()
	b := setup(t, emulator.Config{Now: clk.Now, Outage: &emulator.Outage{Mode: emulator.Fault5xx, Duration: time.Minute}})
	if a := b.send(t, msg(to, "x")); a.status != 500 {
		t.Errorf("inside the outage: %d", a.status)
	}
	clk.Advance(time.Minute)
	if a := b.send(t, msg(to, "x")); a.status != 201 {
		t.Errorf("after the outage: %d", a.status)
	}
	b.emu.Reset()
	if b.emu.CurrentOutage() == nil {
		t.Errorf("Reset did not restart the configured outage")
	}
}

// The control API, over HTTP.
func TestControlAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{})
	if a := b.do(t, "GET", "/emulator/healthz", nil); a.status != 200 || a.json["ok"] != true {
		t.Errorf("healthz %d %v", a.status, a.json)
	}
	postJSON(t, b.url+"/emulator/numbers/79991234567/state", `{"state":"unsubscribed"}`)
	if a := b.do(t, "GET", "/emulator/numbers/+79991234567", nil); a.str("state") != "unsubscribed" || a.str("number") != to {
		t.Errorf("number %v", a.json)
	}
	if a := b.send(t, msg(to, "x")); a.num("code") != 21610 {
		t.Errorf("unsubscribed number: %v", a.json)
	}
	postJSON(t, b.url+"/emulator/numbers/+79991234567/state", `{"state":"ok"}`)
	b.send(t, msg(to, "first"))
	b.send(t, msg("+15005550010", "other"))
	var list struct {
		Count    int                `json:"count"`
		Messages []emulator.Message `json:"messages"`
	}
	getJSON(t, b.url+"/emulator/messages?to=%2B79991234567", &list)
	if list.Count != 1 || list.Messages[0].Body != "first" || list.Messages[0].NumSegments != 1 || list.Messages[0].Encoding != "GSM-7" {
		t.Errorf("messages to the number: %+v", list)
	}
	getJSON(t, b.url+"/emulator/messages", &list)
	if list.Count != 2 {
		t.Errorf("all messages: %d, want 2", list.Count)
	}
	var stats emulator.Stats
	getJSON(t, b.url+"/emulator/stats", &stats)
	if stats.Created != 2 || stats.Requests != 3 {
		t.Errorf("stats %+v", stats)
	}
	postJSON(t, b.url+"/emulator/account", `{"status":"suspended"}`)
	if a := b.send(t, msg(to, "x")); a.status != 401 {
		t.Errorf("suspended: %d", a.status)
	}
	postJSON(t, b.url+"/emulator/reset", ``)
	if s := b.emu.Stats(); s.Requests != 0 || len(b.emu.Messages()) != 0 || b.emu.AccountStatus() != emulator.AccountActive {
		t.Errorf("after reset: %+v", s)
	}
	for _, bad := range []struct{ path, body string }{
		{"/emulator/numbers/+79991234567/state", `{"state":"gone"}`},
		{"/emulator/numbers/12/state", `{"state":"ok"}`},
		{"/emulator/account", `{"status":"asleep"}`},
		{"/emulator/outage", `{"mode":"fire"}`},
		{"/emulator/ratelimit", `{"retry_after":0}`},
		{"/emulator/ratelimit", `{"retry":1}`},
	} {
		resp, err := http.Post(b.url+bad.path, "application/json", strings.NewReader(bad.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("POST %s %s: %d, want 400", bad.path, bad.body, resp.StatusCode)
		}
	}
}

func TestMaxMessages(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{MaxMessages: 2})
	for i := range 3 {
		b.send(t, msg(to, fmt.Sprint(i)))
	}
	ms := b.emu.Messages()
	if len(ms) != 2 || ms[0].Body != "1" || ms[1].Body != "2" {
		t.Errorf("kept %+v, want the last two", ms)
	}
	if s := b.emu.Stats(); s.Created != 3 || s.MessagesKept != 2 {
		t.Errorf("stats %+v", s)
	}
}

func TestNewValidates(t *testing.T) {
	t.Parallel()
	good := emulator.Config{AccountSID: sid, AuthToken: token}
	for _, tt := range []struct {
		name string
		edit func(*emulator.Config)
	}{
		{"bad SID", func(c *emulator.Config) { c.AccountSID = "AC1" }},
		{"empty token", func(c *emulator.Config) { c.AuthToken = "" }},
		{"bad sender", func(c *emulator.Config) { c.Senders = []string{"+1"} }},
		{"bad number", func(c *emulator.Config) { c.Numbers = map[string]emulator.NumberState{"123": emulator.NumberInvalid} }},
		{"bad state", func(c *emulator.Config) { c.Numbers = map[string]emulator.NumberState{to: "gone"} }},
		{"bad region", func(c *emulator.Config) { c.BlockedRegions = []string{"98"} }},
		{"negative rate", func(c *emulator.Config) { c.Limits.RequestRate = -1 }},
		{"negative window", func(c *emulator.Config) { c.Limits.QueueWindow = -time.Second }},
		{"bad outage", func(c *emulator.Config) { c.Outage = &emulator.Outage{Mode: "5xx", Status: 404} }},
		{"negative latency", func(c *emulator.Config) { c.Latency = -1 }},
	} {
		cfg := good
		tt.edit(&cfg)
		if _, err := emulator.New(cfg); err == nil {
			t.Errorf("%s: New succeeded", tt.name)
		} else if strings.Contains(err.Error(), to) {
			t.Errorf("%s: the error shows the number: %v", tt.name, err)
		}
	}
}

func postJSON(t *testing.T, u, body string) {
	t.Helper()
	resp, err := http.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("POST %s: %d %s", u, resp.StatusCode, data)
	}
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
}

// waitFor polls cond every millisecond until it holds, failing the test
// after a deadline of 10s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(10 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline.C:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// A slow outage delays the answer and then handles the request normally.
func TestSlowFault(t *testing.T) {
	t.Parallel()
	b := setup(t, emulator.Config{Outage: &emulator.Outage{Mode: emulator.FaultSlow, Delay: 50 * time.Millisecond}})
	start := time.Now()
	if a := b.send(t, msg(to, "x")); a.status != 201 {
		t.Errorf("slow: %d %v", a.status, a.json)
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("answered after %s, want at least the 50ms delay", d)
	}
}
