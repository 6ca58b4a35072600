package emulator

import (
	"fmt"
	"math"
	"time"
)

// Limits are the emulator's model of Telegram's rate limits. Telegram
// publishes them only approximately (see docs/EMULATOR.md); the emulator
// enforces them exactly, so that it can measure a sender.
//
// Each scope is a token bucket, implemented as GCRA (generic cell rate
// algorithm): a rate and a burst, with all arithmetic in integer nanoseconds
// of the emulator's clock. The scopes are:
//
//   - "bot": every sendMessage without allow_paid_broadcast (BotRate, BotBurst).
//   - "paid": every sendMessage with allow_paid_broadcast (PaidRate,
//     PaidBurst); paid requests do not use the "bot" bucket.
//   - "chat": one bucket per chat: private chats (chat_id > 0) at ChatRate
//     and ChatBurst, groups (chat_id < 0) at GroupPerMinute and GroupBurst.
//
// A request must be admitted by its bot (or paid) scope and by its chat
// scope; a request refused by one scope takes nothing from the other.
//
// A refused request gets 429 with retry_after = ceil(seconds until the
// bucket admits one again), and its scope is in an announced pause that ends
// exactly retry_after seconds later. A request inside an announced pause of
// its own scope is punished: it is told max(ceil(remaining), 2 × B) seconds,
// B being the retry_after that announced the pause, and the pause then ends
// that many seconds after it.
type Limits struct {
	// Enabled turns the buckets on. Pauses opened with OpenPause, and the
	// punishment of requests inside a pause, apply even when it is false.
	Enabled bool
	// BotRate is the bot-wide rate in messages per second (default 30).
	BotRate float64
	// BotBurst is how many messages the bot may send at once (default 30).
	BotBurst int
	// ChatRate is the per private chat rate in messages per second
	// (default 1).
	ChatRate float64
	// ChatBurst is the burst Telegram tolerates in one private chat
	// (default 3).
	ChatBurst int
	// GroupPerMinute is the per group rate in messages per minute
	// (default 20).
	GroupPerMinute float64
	// GroupBurst is the burst tolerated in one group (default 3).
	GroupBurst int
	// PaidRate is the rate with allow_paid_broadcast in messages per second
	// (default 1000).
	PaidRate float64
	// PaidBurst is the burst with allow_paid_broadcast (default 1000).
	PaidBurst int
}

// DefaultLimits returns Telegram's documented limits, enabled.
func DefaultLimits() Limits {
	return Limits{
		Enabled:        true,
		BotRate:        30,
		BotBurst:       30,
		ChatRate:       1,
		ChatBurst:      3,
		GroupPerMinute: 20,
		GroupBurst:     3,
		PaidRate:       1000,
		PaidBurst:      1000,
	}
}

// withDefaults fills zero fields with DefaultLimits and validates the rest.
func (l Limits) withDefaults() (Limits, error) {
	d := DefaultLimits()
	setF := func(v *float64, def float64, name string) error {
		switch {
		case *v == 0:
			*v = def
		case *v < 0 || math.IsNaN(*v) || math.IsInf(*v, 0) || *v > 1e9:
			return fmt.Errorf("invalid Limits.%s %v: must be a positive number of messages", name, *v)
		}
		return nil
	}
	setI := func(v *int, def int, name string) error {
		switch {
		case *v == 0:
			*v = def
		case *v < 0:
			return fmt.Errorf("invalid Limits.%s %d: must be positive", name, *v)
		}
		return nil
	}
	for _, err := range []error{
		setF(&l.BotRate, d.BotRate, "BotRate"),
		setI(&l.BotBurst, d.BotBurst, "BotBurst"),
		setF(&l.ChatRate, d.ChatRate, "ChatRate"),
		setI(&l.ChatBurst, d.ChatBurst, "ChatBurst"),
		setF(&l.GroupPerMinute, d.GroupPerMinute, "GroupPerMinute"),
		setI(&l.GroupBurst, d.GroupBurst, "GroupBurst"),
		setF(&l.PaidRate, d.PaidRate, "PaidRate"),
		setI(&l.PaidBurst, d.PaidBurst, "PaidBurst"),
	} {
		if err != nil {
			return l, err
		}
	}
	return l, nil
}

// Scope names a rate-limit scope.
type Scope string

// Rate-limit scopes.
const (
	ScopeBot  Scope = "bot"
	ScopePaid Scope = "paid"
	ScopeChat Scope = "chat"
)

// rule is one bucket's parameters in GCRA form: the emission interval
// (1/rate) and the tolerance ((burst-1) intervals), in nanoseconds.
type rule struct {
	interval  int64
	tolerance int64
}

