package emulator

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/internal/emufault"
)

// DefaultMaxMessages is how many delivered messages an emulator keeps when
// Config.MaxMessages is zero.
const DefaultMaxMessages = 1_000_000

// Config configures an Emulator.
type Config struct {
	// Token is the bot token the emulator accepts; any other gets 401. It
	// must look like a Bot API token: digits, ':', then letters, digits,
	// '_' and '-'. The digits are the bot's user id.
	Token string
	// BotUsername is getMe's username (default "emulator_bot").
	BotUsername string
	// Limits are the rate limits; the zero value disables them. Use
	// DefaultLimits for Telegram's.
	Limits Limits
	// Latency delays every Bot API answer; LatencyJitter spreads it
	// uniformly over [Latency-LatencyJitter, Latency+LatencyJitter]. Latency
	// is real time even when Now is a fake clock.
	Latency       time.Duration
	LatencyJitter time.Duration
	// Blocked, Deactivated and NotFound are chats answered with 403 "bot was
	// blocked by the user", 403 "user is deactivated" and 400 "chat not
	// found".
	Blocked     []int64
	Deactivated []int64
	NotFound    []int64
	// Migrate maps a group's chat id to the supergroup it became: sending to
	// the key gets 400 with parameters.migrate_to_chat_id.
	Migrate map[int64]int64
	// Outage, if set, starts an outage at creation (and again at Reset).
	Outage *Outage
	// Now is the clock (default time.Now). Limits, pauses, outage durations
	// and recorded times follow it.
	Now func() time.Time
	// Logger receives debug lines per request and info lines per control
	// change (default: discard). The token is never logged.
	Logger *slog.Logger
	// Seed seeds the randomness of latency jitter and outage probability.
	Seed uint64
	// MaxMessages bounds the delivered messages kept for Messages; older
	// ones are forgotten (still counted in Stats.Delivered). Zero means
	// DefaultMaxMessages.
	MaxMessages int
}

// Emulator is a Telegram Bot API stand-in. It is an http.Handler and is safe
// for concurrent use. Its zero value is not usable; call New.
type Emulator struct {
	cfg    Config
	botID  int64
	now    func() time.Time
	log    *slog.Logger
	mux    *http.ServeMux
	closed chan struct{}
	once   sync.Once
	// upd is the bot's incoming side (updates.go), with its own lock.
	upd          *updates
	updateRoutes *http.ServeMux

	mu       sync.Mutex
	rng      *rand.Rand
	limiter  *limiter
	chats    map[int64]ChatState
	migrate  map[int64]int64
	outage   *emufault.Running
	nextID   map[int64]int64
	photos   map[string]bool // file ids of the photos sent
	messages messageLog
	stats    Stats
}

var _ http.Handler = (*Emulator)(nil)

// tokenPattern is the shape of a Bot API token.
var tokenPattern = regexp.MustCompile(`^([0-9]{1,20}):[A-Za-z0-9_-]{1,128}$`)

