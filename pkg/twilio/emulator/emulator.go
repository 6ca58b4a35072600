package emulator

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/internal/emufault"
)

// DefaultMaxMessages is how many created messages an emulator keeps when
// Config.MaxMessages is zero.
const DefaultMaxMessages = 100_000

// Config configures an Emulator.
type Config struct {
	// AccountSID is the account the emulator serves (AC followed by 32 hex
	// digits); requests for another get 404 / 20404.
	AccountSID string
	// AuthToken is the auth token it accepts; other credentials get 401 /
	// 20003.
	AuthToken string
	// FriendlyName is the account's name in the Account resource (default
	// "tgnotify emulator").
	FriendlyName string
	// Senders, when set, are the only From numbers the account owns;
	// another gets 400 / 21606. Any Messaging Service SID is accepted.
	Senders []string
	// Limits are the rate limits and sender queues; the zero value
	// disables them. Use DefaultLimits for Twilio's.
	Limits Limits
	// Latency delays every API answer; LatencyJitter spreads it uniformly
	// over [Latency-LatencyJitter, Latency+LatencyJitter]. Real time even
	// when Now is a fake clock.
	Latency       time.Duration
	LatencyJitter time.Duration
	// Numbers set how messages to some numbers (E.164) are answered.
	Numbers map[string]NumberState
	// BlockedRegions are E.164 prefixes ("+98", "+7978") whose numbers get
	// 400 / 21408: the account's Geo Permissions do not include them.
	BlockedRegions []string
	// Outage, if set, starts an outage at creation (and again at Reset).
	Outage *Outage
	// Now is the clock (default time.Now). Limits, queues, pauses, outage
	// durations and recorded times follow it.
	Now func() time.Time
	// Logger receives debug lines per request and info lines per control
	// change (default: discard). Credentials are never logged; phone
	// numbers only as their last two digits.
	Logger *slog.Logger
	// Seed seeds the randomness of latency jitter and outage probability.
	Seed uint64
	// MaxMessages bounds the created messages kept for Messages; older ones
	// are forgotten (still counted in Stats.Created). Zero means
	// DefaultMaxMessages.
	MaxMessages int
}

// Emulator is a Twilio Messaging API stand-in. It is an http.Handler and is
// safe for concurrent use. Create it with New.
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
	numbers  map[string]NumberState
	account  AccountStatus
	outage   *emufault.Running
	nextSID  uint64
	inFlight int64
	messages messageLog
	stats    Stats
}

var _ http.Handler = (*Emulator)(nil)

// Shapes the emulator checks, as Twilio documents them.
var (
	accountSIDPattern = regexp.MustCompile(`^AC[0-9a-fA-F]{32}$`)
	e164Pattern       = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)
	shortCodePattern  = regexp.MustCompile(`^[0-9]{3,8}$`)
	alphaIDPattern    = regexp.MustCompile(`^[A-Za-z0-9 ]{1,11}$`)
	letterPattern     = regexp.MustCompile(`[A-Za-z]`)
	mgPattern         = regexp.MustCompile(`^MG[0-9a-fA-F]{32}$`)
)

