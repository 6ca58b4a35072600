package intake

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
)

// The poller's lease. One key of notify_chats, LeaseKey, holds who polls
// and the offset (the next update's id). Every write is a compare-and-set
// on the key's revision (KeyValue.Update), so of two workers that race for
// it one wins, and a poller that lost it cannot move the offset.
//
// Nobody compares clocks across hosts. The holder renews the lease every
// TTL/3 (a new revision) and stops polling when it could not for TTL/2, by
// its own clock. A standby watches the key and takes it when its revision
// has not changed for TTL by the standby's clock, or when the holder
// released it (a graceful stop writes no owner). Between the holder
// stopping and a standby starting lie at least TTL/2: two pollers never
// overlap, and Telegram never answers 409 for that reason.

// leaseRecord is the value of LeaseKey.
type leaseRecord struct {
	// Owner is the poller holding the lease; empty when released.
	Owner string `json:"owner"`
	// Offset is the id of the next update to apply.
	Offset int64 `json:"offset"`
	// BotID is the bot whose updates Offset counts: a token for another
	// bot starts from Telegram's oldest update.
	BotID int64 `json:"bot_id,omitempty"`
	// Renewed is when the holder last wrote it, for whoever reads it.
	Renewed time.Time `json:"renewed"`
}

// observed is what the watcher last saw of the key.
type observed struct {
	loaded  bool   // the initial value (or its absence) was read
	present bool   // the key holds a record
	rev     uint64 // the revision to update (0: never written)
	rec     leaseRecord
	seenAt  time.Time // when this revision was first seen, locally
}

// lease is one poller's side of LeaseKey.
type lease struct {
	kv    natsjs.KeyValue
	owner string
	ttl   time.Duration
	log   *slog.Logger

	mu      sync.Mutex
	obs     observed
	changed chan struct{} // signalled (non-blocking) when obs changes
	// While held: the revision written last, the record, and when the
	// last write succeeded.
	held    bool
	rev     uint64
	rec     leaseRecord
	written time.Time
}

func newLease(kv natsjs.KeyValue, owner string, ttl time.Duration, log *slog.Logger) *lease {
	return &lease{kv: kv, owner: owner, ttl: ttl, log: log, changed: make(chan struct{}, 1)}
}

// errLeaseLost reports a write refused because another poller wrote the key
// since: it holds the lease now.
var errLeaseLost = errors.New("the intake lease was taken by another worker")

// watch follows the key until ctx ends, restarting after failures.
func (l *lease) watch(ctx context.Context) {
	for {
		err := l.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		l.log.Warn("intake lease watcher stopped; restarting", "err", err)
		if !sleepCtx(ctx, time.Second) {
			return
		}
	}
}

func (l *lease) watchOnce(ctx context.Context) error {
	w, err := l.kv.Watch(ctx, LeaseKey)
	if err != nil {
		return fmt.Errorf("watching %s/%s: %w", l.kv.Bucket(), LeaseKey, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watcher closed")
			}
			l.mu.Lock()
			if e == nil {
				l.obs.loaded = true
				if l.obs.seenAt.IsZero() {
					l.obs.seenAt = time.Now()
				}
			} else if e.Revision() != l.obs.rev {
				l.obs = observed{loaded: l.obs.loaded, rev: e.Revision(), seenAt: time.Now()}
				if e.Operation() == natsjs.KeyValuePut {
					l.obs.present = json.Unmarshal(e.Value(), &l.obs.rec) == nil
				}
			}
			l.mu.Unlock()
			select {
			case l.changed <- struct{}{}:
			default:
			}
		}
	}
}