func newRule(perSecond float64, burst int) rule {
	interval := max(int64(math.Round(float64(time.Second)/perSecond)), 1)
	return rule{interval: interval, tolerance: interval * int64(burst-1)}
}

// wait returns how long after now the bucket whose theoretical arrival time
// is tat admits one request; 0 means it admits one now.
func (r rule) wait(tat, now int64) int64 {
	return max(max(tat, now)-r.tolerance-now, 0)
}

// take returns the bucket's theoretical arrival time after admitting one
// request at now.
func (r rule) take(tat, now int64) int64 { return max(tat, now) + r.interval }

// scopeState is one scope's bucket and pause. Times are Unix nanoseconds of
// the emulator's clock.
type scopeState struct {
	tat        int64 // GCRA theoretical arrival time
	pauseUntil int64 // end of the announced pause; no pause when <= now
	base       int64 // retry_after (s) that announced the current pause
	pending    int64 // retry_after (s) of a pause opened by OpenPause, announced by the next request
}

// idle reports whether the state carries nothing: a full bucket and no pause.
func (s scopeState) idle(now int64) bool {
	return s.tat <= now && s.pauseUntil <= now && s.pending == 0
}

// verdict is the limiter's answer to one request.
type verdict struct {
	ok         bool
	scope      Scope
	retryAfter int64 // seconds, when !ok
	until      int64 // end of the pause the 429 announces, when !ok
	punished   bool  // the request came inside an announced pause of its scope
	inAnyPause bool  // the request came inside an announced pause of any scope
}

// limiter holds every scope. It is not safe for concurrent use; the Emulator
// serialises calls under its mutex.
type limiter struct {
	cfg       Limits
	bot, paid rule
	private   rule
	group     rule
	botState  scopeState
	paidState scopeState
	chats     map[int64]scopeState
	anyUntil  int64 // latest end of any announced pause
	// known are the pauses in force whose 429 has been written to the
	// sender's connection, each from the instant the sender can have read
	// it (SenderReactionTime later).
	known   []knownPause
	sweepAt int
}

// minSweep is the chat count below which idle chat states are not pruned.
const minSweep = 4096

func newLimiter(cfg Limits) *limiter {
	return &limiter{
		cfg:     cfg,
		bot:     newRule(cfg.BotRate, cfg.BotBurst),
		paid:    newRule(cfg.PaidRate, cfg.PaidBurst),
		private: newRule(cfg.ChatRate, cfg.ChatBurst),
		group:   newRule(cfg.GroupPerMinute/60, cfg.GroupBurst),
		chats:   make(map[int64]scopeState),
		sweepAt: minSweep,
	}
}

// ceilSeconds rounds a positive duration in nanoseconds up to whole seconds,
// at least 1: Telegram's retry_after is an integer.
func ceilSeconds(ns int64) int64 {
	return max((ns+int64(time.Second)-1)/int64(time.Second), 1)
}

// pausedAt reports whether an announced pause of any scope is in force at
// now.
func (l *limiter) pausedAt(now int64) bool { return now < l.anyUntil }

// SenderReactionTime is how long after a 429 has been written to its
// connection the emulator counts a request of the same sender as sent
// inside the pause (Stats.SentInAnyPause). A sender with several requests
// in flight reads the 429 on one of them while another may be leaving at
// that very moment: the chaos runs measured such requests arriving 0.1 and
// 0.6 ms after the 429 was written. Anything later than this is a sender
// that knew and sent anyway; pauses last at least a second.
const SenderReactionTime = 5 * time.Millisecond

// knownPause is a pause whose 429 has been written: a request arriving in
// [from, until) was sent by a sender that could have known of it. opener
// is the request that was answered with that 429.
type knownPause struct {
	from, until int64
	opener      PauseOpener
}

// knownAt reports whether a pause of any scope that its sender could have
// read by now is in force at now, how much of it is left, and the requests
// whose 429s announced the pauses in force.
func (l *limiter) knownAt(now int64) (bool, time.Duration, []PauseOpener) {
	live := l.known[:0]
	var (
		left    int64
		openers []PauseOpener
	)
	for _, k := range l.known {
		if k.until <= now {
			continue
		}
		live = append(live, k)
		if k.from <= now {
			left = max(left, k.until-now)
			openers = append(openers, k.opener)
		}
	}
	clear(l.known[len(live):])
	l.known = live
	return left > 0, time.Duration(left), openers
}

// answered records that the 429 announcing a pause that ends at until was
// written at now to the connection of the request opener.
func (l *limiter) answered(now, until int64, opener PauseOpener) {
	if until > now {
		l.known = append(l.known, knownPause{from: now + int64(SenderReactionTime), until: until, opener: opener})
	}
}