// New validates cfg and returns an emulator.
func New(cfg Config) (*Emulator, error) {
	if !accountSIDPattern.MatchString(cfg.AccountSID) {
		return nil, errors.New("emulator: Config.AccountSID must be AC followed by 32 hex digits")
	}
	if cfg.AuthToken == "" || strings.ContainsAny(cfg.AuthToken, " \t\r\n:") {
		return nil, errors.New("emulator: Config.AuthToken must be non-empty, without spaces or ':'")
	}
	if cfg.FriendlyName == "" {
		cfg.FriendlyName = "tgnotify emulator"
	}
	for _, s := range cfg.Senders {
		if !validSender(s) {
			return nil, fmt.Errorf("emulator: Config.Senders: %q is not an E.164 number, a short code or an alphanumeric sender ID", s)
		}
	}
	var err error
	if cfg.Limits, err = cfg.Limits.withDefaults(); err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	if cfg.Latency < 0 || cfg.LatencyJitter < 0 {
		return nil, errors.New("emulator: Config.Latency and Config.LatencyJitter must not be negative")
	}
	for n, s := range cfg.Numbers {
		if !e164Pattern.MatchString(n) {
			return nil, fmt.Errorf("emulator: Config.Numbers: %s is not an E.164 number", maskPhone(n))
		}
		if _, err := ParseNumberState(string(s)); err != nil {
			return nil, fmt.Errorf("emulator: Config.Numbers: %w", err)
		}
	}
	for _, p := range cfg.BlockedRegions {
		if !regexp.MustCompile(`^\+[1-9][0-9]{0,5}$`).MatchString(p) {
			return nil, fmt.Errorf("emulator: Config.BlockedRegions: %q is not an E.164 prefix such as +98", p)
		}
	}
	switch {
	case cfg.MaxMessages < 0:
		return nil, errors.New("emulator: Config.MaxMessages must not be negative")
	case cfg.MaxMessages == 0:
		cfg.MaxMessages = DefaultMaxMessages
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
		log:    cfg.Logger.With("component", "sms-emulator"),
		closed: make(chan struct{}),
	}
	e.outage = emufault.NewRunning(e.log)
	e.mux = e.controlRoutes()
	e.Reset()
	return e, nil
}

// validSender reports whether s can be a From: an E.164 number, a short
// code, or an alphanumeric sender ID with at least one letter.
func validSender(s string) bool {
	return e164Pattern.MatchString(s) || shortCodePattern.MatchString(s) ||
		(alphaIDPattern.MatchString(s) && letterPattern.MatchString(s))
}

// ServeHTTP serves the Twilio API under /2010-04-01/ and the control
// endpoints under /emulator/.
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
// statistics, rate-limit state, queues and pauses, restores the configured
// number states and the account's status, and restarts the configured
// outage (or ends the running one).
func (e *Emulator) Reset() {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	e.rng = rand.New(rand.NewPCG(e.cfg.Seed, e.cfg.Seed^0x9e3779b97f4a7c15))
	e.limiter = newLimiter(e.cfg.Limits)
	e.numbers = make(map[string]NumberState, len(e.cfg.Numbers))
	for n, s := range e.cfg.Numbers {
		if s != NumberOK {
			e.numbers[n] = s
		}
	}
	e.account = AccountActive
	e.outage.Stop()
	if e.cfg.Outage != nil {
		e.outage.Start(*e.cfg.Outage, now)
	}
	e.nextSID = 0
	e.messages = messageLog{max: e.cfg.MaxMessages}
	e.stats = newStats(now)
}

// NumberState is how the emulator answers messages to a number.
type NumberState string

// Number states, each with the answer Twilio documents for it.
const (
	// NumberOK creates the message.
	NumberOK NumberState = "ok"
	// NumberInvalid answers 400 / 21211 "The 'To' number ... is not a
	// valid phone number."
	NumberInvalid NumberState = "invalid"
	// NumberUnsubscribed answers 400 / 21610 "Attempt to send to
	// unsubscribed recipient": the recipient replied STOP.
	NumberUnsubscribed NumberState = "unsubscribed"
	// NumberNotMobile answers 400 / 21614 "'To' number is not a valid
	// mobile number".
	NumberNotMobile NumberState = "not_mobile"
	// NumberUnverified answers 400 / 21608: a trial account sends only to
	// verified numbers.
	NumberUnverified NumberState = "unverified"
	// NumberUnreachable answers 400 / 21612 "The 'To' phone number is not
	// currently reachable via SMS": a code the SMS channel does not know,
	// to exercise its unrecognised-400 path.
	NumberUnreachable NumberState = "unreachable"
	// NumberForbidden answers 403 / 20403 "Forbidden", to exercise the
	// unrecognised-403 path.
	NumberForbidden NumberState = "forbidden"
)