// New validates cfg and returns an emulator.
func New(cfg Config) (*Emulator, error) {
	m := tokenPattern.FindStringSubmatch(cfg.Token)
	if m == nil {
		return nil, errors.New("emulator: Config.Token must look like a bot token (digits, ':', then letters, digits, '_' or '-')")
	}
	botID, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil || botID <= 0 {
		return nil, errors.New("emulator: Config.Token must start with a positive bot id")
	}
	if cfg.BotUsername == "" {
		cfg.BotUsername = "emulator_bot"
	}
	if cfg.Limits, err = cfg.Limits.withDefaults(); err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	if cfg.Latency < 0 || cfg.LatencyJitter < 0 {
		return nil, errors.New("emulator: Config.Latency and Config.LatencyJitter must not be negative")
	}
	if cfg.MaxMessages < 0 {
		return nil, errors.New("emulator: Config.MaxMessages must not be negative")
	}
	if cfg.MaxMessages == 0 {
		cfg.MaxMessages = DefaultMaxMessages
	}
	for from, to := range cfg.Migrate {
		if from == 0 || to == 0 || from == to {
			return nil, fmt.Errorf("emulator: Config.Migrate: invalid migration %d -> %d", from, to)
		}
	}
	if cfg.Outage != nil {
		o, err := faults().WithDefaults(*cfg.Outage)
		if err != nil {
			return nil, fmt.Errorf("emulator: Config.Outage: %w", err)
		}
		cfg.Outage = &o
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Emulator{
		cfg:    cfg,
		botID:  botID,
		now:    cfg.Now,
		log:    cfg.Logger.With("component", "botapi-emulator"),
		closed: make(chan struct{}),
	}
	e.outage = emufault.NewRunning(e.log)
	e.mux = e.controlRoutes()
	e.upd, e.updateRoutes = newUpdates(), e.updateControlRoutes()
	e.Reset()
	return e, nil
}

// ServeHTTP serves the Bot API at /bot<token>/<method> and the control
// endpoints under /emulator/; the bot's updates (getUpdates, the webhook
// methods and their control endpoints) are updates.go's.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if e.serveUpdates(w, r) {
		return
	}
	if strings.HasPrefix(r.URL.Path, "/emulator/") {
		e.mux.ServeHTTP(w, r)
		return
	}
	e.serveBotAPI(w, r)
}

// Close releases requests held by a blackhole outage. The emulator keeps
// serving; Close only makes a server shutdown prompt. It is safe to call
// more than once.
func (e *Emulator) Close() {
	e.once.Do(func() { close(e.closed) })
}

// Reset returns the emulator to its configured state: it forgets messages,
// statistics, rate-limit state and pauses, the bot's pending updates and
// its webhook, restores the configured chat states and migrations, and
// restarts the configured outage (or ends the running one).
func (e *Emulator) Reset() {
	e.upd.reset()
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	e.rng = rand.New(rand.NewPCG(e.cfg.Seed, e.cfg.Seed^0x9e3779b97f4a7c15))
	e.limiter = newLimiter(e.cfg.Limits)
	e.chats = make(map[int64]ChatState)
	for _, set := range []struct {
		ids   []int64
		state ChatState
	}{{e.cfg.NotFound, ChatNotFound}, {e.cfg.Deactivated, ChatDeactivated}, {e.cfg.Blocked, ChatBlocked}} {
		for _, id := range set.ids {
			e.chats[id] = set.state
		}
	}
	e.migrate = make(map[int64]int64, len(e.cfg.Migrate))
	for from, to := range e.cfg.Migrate {
		e.migrate[from] = to
	}
	e.outage.Stop()
	if e.cfg.Outage != nil {
		e.outage.Start(*e.cfg.Outage, now)
	}
	e.nextID = make(map[int64]int64)
	e.photos = make(map[string]bool)
	e.messages = messageLog{max: e.cfg.MaxMessages}
	e.stats = newStats(now)
}

// ChatState is how the emulator answers messages to a chat.
type ChatState string

// Chat states.
const (
	// ChatOK delivers.
	ChatOK ChatState = "ok"
	// ChatBlocked answers 403 "Forbidden: bot was blocked by the user".
	ChatBlocked ChatState = "blocked"
	// ChatDeactivated answers 403 "Forbidden: user is deactivated".
	ChatDeactivated ChatState = "deactivated"
	// ChatKicked answers 403 "Forbidden: bot was kicked from the group chat"
	// (supergroup chat for -100… ids).
	ChatKicked ChatState = "kicked"
	// ChatNotFound answers 400 "Bad Request: chat not found".
	ChatNotFound ChatState = "not_found"
	// ChatForbidden answers 403 "Forbidden: bot can't send messages to the
	// user", the 403 that is reported to be temporary.
	ChatForbidden ChatState = "forbidden"
)

