package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// DeadRecipient records why a recipient can no longer receive messages on a
// channel.
type DeadRecipient struct {
	Channel     string    `json:"channel"`
	Recipient   string    `json:"recipient"`
	Reason      string    `json:"reason"`
	Code        int       `json:"code"`
	Description string    `json:"description"`
	At          time.Time `json:"at"`
	// Key is the notification whose attempt proved the recipient dead.
	Key string `json:"key"`
	// Via says what else found it dead: ViaUpdate for news the provider
	// sent the bot (a Telegram user blocked it); empty for a send's answer.
	Via string `json:"via,omitempty"`
}

// hold records, for workers that start later, that messages of a recipient
// went back to the stream: every message of the recipient after First must
// wait until Until, so that the parked ones come back first.
type hold struct {
	First uint64    `json:"first"`
	Until time.Time `json:"until"`
}

// pause is the channel-wide 429 pause, shared by every worker of the
// channel.
type pause struct {
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// keyspace names a channel's keys in the notify_chats bucket. Telegram keeps
// the names it always had (dead.<chat>, migrated.<chat>, hold.<chat>,
// pause.bot), which the runbook's procedures use; every other channel's keys
// start with its name (email.dead.<hash>, email.pause, ...).
type keyspace struct {
	prefix   string // "" or "<channel>."
	redirect string // the word for a redirect record
	pause    string // the pause record's key
}

func keyspaceFor(channel string) keyspace {
	if channel == "telegram" {
		return keyspace{redirect: "migrated", pause: "pause.bot"}
	}
	return keyspace{prefix: channel + ".", redirect: "redirect", pause: channel + ".pause"}
}

func (k keyspace) dead(r string) string        { return k.prefix + "dead." + r }
func (k keyspace) redirectKey(r string) string { return k.prefix + k.redirect + "." + r }
func (k keyspace) hold(r string) string        { return k.prefix + "hold." + r }

// DeadRecipientKey returns the key of the notify_chats bucket that marks
// recipient (a subject token: a Telegram chat id, u42, e<hash>) dead on
// channel: dead.<chat> for Telegram, <channel>.dead.<recipient> for the
// other channels. Its value is a [DeadRecipient]; deleting it revives the
// recipient, which the running workers see within milliseconds.
func DeadRecipientKey(channel, recipient string) string { return keyspaceFor(channel).dead(recipient) }

// watchFilter is the subject filter of the channel's keys.
func (k keyspace) watchFilter() string {
	if k.prefix == "" {
		return ">"
	}
	return k.prefix + ">"
}

// parse splits a bucket key into its kind (dead, redirect, hold, pause) and
// recipient; ok is false for another channel's keys.
func (k keyspace) parse(key string) (kind, recipient string, ok bool) {
	if key == k.pause {
		return "pause", "", true
	}
	rest, found := strings.CutPrefix(key, k.prefix)
	if !found {
		return "", "", false
	}
	kind, recipient, found = strings.Cut(rest, ".")
	if !found || recipient == "" {
		return "", "", false
	}
	switch kind {
	case "dead", "hold":
		return kind, recipient, true
	case k.redirect:
		return "redirect", recipient, true
	}
	return "", "", false
}

// sharedState is the worker's view of its channel's part of notify_chats:
// dead recipients, redirects, holds and the channel-wide pause. A watcher
// keeps it current, so an operator's revive (deleting dead.<chat>) or
// another worker's pause is seen within milliseconds; the worker's own
// writes update it at once.
type sharedState struct {
	kv      natsjs.KeyValue
	keys    keyspace
	channel string
	log     *slog.Logger
	// onPause is told of a pause written by anyone (admission follows it).
	onPause func(pause)
	// retryAfter is Config.DeadRetryAfter (0: never); now is the clock it
	// is measured on.
	retryAfter time.Duration
	now        func() time.Time
	// loaded is closed once the initial values are loaded.
	loaded     chan struct{}
	loadedOnce sync.Once
	// loadStall is how long the initial load may go without a value
	// before the watch is started again (initialLoadStall).
	loadStall time.Duration

	mu sync.RWMutex
	// revs are the revisions of the keys' latest values applied (one per
	// key ever seen), so that the watcher, which lags behind this worker's
	// own writes, never applies an older value over a newer one (a dead
	// mark replayed after this worker deleted it).
	revs     map[string]uint64
	deadSet  map[string]DeadRecipient
	redirect map[string]string
	holds    map[string]hold
	pause    pause
	changed  chan struct{} // signalled (non-blocking) on every change
}

func newSharedState(kv natsjs.KeyValue, channel string, log *slog.Logger, onPause func(pause)) *sharedState {
	return &sharedState{
		kv: kv, keys: keyspaceFor(channel), channel: channel, log: log, onPause: onPause,
		deadSet: map[string]DeadRecipient{}, redirect: map[string]string{}, holds: map[string]hold{}, revs: map[string]uint64{},
		changed: make(chan struct{}, 1), now: time.Now, loaded: make(chan struct{}),
		loadStall: initialLoadStall,
	}
}

// initialLoadStall bounds the silence of a watch's initial load. nats.go
// sends the mark that ends the initial values when as many values as the
// consumer had pending have arrived; when it cannot read that count (the
// bucket's stream electing a leader), the mark comes only after a value,
// and never for a channel with no keys. The worker consumes only once the
// initial values are loaded, so a load that stops for this long is started
// again.
const initialLoadStall = 5 * time.Second

// errLoadStalled is returned when a watch's initial load stops before its
// end.
var errLoadStalled = errors.New("initial values stopped arriving before their end")

// watch loads the channel's keys and follows them until ctx ends, watching
// again after any failure. ready is closed once the initial values are
// loaded, by whichever attempt loads them.
func (s *sharedState) watch(ctx context.Context, ready chan<- struct{}) {
	var once sync.Once
	loaded := func() {
		once.Do(func() {
			if ready != nil {
				close(ready)
			}
		})
	}
	for {
		// Every attempt until one has loaded the initial values may close
		// ready: a first attempt that fails (JetStream electing a leader)
		// must not leave the worker waiting for ever.
		err := s.watchOnce(ctx, loaded)
		if ctx.Err() != nil {
			return
		}
		s.log.Warn("shared state watcher stopped; restarting", "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (s *sharedState) watchOnce(ctx context.Context, loaded func()) error {
	w, err := s.kv.Watch(ctx, s.keys.watchFilter())
	if err != nil {
		return fmt.Errorf("watching %s: %w", s.kv.Bucket(), err)
	}
	defer w.Stop()
	stall := time.NewTimer(s.loadStall)
	defer stall.Stop()
	loading := true
	for {
		var stalled <-chan time.Time
		if loading {
			stalled = stall.C
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-stalled:
			return fmt.Errorf("watching %s: %w (%s without a value)", s.kv.Bucket(), errLoadStalled, s.loadStall)
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			if e == nil { // initial values loaded
				loading = false
				stall.Stop()
				s.loadedOnce.Do(func() { close(s.loaded) })
				loaded()
				continue
			}
			if loading {
				stall.Reset(s.loadStall)
			}
			s.apply(e.Key(), e.Value(), e.Operation() != natsjs.KeyValuePut, e.Revision())
		}
	}
}

// apply updates the cache from one bucket entry of revision rev: from the
// watcher, or this worker's own put. A value older than the one applied is
// ignored. This worker's own deletion (rev 0) always applies; the watcher's
// copy of it comes later with its revision.
func (s *sharedState) apply(key string, value []byte, deleted bool, rev uint64) {
	kind, r, ok := s.keys.parse(key)
	if !ok {
		return
	}
	var p *pause
	s.mu.Lock()
	if rev != 0 {
		if rev <= s.revs[key] {
			s.mu.Unlock()
			return
		}
		s.revs[key] = rev
	}
	switch kind {
	case "pause":
		var v pause
		if deleted {
			s.pause = pause{}
		} else if json.Unmarshal(value, &v) == nil {
			s.pause = v
		}
		p = &s.pause
	case "dead":
		var d DeadRecipient
		if deleted {
			delete(s.deadSet, r)
		} else {
			// A record that does not parse still marks the recipient dead:
			// an operator deletes the key to revive it.
			_ = json.Unmarshal(value, &d)
			d.Channel, d.Recipient = s.channel, r
			s.deadSet[r] = d
		}
	case "redirect":
		to := strings.TrimSpace(string(value))
		if deleted || to == "" || to == r {
			delete(s.redirect, r)
		} else {
			s.redirect[r] = to
		}
	case "hold":
		var h hold
		if deleted {
			delete(s.holds, r)
		} else if json.Unmarshal(value, &h) == nil {
			s.holds[r] = h
		}
	}
	var snapshot pause
	if p != nil {
		snapshot = *p
	}
	s.mu.Unlock()
	if p != nil && s.onPause != nil {
		s.onPause(snapshot)
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// deadRecipient returns the record of a dead recipient.
func (s *sharedState) deadRecipient(r string) (DeadRecipient, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.deadSet[r]
	return d, ok
}

// resolve follows recorded redirects (a group that became a supergroup).
func (s *sharedState) resolve(r string) string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for hops := 0; hops < 4; hops++ {
		to, ok := s.redirect[r]
		if !ok {
			break
		}
		r = to
	}
	return r
}

// hold and dead make sharedState the scheduler's view.
func (s *sharedState) hold(r string) (hold, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.holds[r]
	return h, ok
}

// dead reports whether messages to r are given up on without a request:
// it is marked dead, and not due for another try (retryDue).
func (s *sharedState) dead(r string) bool {
	d, ok := s.deadRecipient(s.resolve(r))
	return ok && !s.retryDue(d)
}

// retryDue reports whether a dead recipient's next message is sent for real
// once more: DeadRetryAfter has passed since it was found dead (a mark
// without a time is due at once).
func (s *sharedState) retryDue(d DeadRecipient) bool {
	return s.retryAfter > 0 && !s.now().Before(d.At.Add(s.retryAfter))
}

func (s *sharedState) deadCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.deadSet)
}

func (s *sharedState) put(ctx context.Context, key string, b []byte) error {
	rev, err := s.kv.Put(ctx, key, b)
	if err != nil {
		return fmt.Errorf("writing %s/%s: %w", s.kv.Bucket(), key, err)
	}
	s.apply(key, b, false, rev)
	return nil
}

func (s *sharedState) putJSON(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.put(ctx, key, b)
}

func (s *sharedState) del(ctx context.Context, key string) error {
	if err := s.kv.Delete(ctx, key); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return fmt.Errorf("deleting %s/%s: %w", s.kv.Bucket(), key, err)
	}
	s.apply(key, nil, true, 0)
	return nil
}

func (s *sharedState) markDead(ctx context.Context, d DeadRecipient) error {
	return s.putJSON(ctx, s.keys.dead(d.Recipient), d)
}

func (s *sharedState) markRedirect(ctx context.Context, from, to string) error {
	return s.put(ctx, s.keys.redirectKey(from), []byte(to))
}

// setHoldLocal and setPauseLocal take effect in this worker's view at once;
// the persister writes them (persist.go).
func (s *sharedState) setHoldLocal(r string, h hold) {
	s.mu.Lock()
	s.holds[r] = h
	s.mu.Unlock()
}

func (s *sharedState) clearHoldLocal(r string) {
	s.mu.Lock()
	delete(s.holds, r)
	s.mu.Unlock()
}

func (s *sharedState) setPauseLocal(p pause) {
	s.mu.Lock()
	if p.Until.After(s.pause.Until) {
		s.pause = p
	}
	s.mu.Unlock()
}
