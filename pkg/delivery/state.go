package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// DeliveryRecord is what the worker keeps, per idempotency key, once Telegram
// accepted a message: the proof of delivery support staff can look up.
type DeliveryRecord struct {
	Key         string    `json:"key"`
	ChatID      int64     `json:"chat_id"`
	MessageID   int64     `json:"message_id"`
	DeliveredAt time.Time `json:"delivered_at"`
	StreamSeq   uint64    `json:"stream_seq"`
}

// DeadChat records why a chat can no longer receive messages.
type DeadChat struct {
	ChatID      int64     `json:"chat_id"`
	Reason      string    `json:"reason"`
	Code        int       `json:"code"`
	Description string    `json:"description"`
	At          time.Time `json:"at"`
	// Key is the notification whose attempt proved the chat dead.
	Key string `json:"key"`
}

// hold records, for workers that start later, that messages of a chat went
// back to the stream: every message of the chat after First must wait until
// Until, so that the parked ones come back first.
type hold struct {
	First uint64    `json:"first"`
	Until time.Time `json:"until"`
}

// pause is the bot-wide 429 pause, shared by every worker.
type pause struct {
	Until  time.Time `json:"until"`
	Reason string    `json:"reason"`
}

// Keys of the notify_chats bucket the worker owns besides dead.<chat> and
// migrated.<chat>.
const (
	pauseKey   = "pause.bot"
	holdPrefix = "hold."
)

func holdKey(chat int64) string { return holdPrefix + strconv.FormatInt(chat, 10) }

// recordKey maps an idempotency key to a key-value key: KV keys allow only
// [-/_=.a-zA-Z0-9], so the key is hashed (SHA-256, hex).
func recordKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// chatState is the worker's view of the notify_chats bucket: dead chats,
// migrations, holds and the bot-wide pause. A watcher keeps it current, so
// an operator's revive (deleting dead.<chat>) or another worker's pause is
// seen within milliseconds; the worker's own writes update it at once.
type chatState struct {
	kv  natsjs.KeyValue
	log *slog.Logger

	mu       sync.RWMutex
	dead     map[int64]DeadChat
	migrated map[int64]int64
	holds    map[int64]hold
	pause    pause
	changed  chan struct{} // signalled (non-blocking) on changes made by others
}

func newChatState(kv natsjs.KeyValue, log *slog.Logger) *chatState {
	return &chatState{
		kv: kv, log: log,
		dead: map[int64]DeadChat{}, migrated: map[int64]int64{}, holds: map[int64]hold{},
		changed: make(chan struct{}, 1),
	}
}

// watch loads the bucket and follows it until ctx ends. ready is closed once
// the initial values are loaded.
func (s *chatState) watch(ctx context.Context, ready chan<- struct{}) error {
	for {
		err := s.watchOnce(ctx, ready)
		ready = nil
		if ctx.Err() != nil {
			return nil
		}
		s.log.Warn("chat state watcher stopped; restarting", "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (s *chatState) watchOnce(ctx context.Context, ready chan<- struct{}) error {
	w, err := s.kv.WatchAll(ctx)
	if err != nil {
		return fmt.Errorf("watching %s: %w", jetstream.BucketChats, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			if e == nil { // initial values loaded
				if ready != nil {
					close(ready)
					ready = nil
				}
				continue
			}
			s.apply(e.Key(), e.Value(), e.Operation() != natsjs.KeyValuePut)
		}
	}
}

// apply updates the cache from one bucket entry.
func (s *chatState) apply(key string, value []byte, deleted bool) {
	prefix, id, _ := strings.Cut(key, ".")
	chat, _ := strconv.ParseInt(id, 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case key == pauseKey:
		var p pause
		if !deleted && json.Unmarshal(value, &p) == nil {
			s.pause = p
		} else if deleted {
			s.pause = pause{}
		}
	case prefix == "dead" && chat != 0:
		var d DeadChat
		if deleted {
			delete(s.dead, chat)
		} else if json.Unmarshal(value, &d) == nil {
			s.dead[chat] = d
		}
	case prefix == "migrated" && chat != 0:
		to, err := strconv.ParseInt(string(value), 10, 64)
		if deleted || err != nil || to == 0 {
			delete(s.migrated, chat)
		} else {
			s.migrated[chat] = to
		}
	case prefix == "hold" && chat != 0:
		var h hold
		if deleted {
			delete(s.holds, chat)
		} else if json.Unmarshal(value, &h) == nil {
			s.holds[chat] = h
		}
	default:
		return
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

func (s *chatState) deadChat(chat int64) (DeadChat, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	d, ok := s.dead[chat]
	return d, ok
}

// resolve follows recorded migrations (a group that became a supergroup).
func (s *chatState) resolve(chat int64) int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for hops := 0; hops < 4; hops++ {
		to, ok := s.migrated[chat]
		if !ok {
			break
		}
		chat = to
	}
	return chat
}

func (s *chatState) holdFor(chat int64) (hold, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	h, ok := s.holds[chat]
	return h, ok
}

func (s *chatState) pausedUntil() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pause.Until
}

func (s *chatState) deadCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.dead)
}

func (s *chatState) put(ctx context.Context, key string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return s.putRaw(ctx, key, b)
}

func (s *chatState) putRaw(ctx context.Context, key string, b []byte) error {
	if _, err := s.kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("writing %s/%s: %w", jetstream.BucketChats, key, err)
	}
	s.apply(key, b, false)
	return nil
}

func (s *chatState) markDead(ctx context.Context, d DeadChat) error {
	return s.put(ctx, jetstream.ChatDeadKey(d.ChatID), d)
}

func (s *chatState) markMigrated(ctx context.Context, from, to int64) error {
	return s.putRaw(ctx, jetstream.ChatMigratedKey(from), []byte(strconv.FormatInt(to, 10)))
}

func (s *chatState) setPause(ctx context.Context, p pause) error { return s.put(ctx, pauseKey, p) }

func (s *chatState) setHold(ctx context.Context, chat int64, h hold) error {
	return s.put(ctx, holdKey(chat), h)
}

func (s *chatState) clearHold(ctx context.Context, chat int64) error {
	if err := s.kv.Delete(ctx, holdKey(chat)); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return fmt.Errorf("deleting %s/%s: %w", jetstream.BucketChats, holdKey(chat), err)
	}
	s.apply(holdKey(chat), nil, true)
	return nil
}