// ParseChatState checks a chat state's name.
func ParseChatState(s string) (ChatState, error) {
	switch c := ChatState(strings.ToLower(strings.TrimSpace(s))); c {
	case ChatOK, ChatBlocked, ChatDeactivated, ChatKicked, ChatNotFound, ChatForbidden:
		return c, nil
	}
	return "", fmt.Errorf("unknown chat state %q (want ok, blocked, deactivated, kicked, not_found or forbidden)", s)
}

// SetChatState sets how messages to a chat are answered.
func (e *Emulator) SetChatState(chatID int64, s ChatState) error {
	if _, err := ParseChatState(string(s)); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s == ChatOK {
		delete(e.chats, chatID)
	} else {
		e.chats[chatID] = s
	}
	e.log.Info("chat state set", "chat_id", chatID, "state", string(s))
	return nil
}

// ChatState returns how messages to a chat are answered.
func (e *Emulator) ChatState(chatID int64) ChatState {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.chats[chatID]; ok {
		return s
	}
	return ChatOK
}

// Block makes the chat answer 403 "Forbidden: bot was blocked by the user".
func (e *Emulator) Block(chatID int64) { _ = e.SetChatState(chatID, ChatBlocked) }

// Unblock makes the chat deliver again.
func (e *Emulator) Unblock(chatID int64) { _ = e.SetChatState(chatID, ChatOK) }

// Migrate makes the group from answer 400 "group chat was upgraded to a
// supergroup chat" with parameters.migrate_to_chat_id = to. A zero to
// removes the migration.
func (e *Emulator) Migrate(from, to int64) error {
	if from == 0 || from == to {
		return fmt.Errorf("invalid migration %d -> %d", from, to)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if to == 0 {
		delete(e.migrate, from)
	} else {
		e.migrate[from] = to
	}
	e.log.Info("chat migration set", "from", from, "to", to)
	return nil
}

// StartOutage starts an outage, replacing any running one.
func (e *Emulator) StartOutage(o Outage) error {
	o, err := faults().WithDefaults(o)
	if err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.outage.Start(o, e.now())
	e.log.Info("outage started", "mode", string(o.Mode), "probability", o.Probability, "duration", o.Duration)
	return nil
}

// StopOutage ends the running outage, if any, and releases blackholed
// requests.
func (e *Emulator) StopOutage() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if o := e.outage.Stop(); o != nil {
		e.log.Info("outage stopped", "mode", string(o.Mode))
	}
}

// CurrentOutage returns the running outage, or nil.
func (e *Emulator) CurrentOutage() *Outage {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.outage.Current(e.now())
}

// PauseRequest opens a rate-limit pause from the control API.
type PauseRequest struct {
	// Scope is "bot", "paid" or "chat".
	Scope Scope `json:"scope"`
	// ChatID is the chat of scope "chat".
	ChatID int64 `json:"chat_id,omitempty"`
	// RetryAfter is the pause in whole seconds.
	RetryAfter int64 `json:"retry_after"`
}

// OpenPause makes the next sendMessage request of the scope get 429 with
// the given retry_after. The pause is announced, and starts, with that 429;
// requests inside it are then punished and counted like any other.
func (e *Emulator) OpenPause(p PauseRequest) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.limiter.open(p.Scope, p.ChatID, p.RetryAfter); err != nil {
		return err
	}
	e.log.Info("pause opened", "scope", string(p.Scope), "chat_id", p.ChatID, "retry_after", p.RetryAfter)
	return nil
}

// Messages returns the delivered messages kept, oldest first.
func (e *Emulator) Messages() []Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.messages.list(nil)
}

// ChatMessages returns the delivered messages kept for one chat, oldest
// first.
func (e *Emulator) ChatMessages(chatID int64) []Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.messages.list(func(m *Message) bool { return m.ChatID == chatID })
}

// Stats returns a copy of the counters.
func (e *Emulator) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats.clone()
	s.MessagesKept = len(e.messages.buf)
	return s
}

// tokenMatches compares in constant time.
func (e *Emulator) tokenMatches(token string) bool {
	return subtle.ConstantTimeCompare([]byte(token), []byte(e.cfg.Token)) == 1
}
