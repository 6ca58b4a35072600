package emulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tgnotify/tgnotify/internal/emufault"
)

// MaxTextLength is MAX's limit on a message's text: NewMessageBody.text has
// maxLength 4000 in the schema, counted by the emulator in Unicode code
// points of the raw string, markup included, as JSON Schema counts.
const MaxTextLength = 4000

// maxRequestBytes bounds a request body.
const maxRequestBytes = 1 << 20

// errorBody is MAX's error answer (schema Error): a string code and a
// human-readable message.
type errorBody struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// badRequest is a 400 with MAX's code for a request it cannot use.
func badRequest(format string, args ...any) errorBody {
	return errorBody{Code: "proto.payload", Message: fmt.Sprintf(format, args...)}
}

// userResult is the schema's User (and BotInfo, for GET /me).
type userResult struct {
	UserID           int64  `json:"user_id"`
	FirstName        string `json:"first_name"`
	Name             string `json:"name"`
	Username         string `json:"username"`
	IsBot            bool   `json:"is_bot"`
	LastActivityTime int64  `json:"last_activity_time"`
}

// recipientResult is the schema's Recipient.
type recipientResult struct {
	ChatID   int64  `json:"chat_id"`
	ChatType string `json:"chat_type"`
	UserID   int64  `json:"user_id,omitempty"`
}

// bodyResult is the schema's MessageBody.
type bodyResult struct {
	MID  string `json:"mid"`
	Seq  int64  `json:"seq"`
	Text string `json:"text"`
}

// messageResult is the schema's Message.
type messageResult struct {
	Sender    userResult      `json:"sender"`
	Recipient recipientResult `json:"recipient"`
	Timestamp int64           `json:"timestamp"`
	Body      bodyResult      `json:"body"`
}

// sendResult is the schema's SendMessageResult.
type sendResult struct {
	Message messageResult `json:"message"`
}

// newMessageBody is the part of the schema's NewMessageBody the emulator
// reads. Pointers tell absent fields from empty ones.
type newMessageBody struct {
	Text        *string           `json:"text"`
	Format      *string           `json:"format"`
	Notify      *bool             `json:"notify"`
	Attachments []json.RawMessage `json:"attachments"`
	Link        json.RawMessage   `json:"link"`
}

func (e *Emulator) bot(now time.Time) userResult {
	return userResult{UserID: e.cfg.BotID, FirstName: e.cfg.BotName, Name: e.cfg.BotName, Username: e.cfg.BotUsername,
		IsBot: true, LastActivityTime: now.UnixMilli()}
}

// endpointOf names the endpoint a request is for.
func endpointOf(r *http.Request) string {
	switch {
	case r.URL.Path == "/messages" && r.Method == http.MethodPost:
		return EndpointSend
	case r.URL.Path == "/me" && r.Method == http.MethodGet:
		return EndpointMe
	}
	return EndpointOther
}

// arrivalVerdict is what serveAPI judged of a request when it arrived.
type arrivalVerdict struct {
	at          time.Time     // when the request arrived
	userAgent   string        // its User-Agent header
	sentInPause bool          // sent after a 429 announcing a pause in force had been written
	remaining   time.Duration // how much of that pause was left
	record      int           // its index in Stats.SentInPauseRequests when sentInPause, or -1
}

