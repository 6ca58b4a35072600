package emulator

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tgnotify/tgnotify/internal/emufault"
	"github.com/tgnotify/tgnotify/pkg/smstext"
)

// apiPrefix is the path of the account resources.
const apiPrefix = "/2010-04-01/Accounts/"

// maxBodyChars is the longest Body Twilio accepts (21617).
const maxBodyChars = 1600

// maxFormBytes bounds a request body.
const maxFormBytes = 64 << 10

// errorBody is Twilio's JSON error answer.
type errorBody struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
	Status   int    `json:"status"`
}

// apiError is an error answer with its headers.
type apiError struct {
	body       errorBody
	retryAfter time.Duration // Retry-After of a 429
}

func twilioError(status, code int, format string, args ...any) *apiError {
	return &apiError{body: errorBody{
		Code:     code,
		Message:  fmt.Sprintf(format, args...),
		MoreInfo: "https://www.twilio.com/docs/errors/" + strconv.Itoa(code),
		Status:   status,
	}}
}

// messageResource is Twilio's Message resource.
type messageResource struct {
	AccountSID          string            `json:"account_sid"`
	APIVersion          string            `json:"api_version"`
	Body                string            `json:"body"`
	DateCreated         string            `json:"date_created"`
	DateSent            *string           `json:"date_sent"`
	DateUpdated         string            `json:"date_updated"`
	Direction           string            `json:"direction"`
	ErrorCode           *int              `json:"error_code"`
	ErrorMessage        *string           `json:"error_message"`
	From                *string           `json:"from"`
	MessagingServiceSID *string           `json:"messaging_service_sid"`
	NumMedia            string            `json:"num_media"`
	NumSegments         string            `json:"num_segments"`
	Price               *string           `json:"price"`
	PriceUnit           string            `json:"price_unit"`
	SID                 string            `json:"sid"`
	Status              string            `json:"status"`
	SubresourceURIs     map[string]string `json:"subresource_uris"`
	To                  string            `json:"to"`
	URI                 string            `json:"uri"`
}

// accountResource is Twilio's Account resource.
type accountResource struct {
	AuthToken       string            `json:"auth_token"`
	DateCreated     string            `json:"date_created"`
	DateUpdated     string            `json:"date_updated"`
	FriendlyName    string            `json:"friendly_name"`
	OwnerAccountSID string            `json:"owner_account_sid"`
	SID             string            `json:"sid"`
	Status          string            `json:"status"`
	SubresourceURIs map[string]string `json:"subresource_uris"`
	Type            string            `json:"type"`
	URI             string            `json:"uri"`
}

// twilioDate formats a time as Twilio does: RFC 2822 in GMT.
func twilioDate(t time.Time) string { return t.UTC().Format(time.RFC1123Z) }

// Resources the emulator serves.
const (
	routeNone = iota
	routeAccount
	routeMessages
)

// route parses /2010-04-01/Accounts/{sid}.json and
// /2010-04-01/Accounts/{sid}/Messages.json.
func route(path string) (sid string, which int) {
	rest, ok := strings.CutPrefix(path, apiPrefix)
	if !ok {
		return "", routeNone
	}
	if s, ok := strings.CutSuffix(rest, "/Messages.json"); ok && s != "" && !strings.Contains(s, "/") {
		return s, routeMessages
	}
	if s, ok := strings.CutSuffix(rest, ".json"); ok && s != "" && !strings.Contains(s, "/") {
		return s, routeAccount
	}
	return "", routeNone
}

// peekTo returns the To parameter of a request's form body without
// consuming it: the body is read (up to maxFormBytes) and put back in front
// of what is left of it, so that createMessage reads it as it came. It
// returns "" for a body that is not a form.
func peekTo(r *http.Request) string {
	if r.Body == nil || r.Body == http.NoBody {
		return ""
	}
	data, _ := io.ReadAll(io.LimitReader(r.Body, maxFormBytes))
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.MultiReader(bytes.NewReader(data), r.Body), r.Body}
	q, err := url.ParseQuery(string(data))
	if err != nil {
		return ""
	}
	return q.Get("To")
}

