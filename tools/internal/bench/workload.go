package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// benchOrder returns a typical order: two items, one whose name needs HTML
// escaping, so that the notification text is the shop's real template.
func benchOrder(id string, chat int64) shop.Order {
	return shop.Order{ID: id, ChatID: chat, Customer: "Ann", Items: []shop.Item{
		{Name: "Tea", Qty: 1, PriceCents: 350},
		{Name: "Cake <large>", Qty: 2, PriceCents: 1299},
	}}
}

// benchNotification returns the notification PlaceOrder would enqueue for
// benchOrder(id, chat).
func benchNotification(id string, chat int64, created time.Time) notify.Notification {
	return notify.Notification{
		Key:       shop.NotificationKey(id),
		ChatID:    chat,
		Text:      shop.AcceptedMessage(benchOrder(id, chat)),
		ParseMode: notify.ParseModeHTML,
		Priority:  notify.PriorityTransactional,
		CreatedAt: created,
	}
}

// shopDB is the example shop's service on its own outbox database file, as
// the application runs it.
type shopDB struct {
	path string
	db   *sql.DB
	svc  *shop.Service
}

// openShop opens (creating) the database at path and the shop's service.
func openShop(ctx context.Context, path string, opts ...shop.Option) (*shopDB, error) {
	db, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		return nil, err
	}
	svc, err := shop.NewService(ctx, db, opts...)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &shopDB{path: path, db: db, svc: svc}, nil
}

// place places order id for chat and returns when it is committed.
func (s *shopDB) place(ctx context.Context, id string, chat int64) error {
	_, created, err := s.svc.PlaceOrder(ctx, benchOrder(id, chat))
	if err == nil && !created {
		err = fmt.Errorf("order %s already existed", id)
	}
	return err
}

func (s *shopDB) close() error { return errors.Join(s.svc.Close(), s.db.Close()) }

// fillOutbox writes n notifications (order ids prefix0..prefix<n-1>, chats
// chat(i)) into the outbox at path, perTx rows a transaction, and
// checkpoints the WAL so the drain starts from a settled file, as a running
// application's checkpoints would leave it.
func fillOutbox(ctx context.Context, path, prefix string, n, perTx int, chat func(i int) int64) error {
	db, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		return err
	}
	defer db.Close()
	w, err := outbox.NewWriter(ctx, db)
	if err != nil {
		return err
	}
	defer w.Close()
	now := time.Now().UTC()
	for start := 0; start < n; start += perTx {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("filling the outbox: %w", err)
		}
		for i := start; i < min(n, start+perTx); i++ {
			if _, err := w.Enqueue(ctx, tx, benchNotification(prefix+strconv.Itoa(i), chat(i), now)); err != nil {
				tx.Rollback()
				return fmt.Errorf("filling the outbox: %w", err)
			}
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("filling the outbox: %w", err)
		}
	}
	if _, err := outbox.NewReader(db).Checkpoint(ctx, "TRUNCATE"); err != nil {
		return fmt.Errorf("checkpointing the filled outbox: %w", err)
	}
	return nil
}

// pendingRows reads every pending row of the outbox at path, in id order.
func pendingRows(ctx context.Context, path string) ([]outbox.Row, error) {
	db, err := outbox.Open(ctx, path, outbox.Options{})
	if err != nil {
		return nil, err
	}
	defer db.Close()
	r := outbox.NewReader(db)
	var out []outbox.Row
	var after int64
	for {
		rows, err := r.Pending(ctx, after, 4096)
		if err != nil {
			return nil, err
		}
		if len(rows) == 0 {
			return out, nil
		}
		out = append(out, rows...)
		after = rows[len(rows)-1].ID
	}
}

// publishAsync publishes msgs with nats.go's JetStream async publish and
// waits for every PubAck. It returns how many publishes failed.
func publishAsync(ctx context.Context, nc *nats.Conn, n int, msg func(i int) (*nats.Msg, error)) (failed int64, err error) {
	var errs atomic.Int64
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncErrHandler(func(natsjs.JetStream, *nats.Msg, error) { errs.Add(1) }))
	if err != nil {
		return 0, err
	}
	for i := range n {
		m, err := msg(i)
		if err != nil {
			return errs.Load(), err
		}
		// Wait for room when the window of outstanding PubAcks is full
		// (a server that fsyncs every write drains it slowly) instead
		// of failing after nats.go's default 200 ms.
		if _, err := js.PublishMsgAsync(m, natsjs.WithStallWait(time.Minute)); err != nil {
			return errs.Load(), fmt.Errorf("publishing message %d: %w", i, err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return errs.Load(), ctx.Err()
	case <-time.After(5 * time.Minute):
		return errs.Load(), errors.New("PubAcks did not arrive within 5 minutes")
	}
	return errs.Load(), nil
}

// preload puts n notifications into NOTIFY as the publisher would (order
// ids prefix<i>, chat chat(i)), for scenarios that start from a backlog.
func preload(ctx context.Context, st *stack, prefix string, n int, chat func(i int) int64) error {
	now := time.Now().UTC()
	failed, err := publishAsync(ctx, st.nc, n, func(i int) (*nats.Msg, error) {
		note := benchNotification(prefix+strconv.Itoa(i), chat(i), now)
		p, err := note.MarshalPayload()
		if err != nil {
			return nil, err
		}
		return jetstream.NotificationMsg(note.ChatID, note.Key, now, notify.PayloadContentType, p), nil
	})
	if err != nil {
		return fmt.Errorf("preloading NOTIFY: %w", err)
	}
	if failed > 0 {
		return fmt.Errorf("preloading NOTIFY: %d publishes failed", failed)
	}
	if got, err := streamMsgs(ctx, st.js); err != nil || got != uint64(n) {
		return fmt.Errorf("preloading NOTIFY: stream holds %d messages, want %d (%v)", got, n, err)
	}
	return nil
}

// streamMsgs returns the number of messages in NOTIFY.
func streamMsgs(ctx context.Context, js natsjs.JetStream) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	s, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

// subjectMsgs returns the number of messages in NOTIFY on subject.
func subjectMsgs(ctx context.Context, js natsjs.JetStream, subject string) (uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	s, err := js.Stream(ctx, jetstream.StreamNotify)
	if err != nil {
		return 0, err
	}
	info, err := s.Info(ctx, natsjs.WithSubjectFilter(subject))
	if err != nil {
		return 0, err
	}
	return info.State.Subjects[subject], nil
}

// consumerIdle reports whether the worker's consumer has nothing pending and
// nothing unacknowledged: every message was handled and acked.
func consumerIdle(ctx context.Context, js natsjs.JetStream) bool {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	c, err := js.Consumer(ctx, jetstream.StreamNotify, jetstream.ConsumerTelegram)
	if err != nil {
		return false
	}
	info, err := c.Info(ctx)
	return err == nil && info.NumPending == 0 && info.NumAckPending == 0
}