// serveAPI answers the MAX API. The order of checks is: latency, outage,
// token (401), path (404) and method (405), parameters and body (400), the
// rate limit (429), then for POST /messages the recipient's state
// (403/404).
func (e *Emulator) serveAPI(w http.ResponseWriter, r *http.Request) {
	endpoint := endpointOf(r)
	e.mu.Lock()
	e.stats.Requests++
	e.stats.ByEndpoint[endpoint]++
	// Whether the sender could have known of a pause: one whose 429 had
	// been written at least SenderReactionTime before this request
	// arrived, judged before any simulated latency. A request that arrives
	// after a pause was decided but sooner crossed the answer and is
	// counted apart.
	arrival := arrivalVerdict{at: e.now(), userAgent: r.UserAgent(), record: -1}
	if endpoint != EndpointOther {
		now := arrival.at.UnixNano()
		if known, left, openers := e.limiter.knownAt(now); known {
			arrival.sentInPause, arrival.remaining = true, left
			e.stats.SentInPause++
			if len(e.stats.SentInPauseRequests) < MaxSentInPauseKept {
				arrival.record = len(e.stats.SentInPauseRequests)
				e.stats.SentInPauseRequests = append(e.stats.SentInPauseRequests, SentInPause{
					Endpoint: endpoint, Arrived: arrival.at, PauseLeft: left, UserAgent: arrival.userAgent, Openers: openers,
				})
			}
		} else if e.limiter.pausedAt(now) {
			e.stats.SentCrossing429++
		}
	}
	e.mu.Unlock()

	if !emufault.Sleep(r.Context(), e.closed, e.latency()) {
		return
	}
	f := e.pickFault()
	switch f.Mode {
	case Fault5xx:
		e.count(f.Status)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.Status)
		_, _ = w.Write([]byte(emufault.GatewayPage(f.Status)))
		return
	case FaultJSON5xx:
		e.reply(w, r, f.Status, serverError(f.Status))
		return
	case FaultDrop:
		e.countDropped()
		emufault.DropConnection(w)
		return
	case FaultBlackhole:
		select {
		case <-r.Context().Done():
		case <-f.Release:
			e.countDropped()
		case <-e.closed:
			e.countDropped()
		}
		emufault.DropConnection(w)
		return
	case FaultSlow:
		if !emufault.Sleep(r.Context(), e.closed, f.Delay) {
			return
		}
	}

	switch {
	case r.URL.Query().Has("access_token"):
		e.reply(w, r, http.StatusUnauthorized, errorBody{Code: "verify.token",
			Message: "access_token in the query is no longer supported: send the token in the Authorization header"})
	case !e.tokenMatches(r.Header.Get("Authorization")):
		e.reply(w, r, http.StatusUnauthorized, errorBody{Code: "verify.token", Message: "Invalid access_token"})
	case r.URL.Path != "/messages" && r.URL.Path != "/me":
		e.reply(w, r, http.StatusNotFound, errorBody{Code: "not.found", Message: "Path " + strconv.Quote(r.URL.Path) + " is not found"})
	case endpoint == EndpointOther:
		allow := http.MethodGet
		if r.URL.Path == "/messages" {
			allow = http.MethodPost
		}
		w.Header().Set("Allow", allow)
		e.reply(w, r, http.StatusMethodNotAllowed, errorBody{Code: "method.not.allowed", Message: "Method " + r.Method + " is not allowed"})
	case endpoint == EndpointMe:
		e.getMe(w, r, f, arrival)
	default:
		e.sendMessage(w, r, f, arrival)
	}
}

// getMe answers GET /me.
func (e *Emulator) getMe(w http.ResponseWriter, r *http.Request, f emufault.Fault, arrival arrivalVerdict) {
	e.mu.Lock()
	now := e.now()
	v := e.admitLocked(now)
	e.mu.Unlock()
	if !v.ok {
		e.rateLimited(w, r, v, arrival, "")
		return
	}
	if f.Mode == FaultDeliverDrop {
		e.countDropped()
		emufault.DropConnection(w)
		return
	}
	e.reply(w, r, http.StatusOK, e.bot(now))
}

// admitLocked asks the limiter about one request and counts the verdict.
func (e *Emulator) admitLocked(now time.Time) verdict {
	v := e.limiter.admit(now.UnixNano())
	if v.inPause {
		e.stats.InPause++
	}
	if !v.ok {
		e.stats.RateLimited++
	}
	return v
}