// serveAPI answers the Twilio API. The order of checks is: concurrency,
// latency, outage, authentication (401), resource (404), method (405),
// limits (429), then the request's parameters and recipient.
func (e *Emulator) serveAPI(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	e.stats.Requests++
	e.inFlight++
	e.stats.MaxConcurrent = max(e.stats.MaxConcurrent, e.inFlight)
	arrival := e.now()
	inPause, left, opener := e.limiter.knownPause(arrival)
	record := -1
	if inPause {
		e.stats.InPause++
		if len(e.stats.InPauseRequests) < MaxInPauseKept {
			record = len(e.stats.InPauseRequests)
			e.stats.InPauseRequests = append(e.stats.InPauseRequests, InPauseRequest{
				Arrived: arrival, PauseLeft: left, UserAgent: r.UserAgent(), Opener: opener,
			})
		}
	}
	overConcurrent := e.cfg.Limits.Enabled && e.inFlight > int64(e.cfg.Limits.MaxConcurrent)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		e.inFlight--
		e.mu.Unlock()
	}()
	if inPause {
		e.log.LogAttrs(r.Context(), slog.LevelWarn, "request sent inside an announced 429 pause", slog.String("path", e.logPath(r.URL.Path)))
		if record >= 0 {
			to := peekTo(r)
			e.mu.Lock()
			if q := e.stats.InPauseRequests; record < len(q) && q[record].Arrived.Equal(arrival) { // not reset since
				q[record].To = to
			}
			e.mu.Unlock()
		}
	}
	if overConcurrent {
		e.reply(w, r, e.tooMany("Too Many Requests", time.Second))
		return
	}
	if !emufault.Sleep(r.Context(), e.closed, e.latency()) {
		return
	}
	f := e.pickFault()
	switch f.Mode {
	case Fault5xx:
		code := 20500
		if f.Status == http.StatusServiceUnavailable {
			code = 20503
		}
		e.reply(w, r, twilioError(f.Status, code, "%s", http.StatusText(f.Status)))
		return
	case FaultHTML5xx:
		e.countStatus(f.Status, 0)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.Status)
		_, _ = w.Write([]byte(emufault.GatewayPage(f.Status)))
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

	user, pass, ok := r.BasicAuth()
	if !ok || !e.credentialsMatch(user, pass) || e.AccountStatus() != AccountActive {
		e.reply(w, r, twilioError(http.StatusUnauthorized, 20003, "Authenticate"))
		return
	}
	sid, which := route(r.URL.Path)
	if which == routeNone || sid != e.cfg.AccountSID {
		e.reply(w, r, twilioError(http.StatusNotFound, 20404, "The requested resource %s was not found", r.URL.Path))
		return
	}
	want := http.MethodPost
	if which == routeAccount {
		want = http.MethodGet
	}
	if r.Method != want {
		w.Header().Set("Allow", want)
		e.reply(w, r, twilioError(http.StatusMethodNotAllowed, 20004, "Method not allowed"))
		return
	}
	e.mu.Lock()
	v := e.limiter.admit(e.now())
	e.mu.Unlock()
	if !v.ok {
		// Read the recipient before answering: the body may be gone after.
		op := PauseOpener{Arrived: arrival, UserAgent: r.UserAgent()}
		if v.announces && which == routeMessages {
			op.To = peekTo(r)
		}
		e.reply(w, r, e.tooMany("Too Many Requests", v.retryAfter))
		if v.announces {
			e.mu.Lock()
			op.Answered = e.now()
			e.limiter.answered(op.Answered, op)
			e.mu.Unlock()
		}
		return
	}
	if which == routeAccount {
		e.fetchAccount(w, r)
		return
	}
	e.createMessage(w, r, f)
}

// tooMany is a 429 / 20429 answer.
func (e *Emulator) tooMany(msg string, retryAfter time.Duration) *apiError {
	a := twilioError(http.StatusTooManyRequests, 20429, "%s", msg)
	if !e.cfg.Limits.NoRetryAfter {
		a.retryAfter = retryAfter
	}
	return a
}

