package emulator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/internal/emufault"
)

// The bot's incoming side, as Telegram serves it: updates queued for the bot
// (a user blocked or unblocked it, the bot was added to or removed from a
// group, a user wrote to it), taken with getUpdates (long polling) or pushed
// to a webhook set with setWebhook. Telegram allows one consumer of a bot's
// updates: getUpdates fails with 409 while a webhook is set, and a
// getUpdates request ends the one in progress with 409.

// Update kinds the emulator produces, as Telegram names them in
// allowed_updates.
const (
	UpdateMessage      = "message"
	UpdateMyChatMember = "my_chat_member"
)

// Chat member statuses of the bot in a chat, as Telegram's ChatMember
// objects carry them.
const (
	MemberCreator       = "creator"
	MemberAdministrator = "administrator"
	MemberMember        = "member"
	MemberRestricted    = "restricted"
	MemberLeft          = "left"
	MemberKicked        = "kicked"
)

// Telegram's 409 answers.
const (
	conflictWebhookActive = "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"
	conflictTerminated    = "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running"
)

// SecretTokenHeader is the header in which Telegram sends a webhook's
// secret_token with every update it posts.
const SecretTokenHeader = "X-Telegram-Bot-Api-Secret-Token"

// maxPendingUpdates bounds the updates kept for the bot; older ones are
// forgotten (Telegram keeps them for 24 hours).
const maxPendingUpdates = 10_000

// maxPollTimeout caps getUpdates' timeout, as Telegram's server does (it
// answers after at most about 50 seconds whatever was asked).
const maxPollTimeout = 50 * time.Second

// Webhook delivery retry: Telegram repeats a post that did not get a 2xx
// "after a reasonable amount of attempts"; the emulator retries for as long
// as the webhook is set, with a short capped backoff so tests run fast.
const (
	webhookRetryMin = 50 * time.Millisecond
	webhookRetryMax = time.Second
	webhookTimeout  = 10 * time.Second
)

// defaultAllowedUpdates are the kinds delivered when allowed_updates was
// never given or given empty: every kind except chat_member and the
// reactions, which the emulator does not produce anyway.
var defaultAllowedUpdates = []string{UpdateMessage, UpdateMyChatMember}

// secretTokenPattern is what Telegram accepts as a webhook's secret_token.
var secretTokenPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)

// updates is the bot's update queue and its consumer: a getUpdates in
// progress or a webhook. It has its own lock; when both are needed it is
// taken before the emulator's.
type updates struct {
	client *http.Client

	mu       sync.Mutex
	queue    []pendingUpdate
	nextID   int64
	allowed  []string
	arrived  chan struct{} // closed (and replaced) when an update is queued
	poll     *activePoll
	polls    int64
	maxPolls int
	active   int
	conflict int64
	hooked   int64 // getUpdates refused because a webhook is set
	members  map[int64]string
	hook     *webhook
	produced int64
	dropped  int64
}

// pendingUpdate is an update waiting to be confirmed.
type pendingUpdate struct {
	id   int64
	kind string
	body json.RawMessage
}

// activePoll is a getUpdates request waiting for updates; a newer one
// terminates it.
type activePoll struct {
	terminated chan struct{}
}

// webhook is a webhook set with setWebhook and the goroutine delivering to
// it.
type webhook struct {
	url            string
	secret         string
	maxConnections int
	stop           chan struct{}
	done           chan struct{}

	// Guarded by updates.mu.
	delivered     int64
	failed        int64
	lastErrorDate int64
	lastError     string
}

