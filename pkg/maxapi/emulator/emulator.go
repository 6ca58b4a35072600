package emulator

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/internal/emufault"
)

// DefaultMaxMessages is how many delivered messages an emulator keeps when
// Config.MaxMessages is zero.
const DefaultMaxMessages = 1_000_000

// Defaults of the bot that GET /me describes.
const (
	DefaultBotID       = 1
	DefaultBotName     = "Emulator"
	DefaultBotUsername = "emulator_bot"
)

// maxTokenLength bounds Config.Token: MAX's tokens are under a hundred
// characters.
const maxTokenLength = 512

// Config configures an Emulator.
type Config struct {
	// Token is the bot token the emulator accepts in the Authorization
	// header; any other gets 401. It must be 1..512 characters of visible
	// ASCII (what a header value can carry).
	Token string
	// BotID, BotName and BotUsername describe the bot in GET /me and as
	// the sender of its messages (defaults 1, "Emulator",
	// "emulator_bot").
	BotID       int64
	BotName     string
	BotUsername string
	// Limits is the rate limit; the zero value disables it. Use
	// DefaultLimits for MAX's 30 requests per second.
	Limits Limits
	// OmitRetryAfter leaves the Retry-After header off 429 answers, to test
	// a client's default pause. MAX does not document the header.
	OmitRetryAfter bool
	// Latency delays every API answer; LatencyJitter spreads it uniformly
	// over [Latency-LatencyJitter, Latency+LatencyJitter]. Latency is real
	// time even when Now is a fake clock.
	Latency       time.Duration
	LatencyJitter time.Duration
	// States sets how messages to some recipients are answered (see
	// RecipientState); the others are delivered.
	States map[Recipient]RecipientState
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

// Emulator is a MAX Bot API stand-in. It is an http.Handler and is safe for
// concurrent use. Its zero value is not usable; call New.
type Emulator struct {
	cfg    Config
	now    func() time.Time
	log    *slog.Logger
	mux    *http.ServeMux
	closed chan struct{}
	once   sync.Once

	mu       sync.Mutex
	rng      *rand.Rand
	limiter  *limiter
	states   map[Recipient]RecipientState
	outage   *emufault.Running
	lastMID  int64
	seq      map[Recipient]int64
	messages messageLog
	stats    Stats
}

var _ http.Handler = (*Emulator)(nil)

// ValidToken reports whether token can be an emulator's token: 1..512
// characters of visible ASCII.
func ValidToken(token string) bool {
	if token == "" || len(token) > maxTokenLength {
		return false
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return false
		}
	}
	return true
}

// New validates cfg and returns an emulator.
func New(cfg Config) (*Emulator, error) {
	if !ValidToken(cfg.Token) {
		return nil, errors.New("emulator: Config.Token must be 1..512 characters of visible ASCII (no spaces)")
	}
	if cfg.BotID == 0 {
		cfg.BotID = DefaultBotID
	}
	if cfg.BotID < 0 {
		return nil, errors.New("emulator: Config.BotID must be positive")
	}
	if cfg.BotName == "" {
		cfg.BotName = DefaultBotName
	}
	if cfg.BotUsername == "" {
		cfg.BotUsername = DefaultBotUsername
	}
	var err error
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
	for r, s := range cfg.States {
		if !r.valid() {
			return nil, fmt.Errorf("emulator: Config.States: invalid recipient %+v (one of a positive user id or a non-zero chat id)", r)
		}
		if _, err := ParseRecipientState(string(s)); err != nil {
			return nil, fmt.Errorf("emulator: Config.States[%s]: %w", r, err)
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
		now:    cfg.Now,
		log:    cfg.Logger.With("component", "max-emulator"),
		closed: make(chan struct{}),
	}
	e.outage = emufault.NewRunning(e.log)
	e.mux = e.controlRoutes()
	e.Reset()
	return e, nil
}

// ServeHTTP serves the MAX API and the control endpoints under /emulator/.
func (e *Emulator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/emulator/") {
		e.mux.ServeHTTP(w, r)
		return
	}
	e.serveAPI(w, r)
}

// Close releases requests held by a blackhole outage. The emulator keeps
// serving; Close only makes a server shutdown prompt. It is safe to call
// more than once.
func (e *Emulator) Close() {
	e.once.Do(func() { close(e.closed) })
}

// Reset returns the emulator to its configured state: it forgets messages,
// statistics, rate-limit state and pauses, restores the configured
// recipient states, and restarts the configured outage (or ends the running
// one). Message ids keep growing across resets, as MAX's never repeat.
func (e *Emulator) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	e.rng = rand.New(rand.NewPCG(e.cfg.Seed, e.cfg.Seed^0x9e3779b97f4a7c15))
	e.limiter = newLimiter(e.cfg.Limits)
	e.states = make(map[Recipient]RecipientState, len(e.cfg.States))
	for r, s := range e.cfg.States {
		if s != StateOK {
			e.states[r] = s
		}
	}
	e.outage.Stop()
	if e.cfg.Outage != nil {
		e.outage.Start(*e.cfg.Outage, now)
	}
	e.seq = make(map[Recipient]int64)
	e.messages = messageLog{max: e.cfg.MaxMessages}
	e.stats = newStats(now)
}

// SetState sets how messages to a recipient are answered.
func (e *Emulator) SetState(r Recipient, s RecipientState) error {
	if !r.valid() {
		return fmt.Errorf("invalid recipient %+v (one of a positive user id or a non-zero chat id)", r)
	}
	if _, err := ParseRecipientState(string(s)); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s == StateOK {
		delete(e.states, r)
	} else {
		e.states[r] = s
	}
	e.log.Info("recipient state set", "recipient", r.String(), "state", string(s))
	return nil
}

// State returns how messages to a recipient are answered.
func (e *Emulator) State(r Recipient) RecipientState {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.states[r]; ok {
		return s
	}
	return StateOK
}

// Block makes the recipient answer 403 chat.denied
// (error.dialog.suspended), as a user who stopped the bot does.
func (e *Emulator) Block(r Recipient) error { return e.SetState(r, StateBlocked) }

// Unblock makes the recipient deliver again.
func (e *Emulator) Unblock(r Recipient) error { return e.SetState(r, StateOK) }

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
	// RetryAfter is the pause in whole seconds.
	RetryAfter int64 `json:"retry_after"`
}

// OpenPause makes the next API request get 429 with Retry-After set to the
// given seconds. The pause is announced, and starts, with that 429; every
// request inside it is then refused and counted like any other.
func (e *Emulator) OpenPause(p PauseRequest) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.limiter.open(p.RetryAfter); err != nil {
		return err
	}
	e.log.Info("pause opened", "retry_after", p.RetryAfter)
	return nil
}

// Messages returns the delivered messages kept, oldest first.
func (e *Emulator) Messages() []Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.messages.list(nil)
}

// RecipientMessages returns the delivered messages kept for one recipient,
// oldest first.
func (e *Emulator) RecipientMessages(r Recipient) []Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.messages.list(func(m *Message) bool { return m.Recipient == r })
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
