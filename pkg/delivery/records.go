package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// deliveries is the idempotency record: notify_delivered in JetStream, plus
// a bounded in-memory set of recent keys. The memory set covers the window in
// which the bucket cannot be written (NATS down right after Telegram accepted
// a message): a redelivery of that message is then still recognised by this
// process.
type deliveries struct {
	kv natsjs.KeyValue

	mu     sync.Mutex
	recent map[string]struct{}
	ring   []string
	next   int
}

func newDeliveries(kv natsjs.KeyValue, remember int) *deliveries {
	return &deliveries{kv: kv, recent: make(map[string]struct{}, remember), ring: make([]string, remember)}
}

func (d *deliveries) remember(key string) {
	if len(d.ring) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, ok := d.recent[key]; ok {
		return
	}
	if old := d.ring[d.next]; old != "" {
		delete(d.recent, old)
	}
	d.ring[d.next] = key
	d.recent[key] = struct{}{}
	d.next = (d.next + 1) % len(d.ring)
}

// delivered reports whether a notification with this key was already sent.
func (d *deliveries) delivered(ctx context.Context, key string) (bool, error) {
	d.mu.Lock()
	_, ok := d.recent[key]
	d.mu.Unlock()
	if ok {
		return true, nil
	}
	_, err := d.kv.Get(ctx, recordKey(key))
	switch {
	case err == nil:
		d.remember(key)
		return true, nil
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return false, nil
	default:
		return false, fmt.Errorf("reading delivery record of %q: %w", key, err)
	}
}

// record stores the proof of delivery. The key is remembered in memory first,
// so it counts even when the bucket write fails.
func (d *deliveries) record(ctx context.Context, r DeliveryRecord) error {
	d.remember(r.Key)
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if _, err := d.kv.Put(ctx, recordKey(r.Key), b); err != nil {
		return fmt.Errorf("writing delivery record of %q to %s: %w", r.Key, jetstream.BucketDelivered, err)
	}
	return nil
}

// attempts counts the failed attempts of each notification in
// notify_attempts, so that the budget survives redeliveries, restarts and a
// move to the standby worker.
type attempts struct {
	kv natsjs.KeyValue
}

func (a attempts) get(ctx context.Context, key string) (int, error) {
	e, err := a.kv.Get(ctx, recordKey(key))
	switch {
	case errors.Is(err, natsjs.ErrKeyNotFound):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("reading attempts of %q: %w", key, err)
	}
	n, err := strconv.Atoi(string(e.Value()))
	if err != nil {
		return 0, nil // a corrupt counter restarts the budget rather than blocking the message
	}
	return n, nil
}

func (a attempts) set(ctx context.Context, key string, n int) error {
	if _, err := a.kv.Put(ctx, recordKey(key), []byte(strconv.Itoa(n))); err != nil {
		return fmt.Errorf("writing attempts of %q: %w", key, err)
	}
	return nil
}

func (a attempts) clear(ctx context.Context, key string) error {
	if err := a.kv.Delete(ctx, recordKey(key)); err != nil && !errors.Is(err, natsjs.ErrKeyNotFound) {
		return fmt.Errorf("clearing attempts of %q: %w", key, err)
	}
	return nil
}