func newUpdates() *updates {
	return &updates{
		client:  &http.Client{Timeout: webhookTimeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
		arrived: make(chan struct{}),
		members: map[int64]string{},
		nextID:  1,
		allowed: slices.Clone(defaultAllowedUpdates),
	}
}

// reset forgets the queue, the members, the allowed kinds, the counters
// and the webhook (its goroutine stops).
func (u *updates) reset() {
	u.mu.Lock()
	hook := u.hook
	u.hook = nil
	u.queue, u.members, u.nextID = nil, map[int64]string{}, 1
	u.allowed = slices.Clone(defaultAllowedUpdates)
	u.polls, u.maxPolls, u.conflict, u.hooked, u.produced, u.dropped = 0, 0, 0, 0, 0, 0
	u.mu.Unlock()
	hook.close()
}

func (h *webhook) close() {
	if h == nil {
		return
	}
	close(h.stop)
	<-h.done
}

// updatesMethod names the Bot API methods of the incoming side; ok is false
// for any other method.
func updatesMethod(m string) (string, bool) {
	switch strings.ToLower(m) {
	case "getupdates":
		return "getUpdates", true
	case "setwebhook":
		return "setWebhook", true
	case "deletewebhook":
		return "deleteWebhook", true
	case "getwebhookinfo":
		return "getWebhookInfo", true
	}
	return "", false
}

// serveUpdates serves the incoming side's Bot API methods and control
// endpoints; it reports false for every other request.
func (e *Emulator) serveUpdates(w http.ResponseWriter, r *http.Request) bool {
	if _, pattern := e.updateRoutes.Handler(r); pattern != "" {
		e.updateRoutes.ServeHTTP(w, r) // sets the path values
		return true
	}
	token, raw, ok := splitBotPath(r.URL.Path)
	if !ok {
		return false
	}
	method, ok := updatesMethod(raw)
	if !ok {
		return false
	}
	e.mu.Lock()
	e.stats.Requests++
	e.stats.ByMethod[method]++
	e.mu.Unlock()
	switch f := e.pickFault(); f.Mode {
	case Fault5xx:
		e.count(f.Status)
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(f.Status)
		_, _ = w.Write([]byte(emufault.GatewayPage(f.Status)))
		return true
	case FaultJSON5xx:
		e.reply(w, method, f.Status, failure(f.Status, http.StatusText(f.Status)))
		return true
	case FaultDrop, FaultBlackhole, FaultDeliverDrop:
		e.countDropped()
		emufault.DropConnection(w)
		return true
	}
	if !e.tokenMatches(token) {
		e.reply(w, method, http.StatusUnauthorized, failure(http.StatusUnauthorized, "Unauthorized"))
		return true
	}
	params, err := readParams(w, r)
	if err != nil {
		e.reply(w, method, http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: "+err.Error()))
		return true
	}
	var code int
	var env envelope
	switch method {
	case "getUpdates":
		code, env = e.getUpdates(r.Context(), params)
	case "setWebhook":
		code, env = e.setWebhook(params)
	case "deleteWebhook":
		code, env = e.deleteWebhook(params)
	case "getWebhookInfo":
		code, env = http.StatusOK, envelope{OK: true, Result: e.webhookInfo()}
	}
	if code == 0 {
		return true // the client went away
	}
	e.reply(w, method, code, env)
	return true
}

// getUpdates answers one getUpdates request: it confirms the updates below
// offset, then answers at once with the pending ones or waits for one up to
// timeout seconds. A newer request ends it with 409, as a webhook does.
func (e *Emulator) getUpdates(ctx context.Context, p map[string]string) (int, envelope) {
	offset, err := intParam(p, "offset", 0)
	if err != nil {
		return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: "+err.Error())
	}
	limit, err := intParam(p, "limit", 100)
	if err != nil {
		return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: "+err.Error())
	}
	limit = min(max(limit, 1), 100)
	secs, err := intParam(p, "timeout", 0)
	if err != nil {
		return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: "+err.Error())
	}
	timeout := min(time.Duration(max(secs, 0))*time.Second, maxPollTimeout)
	var allowed []string
	if raw, ok := p["allowed_updates"]; ok {
		if allowed, err = parseAllowed(raw); err != nil {
			return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: "+err.Error())
		}
	}

	u := e.upd
	u.mu.Lock()
	if u.hook != nil {
		u.hooked++
		u.mu.Unlock()
		return http.StatusConflict, failure(http.StatusConflict, conflictWebhookActive)
	}
	if prev := u.poll; prev != nil {
		close(prev.terminated)
		u.conflict++
	}
	me := &activePoll{terminated: make(chan struct{})}
	u.poll = me
	u.polls++
	u.active++
	u.maxPolls = max(u.maxPolls, u.active)
	if allowed != nil {
		u.allowed = allowed
	}
	u.confirmLocked(offset)
	u.mu.Unlock()
	defer func() {
		u.mu.Lock()
		u.active--
		if u.poll == me {
			u.poll = nil
		}
		u.mu.Unlock()
	}()

	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	for {
		u.mu.Lock()
		batch := u.batchLocked(int(limit))
		arrived := u.arrived
		u.mu.Unlock()
		if len(batch) > 0 || timer == nil {
			return http.StatusOK, envelope{OK: true, Result: batch}
		}
		select {
		case <-arrived:
		case <-me.terminated:
			return http.StatusConflict, failure(http.StatusConflict, conflictTerminated)
		case <-timer:
			timer = nil
		case <-ctx.Done():
			return 0, envelope{}
		case <-e.closed:
			return http.StatusOK, envelope{OK: true, Result: []json.RawMessage{}}
		}
	}
}

// confirmLocked forgets the updates an offset confirms: those below a
// positive offset; with a negative offset, all but the last -offset.
func (u *updates) confirmLocked(offset int64) {
	switch {
	case offset > 0:
		i := 0
		for i < len(u.queue) && u.queue[i].id < offset {
			i++
		}
		u.queue = u.queue[i:]
	case offset < 0:
		if keep := int(-offset); keep < len(u.queue) {
			u.queue = u.queue[len(u.queue)-keep:]
		}
	}
}

// batchLocked returns up to limit pending updates, oldest first.
func (u *updates) batchLocked(limit int) []json.RawMessage {
	out := make([]json.RawMessage, 0, min(limit, len(u.queue)))
	for _, p := range u.queue[:min(limit, len(u.queue))] {
		out = append(out, p.body)
	}
	return out
}

// parseAllowed reads allowed_updates: a JSON array of update kinds; an
// empty one means the default.
func parseAllowed(raw string) ([]string, error) {
	var kinds []string
	if err := json.Unmarshal([]byte(raw), &kinds); err != nil {
		return nil, errors.New("can't parse allowed updates")
	}
	if len(kinds) == 0 {
		return slices.Clone(defaultAllowedUpdates), nil
	}
	return kinds, nil
}

// intParam reads an integer parameter.
func intParam(p map[string]string, name string, def int64) (int64, error) {
	v, ok := p[name]
	if !ok || v == "" {
		return def, nil
	}
	n, err := strconv.ParseInt(strings.Trim(v, `"`), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("field %q must be an integer", name)
	}
	return n, nil
}

// setWebhook sets (or, with an empty url, removes) the webhook. Unlike
// Telegram the emulator accepts http URLs and any port, and posts one
// update at a time whatever max_connections says.
func (e *Emulator) setWebhook(p map[string]string) (int, envelope) {
	raw := strings.Trim(p["url"], `"`)
	if raw == "" {
		return e.deleteWebhook(p)
	}
	target, err := url.Parse(raw)
	if err != nil || (target.Scheme != "http" && target.Scheme != "https") || target.Host == "" {
		return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: bad webhook: An HTTPS URL must be provided for webhook")
	}
	secret := strings.Trim(p["secret_token"], `"`)
	if secret != "" && !secretTokenPattern.MatchString(secret) {
		return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: secret token contains unallowed characters")
	}
	maxConn, err := intParam(p, "max_connections", 40)
	if err != nil || maxConn < 1 || maxConn > 100 {
		return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: bad webhook: max_connections must be between 1 and 100")
	}
	var allowed []string
	if a, ok := p["allowed_updates"]; ok {
		if allowed, err = parseAllowed(a); err != nil {
			return http.StatusBadRequest, failure(http.StatusBadRequest, "Bad Request: "+err.Error())
		}
	}
	h := &webhook{url: target.String(), secret: secret, maxConnections: int(maxConn), stop: make(chan struct{}), done: make(chan struct{})}
	u := e.upd
	u.mu.Lock()
	old := u.hook
	u.hook = h
	if allowed != nil {
		u.allowed = allowed
	}
	if p["drop_pending_updates"] == "true" {
		u.queue = nil
	}
	if u.poll != nil {
		close(u.poll.terminated)
		u.poll = nil
	}
	u.mu.Unlock()
	old.close()
	go e.deliverWebhook(h)
	e.log.Info("webhook set", "url", redactURL(h.url), "secret", h.secret != "")
	return http.StatusOK, envelope{OK: true, Result: true, Description: "Webhook was set"}
}

// deleteWebhook removes the webhook; getUpdates works again.
func (e *Emulator) deleteWebhook(p map[string]string) (int, envelope) {
	u := e.upd
	u.mu.Lock()
	h := u.hook
	u.hook = nil
	if p["drop_pending_updates"] == "true" {
		u.queue = nil
	}
	u.mu.Unlock()
	if h == nil {
		return http.StatusOK, envelope{OK: true, Result: true, Description: "Webhook is already deleted"}
	}
	h.close()
	e.log.Info("webhook deleted")
	return http.StatusOK, envelope{OK: true, Result: true, Description: "Webhook was deleted"}
}

// WebhookInfo is getWebhookInfo's result.
type WebhookInfo struct {
	URL                  string   `json:"url"`
	HasCustomCertificate bool     `json:"has_custom_certificate"`
	PendingUpdateCount   int      `json:"pending_update_count"`
	LastErrorDate        int64    `json:"last_error_date,omitempty"`
	LastErrorMessage     string   `json:"last_error_message,omitempty"`
	MaxConnections       int      `json:"max_connections,omitempty"`
	AllowedUpdates       []string `json:"allowed_updates,omitempty"`
}

func (e *Emulator) webhookInfo() WebhookInfo {
	u := e.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	info := WebhookInfo{PendingUpdateCount: len(u.queue)}
	if h := u.hook; h != nil {
		info.URL, info.MaxConnections, info.AllowedUpdates = h.url, h.maxConnections, slices.Clone(u.allowed)
		info.LastErrorDate, info.LastErrorMessage = h.lastErrorDate, h.lastError
	}
	return info
}

// deliverWebhook posts the pending updates to the webhook, oldest first and
// one at a time, until it is deleted or replaced: an update answered with a
// 2xx is confirmed, any other answer or a failure is retried.
func (e *Emulator) deliverWebhook(h *webhook) {
	defer close(h.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-h.stop:
		case <-e.closed:
		}
		cancel()
	}()
	u := e.upd
	backoff := webhookRetryMin
	for {
		u.mu.Lock()
		var next *pendingUpdate
		if len(u.queue) > 0 {
			p := u.queue[0]
			next = &p
		}
		arrived := u.arrived
		u.mu.Unlock()
		if next == nil {
			select {
			case <-arrived:
				continue
			case <-ctx.Done():
				return
			}
		}
		err := e.post(ctx, h, next.body)
		if ctx.Err() != nil {
			return
		}
		u.mu.Lock()
		if err == nil {
			if len(u.queue) > 0 && u.queue[0].id == next.id {
				u.queue = u.queue[1:]
			}
			h.delivered++
		} else {
			h.failed++
			h.lastErrorDate, h.lastError = e.now().Unix(), err.Error()
		}
		u.mu.Unlock()
		if err == nil {
			backoff = webhookRetryMin
			continue
		}
		e.log.Debug("webhook delivery failed; retrying", "update_id", next.id, "err", err, "in", backoff)
		if !emufault.Sleep(ctx, nil, backoff) {
			return
		}
		backoff = min(backoff*2, webhookRetryMax)
	}
}

// post posts one update to the webhook with its secret token.
func (e *Emulator) post(ctx context.Context, h *webhook, body []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if h.secret != "" {
		req.Header.Set(SecretTokenHeader, h.secret)
	}
	resp, err := e.upd.client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return fmt.Errorf("connection failed: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("wrong response from the webhook: %s", resp.Status)
	}
	return nil
}

// redactURL keeps a URL's scheme, host and path: a webhook URL may carry a
// secret in its query.
func redactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "?"
	}
	return u.Scheme + "://" + u.Host + u.Path
}

