package emulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/emufault"
)

// envelope is the Bot API's answer.
type envelope struct {
	OK          bool        `json:"ok"`
	Result      any         `json:"result,omitempty"`
	ErrorCode   int         `json:"error_code,omitempty"`
	Description string      `json:"description,omitempty"`
	Parameters  *parameters `json:"parameters,omitempty"`
}

// parameters is the Bot API's ResponseParameters.
type parameters struct {
	MigrateToChatID int64 `json:"migrate_to_chat_id,omitempty"`
	RetryAfter      int64 `json:"retry_after,omitempty"`
}

func failure(code int, description string) envelope {
	return envelope{ErrorCode: code, Description: description}
}

// userResult is the Bot API's User object for the bot itself.
type userResult struct {
	ID                      int64  `json:"id"`
	IsBot                   bool   `json:"is_bot"`
	FirstName               string `json:"first_name"`
	Username                string `json:"username"`
	CanJoinGroups           bool   `json:"can_join_groups"`
	CanReadAllGroupMessages bool   `json:"can_read_all_group_messages"`
	SupportsInlineQueries   bool   `json:"supports_inline_queries"`
}

// senderResult is the Bot API's User object as a message's "from".
type senderResult struct {
	ID        int64  `json:"id"`
	IsBot     bool   `json:"is_bot"`
	FirstName string `json:"first_name"`
	Username  string `json:"username"`
}

// chatResult is the Bot API's Chat object.
type chatResult struct {
	ID        int64  `json:"id"`
	Type      string `json:"type"`
	Title     string `json:"title,omitempty"`
	FirstName string `json:"first_name,omitempty"`
}

// messageResult is the Bot API's Message object as sendMessage and
// sendPhoto return it.
type messageResult struct {
	MessageID             int64           `json:"message_id"`
	MessageThreadID       int64           `json:"message_thread_id,omitempty"`
	IsTopicMessage        bool            `json:"is_topic_message,omitempty"`
	From                  senderResult    `json:"from"`
	Chat                  chatResult      `json:"chat"`
	Date                  int64           `json:"date"`
	Text                  string          `json:"text,omitempty"`
	Photo                 []photoResult   `json:"photo,omitempty"`
	Caption               string          `json:"caption,omitempty"`
	ShowCaptionAboveMedia bool            `json:"show_caption_above_media,omitempty"`
	LinkPreviewOptions    *LinkPreview    `json:"link_preview_options,omitempty"`
	ReplyMarkup           *keyboardResult `json:"reply_markup,omitempty"`
}

// supergroupIDs are at or below this: -100 followed by ten digits or more.
const supergroupIDs = -1_000_000_000_000

func chatOf(id int64) chatResult {
	switch {
	case id <= supergroupIDs:
		return chatResult{ID: id, Type: "supergroup", Title: fmt.Sprintf("Supergroup %d", id)}
	case id < 0:
		return chatResult{ID: id, Type: "group", Title: fmt.Sprintf("Group %d", id)}
	default:
		return chatResult{ID: id, Type: "private", FirstName: fmt.Sprintf("User %d", id)}
	}
}

func (e *Emulator) bot() *userResult {
	return &userResult{ID: e.botID, IsBot: true, FirstName: "Emulator", Username: e.cfg.BotUsername, CanJoinGroups: true}
}

// Bot API method names, as Telegram spells them (matching is
// case-insensitive, as Telegram's is).
const (
	methodSendMessage = "sendMessage"
	methodSendPhoto   = "sendPhoto"
	methodGetMe       = "getMe"
	methodUnknown     = "unknown"
)

// isSend reports whether a method sends a message (and so is rate
// limited).
func isSend(method string) bool { return method == methodSendMessage || method == methodSendPhoto }

// splitBotPath splits /bot<token>/<method>.
func splitBotPath(path string) (token, method string, ok bool) {
	rest, ok := strings.CutPrefix(path, "/bot")
	if !ok {
		return "", "", false
	}
	token, method, ok = strings.Cut(rest, "/")
	if !ok || token == "" || method == "" || strings.Contains(method, "/") {
		return "", "", false
	}
	return token, method, true
}

func canonicalMethod(m string) string {
	switch strings.ToLower(m) {
	case "sendmessage":
		return methodSendMessage
	case "sendphoto":
		return methodSendPhoto
	case "getme":
		return methodGetMe
	}
	return methodUnknown
}