// admit decides one sendMessage request at now. The order is:
//
//  1. A request inside an announced pause of its bot (or paid) scope or its
//     chat scope is refused and punished: it is told retry_after =
//     max(ceil(remaining), 2 × B) seconds, where B is the retry_after that
//     announced the pause, and the pause now ends exactly that many seconds
//     from now. A sender that ignores a pause thus waits twice as long as it
//     was told, counted from its last violation; repeated violations keep
//     pushing the end out but do not compound.
//  2. A pause opened by OpenPause and not yet announced is announced now:
//     the request gets 429 with its retry_after, and the pause runs from now.
//  3. With Enabled, the request must fit the bot (or paid) bucket and the
//     chat bucket. If one refuses, the request gets 429 with retry_after =
//     ceil(seconds until that bucket admits one), at least 1, and that scope
//     is paused, announced, for exactly that many seconds from now. A
//     request exactly at the end of the pause is admitted.
func (l *limiter) admit(now, chatID int64, paid bool) verdict {
	v := verdict{inAnyPause: now < l.anyUntil}
	global, globalRule, globalScope := &l.botState, l.bot, ScopeBot
	if paid {
		global, globalRule, globalScope = &l.paidState, l.paid, ScopePaid
	}
	chat, tracked := l.chats[chatID]
	chatRule := l.private
	if chatID < 0 {
		chatRule = l.group
	}
	defer func() {
		if tracked {
			l.chats[chatID] = chat
			l.maybeSweep(now)
		}
	}()

	// 1. Punish requests inside an announced pause.
	for _, s := range []struct {
		st    *scopeState
		scope Scope
	}{{global, globalScope}, {&chat, ScopeChat}} {
		if s.st.pauseUntil > now {
			ra := max(ceilSeconds(s.st.pauseUntil-now), 2*s.st.base)
			l.extend(s.st, now, ra)
			v.scope, v.retryAfter, v.punished, v.until = s.scope, ra, true, s.st.pauseUntil
			return v
		}
	}
	// 2. Announce pauses opened by the control API.
	for _, s := range []struct {
		st    *scopeState
		scope Scope
	}{{global, globalScope}, {&chat, ScopeChat}} {
		if s.st.pending > 0 {
			ra := s.st.pending
			s.st.pending = 0
			l.announce(s.st, now, ra)
			v.scope, v.retryAfter, v.until = s.scope, ra, s.st.pauseUntil
			return v
		}
	}
	if !l.cfg.Enabled {
		v.ok = true
		return v
	}
	// 3. Buckets.
	if w := globalRule.wait(global.tat, now); w > 0 {
		ra := ceilSeconds(w)
		l.announce(global, now, ra)
		v.scope, v.retryAfter, v.until = globalScope, ra, global.pauseUntil
		return v
	}
	if w := chatRule.wait(chat.tat, now); w > 0 {
		tracked = true
		ra := ceilSeconds(w)
		l.announce(&chat, now, ra)
		v.scope, v.retryAfter, v.until = ScopeChat, ra, chat.pauseUntil
		return v
	}
	global.tat = globalRule.take(global.tat, now)
	chat.tat = chatRule.take(chat.tat, now)
	tracked = true
	v.ok = true
	return v
}

// announce starts an announced pause of ra seconds from now.
func (l *limiter) announce(st *scopeState, now, ra int64) {
	st.base = ra
	l.extend(st, now, ra)
}

// extend makes the announced pause end ra seconds from now.
func (l *limiter) extend(st *scopeState, now, ra int64) {
	st.pauseUntil = now + ra*int64(time.Second)
	l.anyUntil = max(l.anyUntil, st.pauseUntil)
}

// open registers a pause to be announced by the next request of the scope.
func (l *limiter) open(scope Scope, chatID, retryAfter int64) error {
	if retryAfter <= 0 {
		return fmt.Errorf("retry_after must be a positive number of seconds, got %d", retryAfter)
	}
	switch scope {
	case ScopeBot:
		l.botState.pending = retryAfter
	case ScopePaid:
		l.paidState.pending = retryAfter
	case ScopeChat:
		if chatID == 0 {
			return fmt.Errorf("scope %q needs a chat_id", scope)
		}
		st := l.chats[chatID]
		st.pending = retryAfter
		l.chats[chatID] = st
	default:
		return fmt.Errorf("unknown scope %q (want bot, paid or chat)", scope)
	}
	return nil
}

// maybeSweep drops chat states that carry nothing once the map has grown, so
// that memory stays proportional to the chats active in the last few seconds.
func (l *limiter) maybeSweep(now int64) {
	if len(l.chats) < l.sweepAt {
		return
	}
	for id, st := range l.chats {
		if st.idle(now) {
			delete(l.chats, id)
		}
	}
	l.sweepAt = max(minSweep, 2*len(l.chats))
}