// rateLimited writes a 429 and, once it is on the sender's connection,
// records that the sender can know of the pause.
func (e *Emulator) rateLimited(w http.ResponseWriter, r *http.Request, v verdict, arrival arrivalVerdict, recipient string) {
	if !e.cfg.OmitRetryAfter {
		w.Header().Set("Retry-After", strconv.FormatInt(v.retryAfter, 10))
	}
	e.logRequest(r, http.StatusTooManyRequests, recipient, false)
	if arrival.sentInPause {
		e.log.LogAttrs(r.Context(), slog.LevelWarn, "request sent inside an announced 429 pause",
			slog.String("endpoint", endpointOf(r)), slog.String("recipient", recipient),
			slog.Duration("pause_left_on_arrival", arrival.remaining))
	}
	e.count(http.StatusTooManyRequests)
	writeJSON(w, http.StatusTooManyRequests, errorBody{Code: "too.many.requests", Message: "Too many requests"})
	// From now on the sender can know of the pause: the 429 is on its
	// connection. A sender that is gone never learns of it.
	if err := http.NewResponseController(w).Flush(); err == nil {
		e.mu.Lock()
		at := e.now()
		e.limiter.answered(at.UnixNano(), v.until, PauseOpener{
			Endpoint: endpointOf(r), Recipient: recipient, Arrived: arrival.at, Answered: at, UserAgent: arrival.userAgent,
		})
		e.mu.Unlock()
	}
}

// parseRecipient reads user_id or chat_id from the query.
func parseRecipient(r *http.Request) (Recipient, error) {
	q := r.URL.Query()
	user, chat := q.Get("user_id"), q.Get("chat_id")
	switch {
	case user != "" && chat != "":
		return Recipient{}, errors.New("give user_id or chat_id, not both")
	case user == "" && chat == "":
		return Recipient{}, errors.New("user_id or chat_id is required")
	case user != "":
		id, err := strconv.ParseInt(user, 10, 64)
		if err != nil || id <= 0 {
			return Recipient{}, fmt.Errorf("user_id %q is not a user id", user)
		}
		return User(id), nil
	}
	id, err := strconv.ParseInt(chat, 10, 64)
	if err != nil || id == 0 {
		return Recipient{}, fmt.Errorf("chat_id %q is not a chat id", chat)
	}
	return Chat(id), nil
}

// readBody decodes a NewMessageBody and checks it as MAX's schema does.
func readBody(w http.ResponseWriter, r *http.Request) (newMessageBody, parsedAttachments, error) {
	var b newMessageBody
	var att parsedAttachments
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		return b, att, fmt.Errorf("reading the body: %v", err)
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, att, errors.New("the body is not a NewMessageBody JSON object")
	}
	if b.Format != nil && *b.Format != "html" && *b.Format != "markdown" {
		return b, att, fmt.Errorf("format %q is not one of markdown, html", *b.Format)
	}
	text := ""
	if b.Text != nil {
		text = *b.Text
	}
	if !utf8.ValidString(text) {
		return b, att, errors.New("text is not valid UTF-8")
	}
	if n := utf8.RuneCountInString(text); n > MaxTextLength {
		return b, att, fmt.Errorf("text: size must be between 0 and %d, got %d", MaxTextLength, n)
	}
	if text == "" && len(b.Attachments) == 0 {
		return b, att, errors.New("text or attachments must be set")
	}
	if att, err = parseAttachments(b.Attachments); err != nil {
		return b, att, err
	}
	return b, att, nil
}

