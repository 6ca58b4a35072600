package delivery

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// TestSharedStateIgnoresStaleWatcherValues: the watcher lags behind the
// worker's own writes. A dead mark this worker wrote (revision 5) and then
// deleted must not come back when the watcher delivers revision 5 late;
// the watcher's copy of the deletion and a newer mark apply as usual, and a
// put older than what the watcher already applied is ignored.
func TestSharedStateIgnoresStaleWatcherValues(t *testing.T) {
	s := newSharedState(nil, "telegram", slog.New(slog.DiscardHandler), nil)
	mark := []byte(`{"reason":"blocked"}`)
	steps := []struct {
		what    string
		value   []byte
		deleted bool
		rev     uint64
		dead    bool
	}{
		{"own put", mark, false, 5, true},
		{"own delete", nil, true, 0, false},
		{"watcher replays the put", mark, false, 5, false},
		{"watcher delivers the delete", nil, true, 6, false},
		{"another worker marks it again", mark, false, 8, true},
		{"a deletion older than the newest mark", nil, true, 7, true},
	}
	for _, st := range steps {
		s.apply("dead.42", st.value, st.deleted, st.rev)
		if _, dead := s.deadRecipient("42"); dead != st.dead {
			t.Fatalf("after %s: dead %v, want %v", st.what, dead, st.dead)
		}
	}
}

// scriptedWatches is a notify_chats bucket whose Watch calls follow a
// script: each call takes the next step, an error or a watcher fed by the
// step's channel.
type scriptedWatches struct {
	natsjs.KeyValue
	mu    sync.Mutex
	steps []watchStep
	calls int
}

type watchStep struct {
	err     error
	updates chan natsjs.KeyValueEntry
}

func (k *scriptedWatches) Bucket() string { return "notify_chats" }

func (k *scriptedWatches) Watch(context.Context, string, ...natsjs.WatchOpt) (natsjs.KeyWatcher, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	st := k.steps[min(k.calls, len(k.steps)-1)]
	k.calls++
	if st.err != nil {
		return nil, st.err
	}
	return scriptedWatcher(st.updates), nil
}

type scriptedWatcher chan natsjs.KeyValueEntry

func (w scriptedWatcher) Updates() <-chan natsjs.KeyValueEntry { return w }
func (w scriptedWatcher) Stop() error                          { return nil }

// deadEntry is the value of dead.<recipient> for the telegram channel.
type deadEntry struct {
	natsjs.KeyValueEntry
	recipient string
	rev       uint64
}

func (e deadEntry) Key() string                  { return "dead." + e.recipient }
func (e deadEntry) Value() []byte                { return []byte(`{"reason":"blocked"}`) }
func (e deadEntry) Revision() uint64             { return e.rev }
func (e deadEntry) Operation() natsjs.KeyValueOp { return natsjs.KeyValuePut }

// TestSharedStateReadyAfterAFailedFirstWatch: a worker started while
// notify_chats is electing a leader fails its first watches ("JetStream
// system temporarily unavailable"); the attempt that loads the initial
// values must still let it consume. Before the fix only the first attempt
// could, and every worker started then waited without consuming (the
// cluster chaos run, seed 11).
func TestSharedStateReadyAfterAFailedFirstWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		loaded := make(chan natsjs.KeyValueEntry, 2)
		loaded <- deadEntry{recipient: "42", rev: 3}
		loaded <- nil
		kv := &scriptedWatches{steps: []watchStep{
			{err: natsjs.ErrJetStreamNotEnabled},
			{err: natsjs.ErrJetStreamNotEnabled},
			{updates: loaded},
		}}
		s := newSharedState(kv, "telegram", slog.New(slog.DiscardHandler), nil)
		waitReady(t, s, 2*time.Second+time.Millisecond)
		if _, dead := s.deadRecipient("42"); !dead {
			t.Fatal("the value loaded by the third watch is missing")
		}
	})
}