// The Bot API's objects of an update, as Telegram writes them.
type (
	updateUser struct {
		ID           int64  `json:"id"`
		IsBot        bool   `json:"is_bot"`
		FirstName    string `json:"first_name"`
		Username     string `json:"username,omitempty"`
		LanguageCode string `json:"language_code,omitempty"`
	}
	chatMember struct {
		Status    string     `json:"status"`
		User      updateUser `json:"user"`
		UntilDate *int64     `json:"until_date,omitempty"`
	}
	chatMemberUpdated struct {
		Chat          chatResult `json:"chat"`
		From          updateUser `json:"from"`
		Date          int64      `json:"date"`
		OldChatMember chatMember `json:"old_chat_member"`
		NewChatMember chatMember `json:"new_chat_member"`
	}
	messageEntity struct {
		Type   string `json:"type"`
		Offset int    `json:"offset"`
		Length int    `json:"length"`
	}
	incomingMessage struct {
		MessageID int64           `json:"message_id"`
		From      updateUser      `json:"from"`
		Chat      chatResult      `json:"chat"`
		Date      int64           `json:"date"`
		Text      string          `json:"text"`
		Entities  []messageEntity `json:"entities,omitempty"`
	}
	update struct {
		UpdateID     int64              `json:"update_id"`
		Message      *incomingMessage   `json:"message,omitempty"`
		MyChatMember *chatMemberUpdated `json:"my_chat_member,omitempty"`
	}
)

