package system

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// DeadLetter is one message of NOTIFY_DEAD, as the worker wrote it.
type DeadLetter struct {
	// Seq is its sequence in NOTIFY_DEAD.
	Seq uint64
	// Subject is dead.notify.<channel>.<reason>.<recipient>.
	Subject string
	// Key is the notification's idempotency key (Notify-Key).
	Key string
	// Reason is Notify-Reason: blocked, max_attempts, poison, …
	Reason string
	// Description is Notify-Error-Description.
	Description string
	// Attempts is Notify-Attempts.
	Attempts int
	// OriginalSeq is Notify-Original-Seq, its sequence in NOTIFY.
	OriginalSeq uint64
	// DeadAt is Notify-Dead-At, when the worker dead-lettered it.
	DeadAt time.Time
}

// ConsumerInfo returns the telegram worker's consumer.
func ConsumerInfo(ctx context.Context, js natsjs.JetStream) (*natsjs.ConsumerInfo, error) {
	c, err := js.Consumer(ctx, jetstream.StreamNotify, jetstream.ConsumerTelegram)
	if err != nil {
		return nil, fmt.Errorf("reading consumer %s: %w", jetstream.ConsumerTelegram, err)
	}
	return c.Info(ctx)
}

// NotificationsInStream counts the Telegram notifications stored in NOTIFY.
func NotificationsInStream(ctx context.Context, js natsjs.JetStream) (uint64, error) {
	st, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", jetstream.StreamNotify, err)
	}
	info, err := st.Info(ctx, natsjs.WithSubjectFilter(jetstream.TelegramFilter))
	if err != nil {
		return 0, fmt.Errorf("reading stream %s: %w", jetstream.StreamNotify, err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n, nil
}

// Drained reports whether the pipeline is empty: NOTIFY holds at least want
// notifications (over every channel; a notification handed to the next
// channel of its route counts once per channel), and no channel's consumer
// has anything pending or unacknowledged.
func Drained(ctx context.Context, js natsjs.JetStream, want uint64) (bool, error) {
	var inStream uint64
	for _, f := range channelFilters() {
		n, err := SubjectCount(ctx, js, jetstream.StreamNotify, f)
		if err != nil {
			return false, err
		}
		inStream += n
	}
	bs, err := Backlogs(ctx, js)
	if err != nil {
		return false, err
	}
	return inStream >= want && Empty(bs), nil
}

// DeadLetters reads every message of NOTIFY_DEAD.
func DeadLetters(ctx context.Context, js natsjs.JetStream) ([]DeadLetter, error) {
	st, err := js.Stream(ctx, jetstream.StreamDead)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", jetstream.StreamDead, err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", jetstream.StreamDead, err)
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	var out []DeadLetter
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, natsjs.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return out, fmt.Errorf("reading dead letter %d: %w", seq, err)
		}
		attempts, _ := strconv.Atoi(m.Header.Get(jetstream.HeaderAttempts))
		orig, _ := strconv.ParseUint(m.Header.Get(jetstream.HeaderOriginalSeq), 10, 64)
		deadAt, _ := time.Parse(time.RFC3339Nano, m.Header.Get(jetstream.HeaderDeadAt))
		out = append(out, DeadLetter{
			Seq: seq, Subject: m.Subject,
			Key:         m.Header.Get(jetstream.HeaderKey),
			Reason:      m.Header.Get(jetstream.HeaderReason),
			Description: m.Header.Get(jetstream.HeaderErrorDescription),
			Attempts:    attempts,
			OriginalSeq: orig,
			DeadAt:      deadAt,
		})
	}
	return out, nil
}

// DeliveryRecords reads the worker's delivery records (notify_delivered),
// without the send claims and cancel marks that bucket also holds.
func DeliveryRecords(ctx context.Context, js natsjs.JetStream) ([]delivery.DeliveryRecord, error) {
	kv, err := js.KeyValue(ctx, jetstream.BucketDelivered)
	if err != nil {
		return nil, fmt.Errorf("opening bucket %s: %w", jetstream.BucketDelivered, err)
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing bucket %s: %w", jetstream.BucketDelivered, err)
	}
	var out []delivery.DeliveryRecord
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if err != nil {
			continue // deleted or expired meanwhile
		}
		var rec delivery.DeliveryRecord
		if err := json.Unmarshal(e.Value(), &rec); err != nil {
			return out, fmt.Errorf("decoding delivery record %s: %w", k, err)
		}
		if rec.State != delivery.StateDelivered {
			continue // a send claim or a cancel mark
		}
		out = append(out, rec)
	}
	return out, nil
}