// sendMessage handles one POST /messages.
func (e *Emulator) sendMessage(w http.ResponseWriter, r *http.Request, f emufault.Fault, arrival arrivalVerdict) {
	to, err := parseRecipient(r)
	if err != nil {
		e.reply(w, r, http.StatusBadRequest, badRequest("%v", err))
		return
	}
	if arrival.record >= 0 {
		e.mu.Lock()
		if q := e.stats.SentInPauseRequests; arrival.record < len(q) && q[arrival.record].Arrived.Equal(arrival.at) { // not reset since
			q[arrival.record].Recipient = to.String()
		}
		e.mu.Unlock()
	}
	var noPreview bool
	if v := r.URL.Query().Get("disable_link_preview"); v != "" {
		if noPreview, err = strconv.ParseBool(v); err != nil {
			e.reply(w, r, http.StatusBadRequest, badRequest("disable_link_preview %q is not a boolean", v))
			return
		}
	}
	body, att, err := readBody(w, r)
	if err != nil {
		e.reply(w, r, http.StatusBadRequest, badRequest("%v", err))
		return
	}

	var (
		code    = http.StatusOK
		answer  any
		dropped bool
	)
	e.mu.Lock()
	now := e.now()
	v := e.admitLocked(now)
	state := e.states[to]
	switch {
	case !v.ok:
	case state != "" && state != StateOK:
		code, answer = stateFailure(state, to)
	default:
		e.lastMID++
		e.seq[to]++
		dropped = f.Mode == FaultDeliverDrop
		m := Message{
			MessageID:          fmt.Sprintf("mid.%016x", e.lastMID),
			Seq:                e.seq[to],
			Recipient:          to,
			Text:               deref(body.Text),
			Format:             deref(body.Format),
			Notify:             body.Notify == nil || *body.Notify,
			DisableLinkPreview: noPreview,
			Attachments:        len(body.Attachments),
			Images:             att.images,
			Buttons:            att.buttons,
			Time:               now,
			ResponseDropped:    dropped,
		}
		e.messages.add(m)
		e.stats.Delivered++
		rcpt := recipientResult{ChatID: to.ChatID, ChatType: "chat"}
		if to.UserID != 0 {
			// The emulator names a bot's dialog with a user by the user's id.
			rcpt = recipientResult{ChatID: to.UserID, ChatType: "dialog", UserID: to.UserID}
		}
		answer = sendResult{Message: messageResult{
			Sender:    e.bot(now),
			Recipient: rcpt,
			Timestamp: now.UnixMilli(),
			Body:      bodyResult{MID: m.MessageID, Seq: m.Seq, Text: visibleText(m.Text, m.Format)},
		}}
	}
	if dropped {
		e.stats.Dropped++
	}
	e.mu.Unlock()

	if !v.ok {
		e.rateLimited(w, r, v, arrival, to.String())
		return
	}
	if arrival.sentInPause {
		e.log.LogAttrs(r.Context(), slog.LevelWarn, "request sent inside an announced 429 pause",
			slog.String("recipient", to.String()), slog.Duration("pause_left_on_arrival", arrival.remaining), slog.Int("status", code))
	}
	if dropped {
		e.logRequest(r, 0, to.String(), true)
		emufault.DropConnection(w)
		return
	}
	e.logRequest(r, code, to.String(), false)
	e.count(code)
	writeJSON(w, code, answer)
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// visibleText is the text a message shows: for html, without tags and
// with entities decoded (MAX keeps formatting in the body's markup array,
// which the emulator does not build).
func visibleText(text, format string) string {
	if format != "html" {
		return text
	}
	var b bytes.Buffer
	in := false
	for _, r := range text {
		switch {
		case r == '<':
			in = true
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return html.UnescapeString(b.String())
}

// reply counts and writes an answer.
func (e *Emulator) reply(w http.ResponseWriter, r *http.Request, code int, v any) {
	e.count(code)
	e.logRequest(r, code, "", false)
	writeJSON(w, code, v)
}

// logRequest logs one answer at debug level, never with the token.
func (e *Emulator) logRequest(r *http.Request, code int, recipient string, dropped bool) {
	e.log.LogAttrs(r.Context(), slog.LevelDebug, "request",
		slog.String("method", r.Method), slog.String("path", r.URL.Path), slog.String("recipient", recipient),
		slog.Int("status", code), slog.Bool("response_dropped", dropped))
}

func (e *Emulator) count(code int) {
	e.mu.Lock()
	e.stats.ByCode[code]++
	e.mu.Unlock()
}

func (e *Emulator) countDropped() {
	e.mu.Lock()
	e.stats.Dropped++
	e.mu.Unlock()
}

// writeJSON writes v as a JSON answer with the given status, without
// escaping <, > and & as \u003c and so on.
func writeJSON(w http.ResponseWriter, code int, v any) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(bytes.TrimSuffix(body.Bytes(), []byte("\n")))
}

// latency draws the delay of one answer.
func (e *Emulator) latency() time.Duration {
	if e.cfg.Latency == 0 && e.cfg.LatencyJitter == 0 {
		return 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	j := time.Duration((2*e.rng.Float64() - 1) * float64(e.cfg.LatencyJitter))
	return max(e.cfg.Latency+j, 0)
}

// pickFault decides whether the running outage hits this request; the
// zero Fault means none.
func (e *Emulator) pickFault() emufault.Fault {
	e.mu.Lock()
	defer e.mu.Unlock()
	f, hit := e.outage.Pick(e.now(), e.rng)
	if hit {
		e.stats.Faulted++
		e.stats.ByFault[f.Mode]++
	}
	return f
}