// person is the user who acts in chat: by when given, else the private
// chat's user, else a group's administrator.
func person(chat, by int64) updateUser {
	switch {
	case by != 0:
		return updateUser{ID: by, FirstName: fmt.Sprintf("User %d", by), LanguageCode: "en"}
	case chat > 0:
		return updateUser{ID: chat, FirstName: fmt.Sprintf("User %d", chat), LanguageCode: "en"}
	default:
		return updateUser{ID: 1, FirstName: "Admin"}
	}
}

func (e *Emulator) botMember(status string) chatMember {
	m := chatMember{Status: status, User: updateUser{ID: e.botID, IsBot: true, FirstName: "Emulator", Username: e.cfg.BotUsername}}
	if status == MemberKicked {
		zero := int64(0)
		m.UntilDate = &zero
	}
	return m
}

// enqueueLocked queues an update built by fill with the next update id,
// unless its kind is not allowed, and returns the id (zero when dropped).
func (u *updates) enqueueLocked(kind string, fill func(*update)) (int64, error) {
	if !slices.Contains(u.allowed, kind) {
		u.dropped++
		return 0, nil
	}
	up := update{UpdateID: u.nextID}
	fill(&up)
	body, err := json.Marshal(up)
	if err != nil {
		return 0, err
	}
	u.nextID++
	u.produced++
	u.queue = append(u.queue, pendingUpdate{id: up.UpdateID, kind: kind, body: body})
	if over := len(u.queue) - maxPendingUpdates; over > 0 {
		u.queue = u.queue[over:]
	}
	close(u.arrived)
	u.arrived = make(chan struct{})
	return up.UpdateID, nil
}