// serveBotAPI answers /bot<token>/<method>. The order of checks is: latency,
// outage, token (401), method (404), parameters (400), then for
// sendMessage and sendPhoto rate limits (429), chat state (403/400), the
// forum topic, the text or caption, and the photo (400).
func (e *Emulator) serveBotAPI(w http.ResponseWriter, r *http.Request) {
	token, rawMethod, ok := splitBotPath(r.URL.Path)
	method := canonicalMethod(rawMethod)
	e.mu.Lock()
	e.stats.Requests++
	e.stats.ByMethod[method]++
	// Whether the sender could have known of a pause: one whose 429 had
	// been written at least SenderReactionTime before this request
	// arrived, judged before any simulated latency. A request that arrives
	// after a pause was decided but sooner crossed the answer and is
	// counted apart.
	arrival := arrivalVerdict{at: e.now(), userAgent: r.UserAgent(), record: -1}
	if isSend(method) {
		now := arrival.at.UnixNano()
		if known, left, openers := e.limiter.knownAt(now); known {
			arrival.sentInPause, arrival.remaining = true, left
			e.stats.SentInAnyPause++
			if len(e.stats.SentInPauseRequests) < MaxSentInPauseKept {
				arrival.record = len(e.stats.SentInPauseRequests)
				e.stats.SentInPauseRequests = append(e.stats.SentInPauseRequests, SentInPause{
					Arrived: arrival.at, PauseLeft: left, UserAgent: arrival.userAgent, Openers: openers,
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
		e.reply(w, method, f.Status, failure(f.Status, http.StatusText(f.Status)))
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
	case !ok:
		e.reply(w, method, http.StatusNotFound, failure(http.StatusNotFound, "Not Found"))
	case !e.tokenMatches(token):
		e.reply(w, method, http.StatusUnauthorized, failure(http.StatusUnauthorized, "Unauthorized"))
	case method == methodGetMe:
		if f.Mode == FaultDeliverDrop {
			e.countDropped()
			emufault.DropConnection(w)
			return
		}
		e.reply(w, method, http.StatusOK, envelope{OK: true, Result: e.bot()})
	case isSend(method):
		e.send(w, r, method, f, arrival)
	default:
		e.reply(w, method, http.StatusNotFound, failure(http.StatusNotFound, "Not Found"))
	}
}

// arrivalVerdict is what serveBotAPI judged of a request when it arrived.
type arrivalVerdict struct {
	at          time.Time     // when the request arrived
	userAgent   string        // its User-Agent header
	sentInPause bool          // sent after a 429 announcing a pause in force had been written
	remaining   time.Duration // how much of that pause was left
	record      int           // its index in Stats.SentInPauseRequests when sentInPause, or -1
}

// send handles one sendMessage or sendPhoto request.
func (e *Emulator) send(w http.ResponseWriter, r *http.Request, method string, f emufault.Fault, arrival arrivalVerdict) {
	raw, err := readParams(w, r)
	if errors.Is(err, errTooLarge) {
		e.reply(w, method, http.StatusRequestEntityTooLarge, failure(http.StatusRequestEntityTooLarge, "Request Entity Too Large"))
		return
	}
	if err != nil {
		e.reply(w, method, http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: "+err.Error()))
		return
	}
	p, desc := parseSend(method, raw)
	if desc != "" {
		e.reply(w, method, http.StatusBadRequest, failure(http.StatusBadRequest, desc))
		return
	}
	var plain, contentErr string
	if method == methodSendPhoto {
		plain, contentErr = checkCaption(p.text, p.parseMode)
	} else {
		plain, contentErr = checkText(p.text, p.parseMode)
	}
	if p.threadID != 0 && chatOf(p.chatID).Type != "supergroup" {
		// Only a supergroup has forum topics: a private chat or a basic
		// group has no thread to post into.
		contentErr = "Bad Request: message thread not found"
	}

	var (
		code    = http.StatusOK
		env     envelope
		dropped bool
	)
	e.mu.Lock()
	now := e.now()
	v := e.limiter.admit(now.UnixNano(), p.chatID, p.paid)
	if v.inAnyPause {
		e.stats.InAnyPause++
	}
	if v.punished {
		e.stats.InPause++
	}
	if i := arrival.record; i >= 0 && i < len(e.stats.SentInPauseRequests) && e.stats.SentInPauseRequests[i].Arrived.Equal(arrival.at) {
		e.stats.SentInPauseRequests[i].ChatID = p.chatID
	}
	if contentErr == "" && p.photo != "" {
		contentErr = e.checkPhotoLocked(p.photo)
	}
	migrateTo, migrated := e.migrate[p.chatID]
	state := e.chats[p.chatID]
	switch {
	case !v.ok:
		code = http.StatusTooManyRequests
		env = failure(code, fmt.Sprintf("Too Many Requests: retry after %d", v.retryAfter))
		env.Parameters = &parameters{RetryAfter: v.retryAfter}
		e.stats.RateLimited++
		e.stats.RateLimitedByScope[v.scope]++
	case migrated:
		code = http.StatusBadRequest
		env = failure(code, "Bad Request: group chat was upgraded to a supergroup chat")
		env.Parameters = &parameters{MigrateToChatID: migrateTo}
	case state != "" && state != ChatOK:
		code, env = stateFailure(state, p.chatID)
	case contentErr != "":
		code = http.StatusBadRequest
		env = failure(code, contentErr)
	default:
		id := e.nextID[p.chatID] + 1
		e.nextID[p.chatID] = id
		dropped = f.Mode == FaultDeliverDrop
		m := Message{
			MessageID:             id,
			Method:                method,
			ChatID:                p.chatID,
			Text:                  p.text,
			ParseMode:             p.parseMode,
			Photo:                 p.photo,
			ShowCaptionAboveMedia: p.captionAbove,
			MessageThreadID:       p.threadID,
			DisableNotification:   p.disableNotification,
			ProtectContent:        p.protectContent,
			AllowPaidBroadcast:    p.paid,
			HasReplyMarkup:        p.hasReplyMarkup,
			Buttons:               p.buttons,
			LinkPreview:           p.preview,
			Time:                  now,
			ResponseDropped:       dropped,
		}
		e.messages.add(m)
		e.stats.Delivered++
		res := &messageResult{
			MessageID:          id,
			MessageThreadID:    p.threadID,
			IsTopicMessage:     p.threadID != 0,
			From:               senderResult{ID: e.botID, IsBot: true, FirstName: "Emulator", Username: e.cfg.BotUsername},
			Chat:               chatOf(p.chatID),
			Date:               now.Unix(),
			LinkPreviewOptions: p.preview,
		}
		if p.hasReplyMarkup {
			res.ReplyMarkup = &keyboardResult{InlineKeyboard: p.buttons}
		}
		if method == methodSendPhoto {
			fileID := photoFileID(p.photo)
			e.photos[fileID] = true
			res.Photo, res.Caption, res.ShowCaptionAboveMedia = photoSizes(fileID), plain, p.captionAbove
		} else {
			res.Text = plain
		}
		env = envelope{OK: true, Result: res}
	}
	if dropped {
		e.stats.Dropped++
	} else {
		e.stats.ByCode[code]++
	}
	e.mu.Unlock()

	e.log.LogAttrs(r.Context(), slog.LevelDebug, method,
		slog.Int64("chat_id", p.chatID), slog.Int("status", code), slog.String("description", env.Description),
		slog.Bool("response_dropped", dropped))
	if arrival.sentInPause {
		e.log.LogAttrs(r.Context(), slog.LevelWarn, "request sent inside an announced 429 pause",
			slog.Int64("chat_id", p.chatID), slog.Duration("pause_left_on_arrival", arrival.remaining), slog.Int("status", code))
	}
	if dropped {
		emufault.DropConnection(w)
		return
	}
	writeJSON(w, code, env)
	if code == http.StatusTooManyRequests {
		// From now on the sender can know of the pause: the 429 is on its
		// connection. A sender that is gone never learns of it.
		if err := http.NewResponseController(w).Flush(); err == nil {
			e.mu.Lock()
			at := e.now()
			e.stats.Answered429++
			e.limiter.answered(at.UnixNano(), v.until, PauseOpener{
				ChatID: p.chatID, Arrived: arrival.at, Answered: at, UserAgent: arrival.userAgent,
			})
			e.mu.Unlock()
		}
	}
}

// stateFailure is the answer for a chat that does not accept messages.
func stateFailure(s ChatState, chatID int64) (int, envelope) {
	switch s {
	case ChatBlocked:
		return http.StatusForbidden, failure(http.StatusForbidden, "Forbidden: bot was blocked by the user")
	case ChatDeactivated:
		return http.StatusForbidden, failure(http.StatusForbidden, "Forbidden: user is deactivated")
	case ChatKicked:
		if chatID <= supergroupIDs {
			return http.StatusForbidden, failure(http.StatusForbidden, "Forbidden: bot was kicked from the supergroup chat")
		}
		return http.StatusForbidden, failure(http.StatusForbidden, "Forbidden: bot was kicked from the group chat")
	case ChatForbidden:
		return http.StatusForbidden, failure(http.StatusForbidden, "Forbidden: bot can't send messages to the user")
	default:
		return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: chat not found")
	}
}

// reply counts and writes an answer.
func (e *Emulator) reply(w http.ResponseWriter, method string, code int, env envelope) {
	e.count(code)
	e.log.Debug(method, "status", code, "description", env.Description)
	writeJSON(w, code, env)
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

// writeJSON writes v as a JSON answer with the given status. Like
// Telegram's, the JSON does not escape <, > and & as \u003c and so on.
func writeJSON(w http.ResponseWriter, code int, v any) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
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
