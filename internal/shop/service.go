package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// schema is the shop's own tables, created next to the outbox in the same
// database file so that an order and its notification share a transaction.
const schema = `CREATE TABLE IF NOT EXISTS orders (
	id          TEXT    PRIMARY KEY,
	chat_id     INTEGER NOT NULL,
	customer    TEXT    NOT NULL,
	total_cents INTEGER NOT NULL,
	created_at  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS order_items (
	order_id    TEXT    NOT NULL REFERENCES orders (id),
	line        INTEGER NOT NULL,
	name        TEXT    NOT NULL,
	qty         INTEGER NOT NULL,
	price_cents INTEGER NOT NULL,
	PRIMARY KEY (order_id, line)
) WITHOUT ROWID`

// Service places and reads orders.
type Service struct {
	db         *sql.DB
	outbox     *outbox.Writer
	get        *sql.Stmt
	getItems   *sql.Stmt
	insert     *sql.Stmt
	insertItem *sql.Stmt
	now        func() time.Time
	notify     bool
}

// Option configures a [Service].
type Option func(*Service)

// WithClock sets the clock used for created_at times.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// WithoutNotifications makes PlaceOrder save orders without enqueueing their
// notification. It exists to measure what the outbox write costs.
func WithoutNotifications() Option { return func(s *Service) { s.notify = false } }

// NewService creates the orders table if needed and returns a Service over a
// database opened with outbox.Open. Close it before closing the database.
func NewService(ctx context.Context, db *sql.DB, opts ...Option) (*Service, error) {
	if _, err := db.ExecContext(ctx, schema); err != nil {
		return nil, fmt.Errorf("creating orders table: %w", err)
	}
	s := &Service{db: db, now: time.Now, notify: true}
	for _, o := range opts {
		o(s)
	}
	var err error
	if s.outbox, err = outbox.NewWriter(ctx, db); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		st    **sql.Stmt
		query string
	}{
		{&s.get, `SELECT chat_id, customer, total_cents, created_at FROM orders WHERE id = ?`},
		{&s.getItems, `SELECT name, qty, price_cents FROM order_items WHERE order_id = ? ORDER BY line`},
		{&s.insert, `INSERT INTO orders (id, chat_id, customer, total_cents, created_at) VALUES (?, ?, ?, ?, ?)`},
		{&s.insertItem, `INSERT INTO order_items (order_id, line, name, qty, price_cents) VALUES (?, ?, ?, ?, ?)`},
	} {
		if *p.st, err = db.PrepareContext(ctx, p.query); err != nil {
			s.Close()
			return nil, fmt.Errorf("preparing %q: %w", p.query, err)
		}
	}
	return s, nil
}

// Close releases the service's prepared statements.
func (s *Service) Close() error {
	var errs []error
	if s.outbox != nil {
		errs = append(errs, s.outbox.Close())
	}
	for _, st := range []*sql.Stmt{s.get, s.getItems, s.insert, s.insertItem} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// PlaceOrder saves the order and enqueues its "order accepted" notification
// (key order:<id>:accepted) in one transaction. Nothing else happens here: no
// call to Telegram, so a slow or failing API cannot slow or fail checkout.
//
// It is idempotent on the order id: placing the same order again returns the
// stored order with created=false and writes nothing; placing a different
// order under a used id returns [ErrConflict]. An invalid order returns an
// error matching [ErrInvalidOrder].
func (s *Service) PlaceOrder(ctx context.Context, o Order) (placed PlacedOrder, created bool, err error) {
	if err := o.Validate(); err != nil {
		return PlacedOrder{}, false, err
	}
	var text string
	if s.notify {
		text = AcceptedMessage(o)
	}

	tx, err := s.db.BeginTx(ctx, nil) // BEGIN IMMEDIATE: see outbox.Open
	if err != nil {
		return PlacedOrder{}, false, fmt.Errorf("placing order %s: %w", o.ID, err)
	}
	defer tx.Rollback()

	existing, err := s.getOrder(ctx, tx.StmtContext(ctx, s.get), tx.StmtContext(ctx, s.getItems), o.ID)
	switch {
	case err == nil:
		if !existing.Order.Equal(o) {
			return PlacedOrder{}, false, fmt.Errorf("%w: %s", ErrConflict, o.ID)
		}
		return existing, false, nil
	case !errors.Is(err, ErrNotFound):
		return PlacedOrder{}, false, err
	}

	placed = PlacedOrder{Order: o, TotalCents: o.Total(), CreatedAt: s.now().UTC(), NotificationKey: NotificationKey(o.ID)}
	if _, err := tx.StmtContext(ctx, s.insert).ExecContext(ctx,
		o.ID, o.ChatID, o.Customer, placed.TotalCents, placed.CreatedAt.UnixNano()); err != nil {
		return PlacedOrder{}, false, fmt.Errorf("saving order %s: %w", o.ID, err)
	}
	insertItem := tx.StmtContext(ctx, s.insertItem)
	for i, it := range o.Items {
		if _, err := insertItem.ExecContext(ctx, o.ID, i, it.Name, it.Qty, it.PriceCents); err != nil {
			return PlacedOrder{}, false, fmt.Errorf("saving order %s item %d: %w", o.ID, i, err)
		}
	}
	if s.notify {
		_, err := s.outbox.Enqueue(ctx, tx, notify.Notification{
			Key:       placed.NotificationKey,
			ChatID:    o.ChatID,
			Text:      text,
			ParseMode: notify.ParseModeHTML,
			Priority:  notify.PriorityTransactional,
			CreatedAt: placed.CreatedAt,
		})
		if err != nil {
			if errors.Is(err, notify.ErrInvalid) {
				// The order passed validation but its message does not fit
				// Telegram (too long with many long item names).
				return PlacedOrder{}, false, invalidOrder("items", "the order message would be invalid: %v", err)
			}
			return PlacedOrder{}, false, fmt.Errorf("placing order %s: %w", o.ID, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return PlacedOrder{}, false, fmt.Errorf("committing order %s: %w", o.ID, err)
	}
	return placed, true, nil
}

// Order returns a stored order.
func (s *Service) Order(ctx context.Context, id string) (PlacedOrder, error) {
	return s.getOrder(ctx, s.get, s.getItems, id)
}

func (s *Service) getOrder(ctx context.Context, get, getItems *sql.Stmt, id string) (PlacedOrder, error) {
	p := PlacedOrder{Order: Order{ID: id}, NotificationKey: NotificationKey(id)}
	var created int64
	err := get.QueryRowContext(ctx, id).Scan(&p.ChatID, &p.Customer, &p.TotalCents, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return PlacedOrder{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return PlacedOrder{}, fmt.Errorf("reading order %s: %w", id, err)
	}
	p.CreatedAt = time.Unix(0, created).UTC()
	rows, err := getItems.QueryContext(ctx, id)
	if err != nil {
		return PlacedOrder{}, fmt.Errorf("reading order %s items: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var it Item
		if err := rows.Scan(&it.Name, &it.Qty, &it.PriceCents); err != nil {
			return PlacedOrder{}, fmt.Errorf("reading order %s items: %w", id, err)
		}
		p.Items = append(p.Items, it)
	}
	if err := rows.Err(); err != nil {
		return PlacedOrder{}, fmt.Errorf("reading order %s items: %w", id, err)
	}
	return p, nil
}