// memberLocked is the bot's status in chat: remembered from the last
// change, else what the chat's state implies.
func (e *Emulator) memberLocked(chat int64) string {
	if s, ok := e.upd.members[chat]; ok {
		return s
	}
	switch e.ChatState(chat) {
	case ChatBlocked, ChatKicked:
		return MemberKicked
	}
	return MemberMember
}

// SetMember changes the bot's status in a chat as a user (or, in a group,
// the administrator by; zero means the chat's user or an administrator)
// would: the chat then answers messages accordingly — in a private chat
// kicked is "bot was blocked by the user", in a group kicked and left are
// "bot was kicked" — and a my_chat_member update tells the bot. It returns
// the update's id, or zero when the status does not change or
// my_chat_member updates are not allowed. Private chats take member and
// kicked only.
func (e *Emulator) SetMember(chat int64, status string, by int64) (int64, error) {
	switch status {
	case MemberMember, MemberAdministrator, MemberKicked, MemberLeft:
	default:
		return 0, fmt.Errorf("status %q: want member, administrator, kicked or left", status)
	}
	if chat == 0 {
		return 0, errors.New("chat id must not be zero")
	}
	if chat > 0 && status != MemberMember && status != MemberKicked {
		return 0, fmt.Errorf("status %q: a private chat's user can only block (kicked) or unblock (member) the bot", status)
	}
	u := e.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	old := e.memberLocked(chat)
	if old == status {
		return 0, nil
	}
	state := ChatOK
	switch {
	case status == MemberKicked && chat > 0:
		state = ChatBlocked
	case status == MemberKicked || status == MemberLeft:
		state = ChatKicked
	}
	if err := e.SetChatState(chat, state); err != nil {
		return 0, err
	}
	u.members[chat] = status
	return u.enqueueLocked(UpdateMyChatMember, func(up *update) {
		up.MyChatMember = &chatMemberUpdated{
			Chat: chatOf(chat), From: person(chat, by), Date: e.now().Unix(),
			OldChatMember: e.botMember(old), NewChatMember: e.botMember(status),
		}
	})
}