// fetchAccount answers the Account resource.
func (e *Emulator) fetchAccount(w http.ResponseWriter, r *http.Request) {
	e.mu.Lock()
	since := e.stats.Since
	status := e.account
	e.mu.Unlock()
	sid := e.cfg.AccountSID
	e.countStatus(http.StatusOK, 0)
	e.log.LogAttrs(r.Context(), slog.LevelDebug, "fetch account", slog.Int("status", http.StatusOK))
	writeJSON(w, http.StatusOK, accountResource{
		AuthToken:       e.cfg.AuthToken,
		DateCreated:     twilioDate(since),
		DateUpdated:     twilioDate(since),
		FriendlyName:    e.cfg.FriendlyName,
		OwnerAccountSID: sid,
		SID:             sid,
		Status:          string(status),
		SubresourceURIs: map[string]string{"messages": apiPrefix + sid + "/Messages.json"},
		Type:            "Full",
		URI:             apiPrefix + sid + ".json",
	})
}

// createMessage handles one POST .../Messages.json.
func (e *Emulator) createMessage(w http.ResponseWriter, r *http.Request, f emufault.Fault) {
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		e.reply(w, r, twilioError(http.StatusBadRequest, 20001, "Invalid request body: %v", err))
		return
	}
	to, from, service, body := r.PostForm.Get("To"), r.PostForm.Get("From"), r.PostForm.Get("MessagingServiceSid"), r.PostForm.Get("Body")
	if a := e.checkMessage(to, from, service, body); a != nil {
		e.reply(w, r, a)
		return
	}
	size := smstext.Measure(body)
	sender, status := from, "queued"
	if service != "" {
		sender, status = service, "accepted"
	}

	e.mu.Lock()
	now := e.now()
	sendAt, queued := e.limiter.enqueue(sender, size.Segments, now)
	if !queued {
		e.mu.Unlock()
		e.reply(w, r, twilioError(http.StatusBadRequest, 21611, "This 'From' number has exceeded the maximum number of queued messages"))
		return
	}
	e.stats.MaxQueueBacklogSeconds = max(e.stats.MaxQueueBacklogSeconds, sendAt.Sub(now).Seconds())
	e.nextSID++
	sid := fmt.Sprintf("SM%032x", e.nextSID)
	dropped := f.Mode == FaultDeliverDrop
	e.messages.add(Message{
		SID:                 sid,
		To:                  to,
		From:                from,
		MessagingServiceSID: service,
		Body:                body,
		Encoding:            size.Encoding.String(),
		NumSegments:         size.Segments,
		Status:              status,
		Time:                now,
		SendAt:              sendAt,
		ResponseDropped:     dropped,
	})
	e.stats.Created++
	e.stats.Segments += int64(size.Segments)
	if dropped {
		e.stats.Dropped++
	} else {
		e.stats.ByCode[http.StatusCreated]++
	}
	e.mu.Unlock()

	e.log.LogAttrs(r.Context(), slog.LevelDebug, "message created",
		slog.String("sid", sid), slog.String("to", maskPhone(to)), slog.Int("segments", size.Segments),
		slog.String("encoding", size.Encoding.String()), slog.Bool("response_dropped", dropped))
	if dropped {
		emufault.DropConnection(w)
		return
	}
	res := messageResource{
		AccountSID:      e.cfg.AccountSID,
		APIVersion:      "2010-04-01",
		Body:            body,
		DateCreated:     twilioDate(now),
		DateUpdated:     twilioDate(now),
		Direction:       "outbound-api",
		NumMedia:        "0",
		NumSegments:     strconv.Itoa(size.Segments),
		PriceUnit:       "USD",
		SID:             sid,
		Status:          status,
		SubresourceURIs: map[string]string{"media": apiPrefix + e.cfg.AccountSID + "/Messages/" + sid + "/Media.json"},
		To:              to,
		URI:             apiPrefix + e.cfg.AccountSID + "/Messages/" + sid + ".json",
	}
	if service != "" {
		// Twilio reports 0 segments until the service has picked a sender.
		res.MessagingServiceSID, res.NumSegments = &service, "0"
	} else {
		res.From = &from
	}
	writeJSON(w, http.StatusCreated, res)
}