// acquire waits until the lease is free — never written, released, or not
// renewed for TTL — and takes it. It returns the record it took (whose
// Offset is where to start), or ctx's error.
func (l *lease) acquire(ctx context.Context) (leaseRecord, error) {
	for {
		l.mu.Lock()
		obs := l.obs
		l.mu.Unlock()
		wait := l.ttl / 3
		if obs.loaded {
			stale := time.Since(obs.seenAt)
			if !obs.present || obs.rec.Owner == "" || stale >= l.ttl {
				rec, err := l.take(ctx, obs, stale)
				if err == nil {
					return rec, nil
				}
				if ctx.Err() != nil {
					return leaseRecord{}, ctx.Err()
				}
				if !errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
					l.log.Warn("cannot take the intake lease; trying again", "err", err)
				}
			} else {
				wait = l.ttl - stale
			}
		}
		t := time.NewTimer(max(wait, 10*time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return leaseRecord{}, ctx.Err()
		case <-l.changed:
		case <-t.C:
		}
		t.Stop()
	}
}

// take writes this poller into the record it observed.
func (l *lease) take(ctx context.Context, obs observed, stale time.Duration) (leaseRecord, error) {
	rec := obs.rec
	if !obs.present {
		rec = leaseRecord{}
	}
	prev := rec.Owner
	rec.Owner, rec.Renewed = l.owner, time.Now().UTC()
	b, err := json.Marshal(rec)
	if err != nil {
		return leaseRecord{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	rev, err := l.kv.Update(wctx, LeaseKey, b, obs.rev)
	if err != nil {
		return leaseRecord{}, fmt.Errorf("taking %s/%s: %w", l.kv.Bucket(), LeaseKey, err)
	}
	l.mu.Lock()
	l.held, l.rev, l.rec, l.written = true, rev, rec, time.Now()
	l.mu.Unlock()
	switch {
	case prev == "":
		l.log.Info("took the intake lease: this worker polls the bot's updates", "offset", rec.Offset)
	default:
		l.log.Warn("took the intake lease from a poller that stopped renewing it", "previous", prev, "silent_for", stale.Round(time.Millisecond), "offset", rec.Offset)
	}
	return rec, nil
}

// write updates the held record with change applied; errLeaseLost when
// another poller wrote the key since.
func (l *lease) write(ctx context.Context, change func(*leaseRecord)) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return errLeaseLost
	}
	rec := l.rec
	change(&rec)
	rec.Renewed = time.Now().UTC()
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	rev, err := l.kv.Update(wctx, LeaseKey, b, l.rev)
	if errors.Is(err, natsjs.ErrKeyRevisionMismatch) {
		l.held = false
		return errLeaseLost
	}
	if err != nil {
		return fmt.Errorf("writing %s/%s: %w", l.kv.Bucket(), LeaseKey, err)
	}
	l.rev, l.rec, l.written = rev, rec, time.Now()
	return nil
}

// renew writes the record again: a new revision tells the standbys that
// the holder lives.
func (l *lease) renew(ctx context.Context) error { return l.write(ctx, func(*leaseRecord) {}) }

// commit records the offset of the next update.
func (l *lease) commit(ctx context.Context, offset int64, botID int64) error {
	return l.write(ctx, func(r *leaseRecord) { r.Offset, r.BotID = offset, botID })
}

// valid reports whether the holder may still poll, and for how long at
// most: its last write is less than TTL/2 old, and nobody wrote the key
// since.
func (l *lease) valid() (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.obs.rev > l.rev {
		l.held = false
	}
	left := l.ttl/2 - time.Since(l.written)
	return l.held && left > 0, left
}

// release gives the lease up, keeping the offset, so that a standby takes
// it at once.
func (l *lease) release(ctx context.Context) {
	err := l.write(ctx, func(r *leaseRecord) { r.Owner = "" })
	l.mu.Lock()
	l.held = false
	l.mu.Unlock()
	if err != nil && !errors.Is(err, errLeaseLost) {
		l.log.Warn("cannot release the intake lease; a standby takes it once it expires", "err", err)
	}
}

// sleepCtx waits d unless ctx ends first; it reports whether d passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