// BlockByUser makes the user of a private chat block the bot: sending to it
// answers 403 "bot was blocked by the user", and the bot gets a
// my_chat_member update (member → kicked). It returns the update's id.
func (e *Emulator) BlockByUser(chat int64) (int64, error) { return e.SetMember(chat, MemberKicked, 0) }

// UnblockByUser makes the user of a private chat unblock the bot: sending
// delivers again, and the bot gets a my_chat_member update (kicked →
// member). It returns the update's id.
func (e *Emulator) UnblockByUser(chat int64) (int64, error) {
	return e.SetMember(chat, MemberMember, 0)
}

// UserMessage makes the chat's user (or in a group, the user by) write
// text to the bot and returns the message update's id. A user who blocked
// the bot cannot write to it.
func (e *Emulator) UserMessage(chat, by int64, text string) (int64, error) {
	if chat == 0 || text == "" {
		return 0, errors.New("a chat id and a text are required")
	}
	u := e.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	if chat > 0 && e.memberLocked(chat) == MemberKicked {
		return 0, fmt.Errorf("chat %d blocked the bot: unblock it first (or send /start, which does)", chat)
	}
	var entities []messageEntity
	if strings.HasPrefix(text, "/") {
		cmd, _, _ := strings.Cut(text, " ")
		entities = []messageEntity{{Type: "bot_command", Offset: 0, Length: len([]rune(cmd))}}
	}
	id := e.nextMessageID(chat)
	return u.enqueueLocked(UpdateMessage, func(up *update) {
		up.Message = &incomingMessage{MessageID: id, From: person(chat, by), Chat: chatOf(chat), Date: e.now().Unix(), Text: text, Entities: entities}
	})
}

// SendStart makes the user of a private chat press Start (or Restart, when
// they had blocked the bot: that unblocks it first, with its my_chat_member
// update, as Telegram's client does) and returns the ids of the updates it
// produced. A non-empty payload is the deep-link parameter: "/start
// payload". In a group the command is /start@<bot username>, from by.
func (e *Emulator) SendStart(chat, by int64, payload string) ([]int64, error) {
	var ids []int64
	if chat > 0 {
		id, err := e.UnblockByUser(chat)
		if err != nil {
			return nil, err
		}
		if id != 0 {
			ids = append(ids, id)
		}
	}
	text := "/start"
	if chat < 0 {
		text += "@" + e.cfg.BotUsername
	}
	if payload != "" {
		text += " " + payload
	}
	id, err := e.UserMessage(chat, by, text)
	if err != nil {
		return ids, err
	}
	if id != 0 {
		ids = append(ids, id)
	}
	return ids, nil
}

// nextMessageID takes the next message id of a chat (incoming and outgoing
// messages share them, as in Telegram's private chats).
func (e *Emulator) nextMessageID(chat int64) int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID[chat]++
	return e.nextID[chat]
}

// UpdatesInfo is what the emulator knows of the bot's updates.
type UpdatesInfo struct {
	// Pending are the updates not confirmed yet.
	Pending int `json:"pending"`
	// NextUpdateID is the id the next update gets.
	NextUpdateID int64 `json:"next_update_id"`
	// Produced counts the updates queued; DroppedNotAllowed those not
	// queued because allowed_updates excluded their kind.
	Produced          int64 `json:"produced"`
	DroppedNotAllowed int64 `json:"dropped_not_allowed"`
	// Polls counts getUpdates requests that polled; MaxConcurrentPolls is
	// the most that were in progress at once (a terminated one ends as the
	// next starts, so two pollers make it 2).
	Polls              int64 `json:"polls"`
	MaxConcurrentPolls int   `json:"max_concurrent_polls"`
	// Conflicts counts getUpdates requests terminated by a newer one (409);
	// WebhookConflicts those refused because a webhook was set (409).
	Conflicts        int64 `json:"conflicts"`
	WebhookConflicts int64 `json:"webhook_conflicts"`
	// Webhook is the webhook, if one is set.
	Webhook *WebhookStatus `json:"webhook,omitempty"`
}