// checkMessage validates a message's parameters and recipient, in the
// order Twilio reports them, and returns the error answer, if any.
func (e *Emulator) checkMessage(to, from, service, body string) *apiError {
	switch {
	case to == "":
		return twilioError(http.StatusBadRequest, 21604, "A 'To' phone number is required.")
	case from == "" && service == "":
		return twilioError(http.StatusBadRequest, 21603, "A 'From' or 'MessagingServiceSid' parameter is required to send a message.")
	case strings.TrimSpace(body) == "":
		return twilioError(http.StatusBadRequest, 21602, "Message body is required.")
	case utf8.RuneCountInString(body) > maxBodyChars:
		return twilioError(http.StatusBadRequest, 21617, "The concatenated message body exceeds the 1600 character limit.")
	case !e164Pattern.MatchString(to):
		return twilioError(http.StatusBadRequest, 21211, "The 'To' number %s is not a valid phone number.", to)
	case from != "" && !validSender(from):
		return twilioError(http.StatusBadRequest, 21212, "The 'From' number %s is not a valid phone number, shortcode, or alphanumeric sender ID.", from)
	case from != "" && len(e.cfg.Senders) > 0 && !contains(e.cfg.Senders, from):
		return twilioError(http.StatusBadRequest, 21606, "The 'From' phone number provided (%s) is not a valid message-capable Twilio phone number for this destination/account.", from)
	case service != "" && !mgPattern.MatchString(service):
		return twilioError(http.StatusNotFound, 20404, "The requested resource Messaging Service %s was not found", service)
	}
	for _, p := range e.cfg.BlockedRegions {
		if strings.HasPrefix(to, p) {
			return twilioError(http.StatusBadRequest, 21408, "Permission to send an SMS has not been enabled for the region indicated by the 'To' number: %s.", to)
		}
	}
	switch e.NumberState(to) {
	case NumberInvalid:
		return twilioError(http.StatusBadRequest, 21211, "The 'To' number %s is not a valid phone number.", to)
	case NumberUnsubscribed:
		return twilioError(http.StatusBadRequest, 21610, "Attempt to send to unsubscribed recipient")
	case NumberNotMobile:
		return twilioError(http.StatusBadRequest, 21614, "'To' number is not a valid mobile number")
	case NumberUnverified:
		return twilioError(http.StatusBadRequest, 21608, "The number %s is unverified. Trial accounts cannot send messages to unverified numbers; verify %s at twilio.com/user/account/phone-numbers/verified, or purchase a Twilio number to send messages to unverified numbers.", to, to)
	case NumberUnreachable:
		return twilioError(http.StatusBadRequest, 21612, "The 'To' phone number: %s, is not currently reachable using the 'From' phone number: %s via SMS.", to, from)
	case NumberForbidden:
		return twilioError(http.StatusForbidden, 20403, "Forbidden")
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// reply counts, logs and writes an error answer.
func (e *Emulator) reply(w http.ResponseWriter, r *http.Request, a *apiError) {
	e.countStatus(a.body.Status, a.body.Code)
	e.log.LogAttrs(r.Context(), slog.LevelDebug, "api error",
		slog.String("path", e.logPath(r.URL.Path)), slog.Int("status", a.body.Status), slog.Int("code", a.body.Code))
	if a.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt(int64(a.retryAfter/time.Second), 10))
	}
	writeJSON(w, a.body.Status, a.body)
	if a.body.Status == http.StatusTooManyRequests {
		// Put the 429 on the wire now: from here the sender can know of it.
		_ = http.NewResponseController(w).Flush()
	}
}

// logPath is the request path without the Account SID.
func (e *Emulator) logPath(path string) string {
	return strings.ReplaceAll(path, e.cfg.AccountSID, "{AccountSid}")
}

func (e *Emulator) countStatus(status, code int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.stats.ByCode[status]++
	if code != 0 {
		e.stats.ByErrorCode[code]++
	}
	switch status {
	case http.StatusTooManyRequests:
		e.stats.RateLimited++
	case http.StatusUnauthorized:
		e.stats.AuthFailures++
	}
}

func (e *Emulator) countDropped() {
	e.mu.Lock()
	e.stats.Dropped++
	e.mu.Unlock()
}

// writeJSON writes v as a JSON answer with the given status.
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