// TestSharedStateStalledLoadIsWatchedAgain: a watch whose initial values
// stop before their end mark is replaced after initialLoadStall, and the
// next one's values make the worker ready; a load that keeps delivering
// values is not cut however long it takes.
func TestSharedStateStalledLoadIsWatchedAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stalled := make(chan natsjs.KeyValueEntry, 1)
		stalled <- deadEntry{recipient: "7", rev: 2}
		slow := make(chan natsjs.KeyValueEntry)
		kv := &scriptedWatches{steps: []watchStep{{updates: stalled}, {updates: slow}}}
		s := newSharedState(kv, "telegram", slog.New(slog.DiscardHandler), nil)
		go func() {
			// The second load: a value every 4 s (under the stall bound),
			// then its end, 12 s after it began.
			for i := range 3 {
				time.Sleep(initialLoadStall - time.Second)
				slow <- deadEntry{recipient: strconv.Itoa(100 + i), rev: uint64(10 + i)}
			}
			slow <- nil
		}()
		start := time.Now()
		waitReady(t, s, time.Minute)
		// The first watch stalls out 5 s after its value, the watcher waits
		// 1 s; the second load takes its first value then (due since 4 s)
		// and its end 8 s later, at 14 s.
		if got := time.Since(start); got < 3*(initialLoadStall-time.Second) {
			t.Fatalf("ready after %s, before the second load ended", got)
		}
		if kv.calls != 2 {
			t.Fatalf("%d watches, want 2: a load that delivers values was cut", kv.calls)
		}
		for _, r := range []string{"7", "100", "101", "102"} {
			if _, dead := s.deadRecipient(r); !dead {
				t.Fatalf("recipient %s not dead after the loads", r)
			}
		}
	})
}

// waitReady runs s.watch until ready is closed or within is over (on the
// bubble's clock), then stops it.
func waitReady(t *testing.T, s *sharedState, within time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan struct{})
	done := make(chan struct{})
	go func() { defer close(done); s.watch(ctx, ready) }()
	defer func() { cancel(); <-done }()
	select {
	case <-ready:
	case <-time.After(within):
		t.Fatalf("not ready within %s", within)
	}
}

// putsKV is a notify_chats bucket that records its puts.
type putsKV struct {
	natsjs.KeyValue
	mu   sync.Mutex
	puts map[string][]byte
	rev  uint64
}

func (k *putsKV) Bucket() string { return "notify_chats" }
func (k *putsKV) Put(_ context.Context, key string, value []byte) (uint64, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.rev++
	k.puts[key] = append([]byte(nil), value...)
	return k.rev, nil
}

// Two 429s answered together reach the dispatcher in any order: the pause
// stored in the bucket is the one that ends last, so that a worker started
// after this one dies keeps it. Found by the long chaos run: 429s of 3 s
// and 6 s read a millisecond apart, the 3 s one written last, and the next
// worker sent 5.7 s into the 6 s pause.
func TestPersisterStoresTheLongestPause(t *testing.T) {
	kv := &putsKV{puts: map[string][]byte{}}
	s := newSharedState(kv, "telegram", slog.New(slog.DiscardHandler), nil)
	p := newPersister(s, nil, func() bool { return true }, slog.New(slog.DiscardHandler))
	go p.run()
	now := time.Now()
	long := pause{Until: now.Add(6 * time.Second), Reason: "429 for recipient 2"}
	p.pause(long)
	p.pause(pause{Until: now.Add(3 * time.Second), Reason: "429 for recipient 1"})
	p.close(5 * time.Second)
	var stored pause
	if err := json.Unmarshal(kv.puts["pause.bot"], &stored); err != nil {
		t.Fatalf("stored pause %q: %v", kv.puts["pause.bot"], err)
	}
	if !stored.Until.Equal(long.Until) {
		t.Errorf("stored pause until %v (%s), want the longer one until %v", stored.Until, stored.Reason, long.Until)
	}
}