// WebhookStatus describes the webhook and its deliveries.
type WebhookStatus struct {
	URL       string `json:"url"`
	HasSecret bool   `json:"has_secret"`
	Delivered int64  `json:"delivered"`
	Failed    int64  `json:"failed"`
	LastError string `json:"last_error,omitempty"`
}

// Updates returns what the emulator knows of the bot's updates.
func (e *Emulator) Updates() UpdatesInfo {
	u := e.upd
	u.mu.Lock()
	defer u.mu.Unlock()
	info := UpdatesInfo{Pending: len(u.queue), NextUpdateID: u.nextID, Produced: u.produced, DroppedNotAllowed: u.dropped,
		Polls: u.polls, MaxConcurrentPolls: u.maxPolls, Conflicts: u.conflict, WebhookConflicts: u.hooked}
	if h := u.hook; h != nil {
		info.Webhook = &WebhookStatus{URL: redactURL(h.url), HasSecret: h.secret != "", Delivered: h.delivered, Failed: h.failed, LastError: h.lastError}
	}
	return info
}

// updateControlRoutes returns the control endpoints of the bot's updates:
//
//	GET  /emulator/updates                   UpdatesInfo
//	POST /emulator/chats/{id}/user-block     the user blocks the bot (my_chat_member member → kicked)
//	POST /emulator/chats/{id}/user-unblock   the user unblocks it (kicked → member)
//	POST /emulator/chats/{id}/member         body {"status":"left","by":7}: the bot's status changes
//	POST /emulator/chats/{id}/start          body optional {"payload":"x","by":7}: /start (unblocks first)
//	POST /emulator/chats/{id}/message        body {"text":"hi","by":7}: a user writes to the bot
//
// Each change answers {"update_ids":[…]}.
func (e *Emulator) updateControlRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /emulator/updates", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.Updates())
	})
	one := func(id int64, err error) (any, error) {
		if err != nil {
			return nil, err
		}
		ids := []int64{}
		if id != 0 {
			ids = append(ids, id)
		}
		return updateIDs{IDs: ids}, nil
	}
	mux.HandleFunc("POST /emulator/chats/{id}/user-block", e.chatHandler(func(id int64, _ *http.Request) (any, error) {
		return one(e.BlockByUser(id))
	}))
	mux.HandleFunc("POST /emulator/chats/{id}/user-unblock", e.chatHandler(func(id int64, _ *http.Request) (any, error) {
		return one(e.UnblockByUser(id))
	}))
	mux.HandleFunc("POST /emulator/chats/{id}/member", e.chatHandler(func(id int64, r *http.Request) (any, error) {
		var body struct {
			Status string `json:"status"`
			By     int64  `json:"by"`
		}
		if err := decodeBody(r, &body); err != nil {
			return nil, err
		}
		return one(e.SetMember(id, body.Status, body.By))
	}))
	mux.HandleFunc("POST /emulator/chats/{id}/start", e.chatHandler(func(id int64, r *http.Request) (any, error) {
		var body struct {
			Payload string `json:"payload"`
			By      int64  `json:"by"`
		}
		if r.ContentLength != 0 {
			if err := decodeBody(r, &body); err != nil {
				return nil, err
			}
		}
		ids, err := e.SendStart(id, body.By, body.Payload)
		if err != nil {
			return nil, err
		}
		if ids == nil {
			ids = []int64{}
		}
		return updateIDs{IDs: ids}, nil
	}))
	mux.HandleFunc("POST /emulator/chats/{id}/message", e.chatHandler(func(id int64, r *http.Request) (any, error) {
		var body struct {
			Text string `json:"text"`
			By   int64  `json:"by"`
		}
		if err := decodeBody(r, &body); err != nil {
			return nil, err
		}
		return one(e.UserMessage(id, body.By, body.Text))
	}))
	return mux
}

type updateIDs struct {
	IDs []int64 `json:"update_ids"`
}