// ParseNumberState checks a number state's name.
func ParseNumberState(s string) (NumberState, error) {
	switch n := NumberState(strings.ToLower(strings.TrimSpace(s))); n {
	case NumberOK, NumberInvalid, NumberUnsubscribed, NumberNotMobile, NumberUnverified, NumberUnreachable, NumberForbidden:
		return n, nil
	}
	return "", fmt.Errorf("unknown number state %q (want ok, invalid, unsubscribed, not_mobile, unverified, unreachable or forbidden)", s)
}

// SetNumberState sets how messages to an E.164 number are answered.
func (e *Emulator) SetNumberState(number string, s NumberState) error {
	if !e164Pattern.MatchString(number) {
		return errors.New("not an E.164 number such as +15005550006")
	}
	if _, err := ParseNumberState(string(s)); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s == NumberOK {
		delete(e.numbers, number)
	} else {
		e.numbers[number] = s
	}
	e.log.Info("number state set", "number", maskPhone(number), "state", string(s))
	return nil
}

// NumberState returns how messages to a number are answered.
func (e *Emulator) NumberState(number string) NumberState {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.numbers[number]; ok {
		return s
	}
	return NumberOK
}

// AccountStatus is the account's status.
type AccountStatus string

// Account statuses. A suspended or closed account's requests get 401 /
// 20003, as Twilio documents ("Account is suspended or closed").
const (
	AccountActive    AccountStatus = "active"
	AccountSuspended AccountStatus = "suspended"
	AccountClosed    AccountStatus = "closed"
)

// SetAccountStatus suspends, closes or reactivates the account.
func (e *Emulator) SetAccountStatus(s AccountStatus) error {
	switch s {
	case AccountActive, AccountSuspended, AccountClosed:
	default:
		return fmt.Errorf("unknown account status %q (want active, suspended or closed)", s)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.account = s
	e.log.Info("account status set", "status", string(s))
	return nil
}

// AccountStatus returns the account's status.
func (e *Emulator) AccountStatus() AccountStatus {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.account
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

// OpenPause makes the next API request get 429 / 20429 with a Retry-After
// of retryAfter (whole seconds, at least 1), and every request in the
// pause it announces get 429 too, until it ends.
func (e *Emulator) OpenPause(retryAfter time.Duration) error {
	if retryAfter < time.Second {
		return fmt.Errorf("retry_after must be at least 1 second, got %s", retryAfter)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.limiter.pending = retryAfter.Truncate(time.Second)
	e.log.Info("pause opened", "retry_after", e.limiter.pending)
	return nil
}

// Messages returns the created messages kept, oldest first.
func (e *Emulator) Messages() []Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.messages.list(nil)
}

// MessagesTo returns the created messages kept for one number, oldest
// first.
func (e *Emulator) MessagesTo(number string) []Message {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.messages.list(func(m *Message) bool { return m.To == number })
}

// Stats returns a copy of the counters.
func (e *Emulator) Stats() Stats {
	e.mu.Lock()
	defer e.mu.Unlock()
	s := e.stats.clone()
	s.MessagesKept = len(e.messages.buf)
	s.QueueBacklogSeconds = e.limiter.backlog(e.now()).Seconds()
	return s
}

// credentialsMatch compares the basic-auth credentials in constant time.
func (e *Emulator) credentialsMatch(user, pass string) bool {
	u := subtle.ConstantTimeCompare([]byte(user), []byte(e.cfg.AccountSID))
	p := subtle.ConstantTimeCompare([]byte(pass), []byte(e.cfg.AuthToken))
	return u&p == 1
}

// maskPhone shows a phone number as its last two digits: "+***67".
func maskPhone(n string) string {
	if len(n) < 2 {
		return "+***"
	}
	return "+***" + n[len(n)-2:]
}
