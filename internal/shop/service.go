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
CREATE TABLE IF NOT EXISTS notification_status (
	key        TEXT    PRIMARY KEY,
	status     TEXT    NOT NULL,
	channel    TEXT    NOT NULL,
	reason     TEXT    NOT NULL,
	at         INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS telegram_unavailable (
	chat_id    INTEGER PRIMARY KEY,
	reason     TEXT    NOT NULL,
	at         INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS order_items (
	order_id    TEXT    NOT NULL REFERENCES orders (id),
	line        INTEGER NOT NULL,
	name        TEXT    NOT NULL,
	qty         INTEGER NOT NULL,
	price_cents INTEGER NOT NULL,
	PRIMARY KEY (order_id, line)
) WITHOUT ROWID`

// addressColumns are the customer's addresses besides the Telegram chat,
// added to orders of an older database.
var addressColumns = [...]string{
	`ALTER TABLE orders ADD COLUMN max_user_id INTEGER NOT NULL DEFAULT 0`,
	`ALTER TABLE orders ADD COLUMN email TEXT NOT NULL DEFAULT ''`,
	`ALTER TABLE orders ADD COLUMN phone TEXT NOT NULL DEFAULT ''`,
}

// Service places and reads orders.
type Service struct {
	db          *sql.DB
	outbox      *outbox.Writer
	get         *sql.Stmt
	getItems    *sql.Stmt
	getStatus   *sql.Stmt
	insert      *sql.Stmt
	insertItem  *sql.Stmt
	unavailable *sql.Stmt
	now         func() time.Time
	notify      bool
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
	if err := addColumns(ctx, db); err != nil {
		return nil, err
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
		{&s.get, `SELECT chat_id, max_user_id, email, phone, customer, total_cents, created_at FROM orders WHERE id = ?`},
		{&s.getItems, `SELECT name, qty, price_cents FROM order_items WHERE order_id = ? ORDER BY line`},
		{&s.getStatus, `SELECT status, channel, reason, at FROM notification_status WHERE key = ?`},
		{&s.insert, `INSERT INTO orders (id, chat_id, max_user_id, email, phone, customer, total_cents, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`},
		{&s.insertItem, `INSERT INTO order_items (order_id, line, name, qty, price_cents) VALUES (?, ?, ?, ?, ?)`},
		{&s.unavailable, `SELECT 1 FROM telegram_unavailable WHERE chat_id = ?`},
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
	for _, st := range []*sql.Stmt{s.get, s.getItems, s.getStatus, s.insert, s.insertItem, s.unavailable} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// addColumns adds the address columns a database made by an older shop
// lacks.
func addColumns(ctx context.Context, db *sql.DB) error {
	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('orders') WHERE name = 'email'`).Scan(&n); err != nil {
		return fmt.Errorf("reading the orders table: %w", err)
	}
	if n > 0 {
		return nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, q := range addressColumns {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("adding address columns to orders: %w", err)
		}
	}
	return tx.Commit()
}

// PlaceOrder saves the order and enqueues its "order accepted" notification
// (key order:<id>:accepted) in one transaction. Nothing else happens here: no
// call to Telegram, so a slow or failing API cannot slow or fail checkout.
//
// The notification's route follows the addresses given, in the order
// telegram, max, email, sms; Telegram is left out when the customer's chat
// is known to be unavailable (the pipeline told the shop it was found dead),
// unless it is the only address.
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

	placed = PlacedOrder{Order: o, TotalCents: o.Total(), CreatedAt: s.now().UTC(), NotificationKey: NotificationKey(o.ID),
		Notification: NotificationStatus{Status: StatusPending}}
	if _, err := tx.StmtContext(ctx, s.insert).ExecContext(ctx,
		o.ID, o.ChatID, o.MaxUserID, o.Email, o.Phone, o.Customer, placed.TotalCents, placed.CreatedAt.UnixNano()); err != nil {
		return PlacedOrder{}, false, fmt.Errorf("saving order %s: %w", o.ID, err)
	}
	insertItem := tx.StmtContext(ctx, s.insertItem)
	for i, it := range o.Items {
		if _, err := insertItem.ExecContext(ctx, o.ID, i, it.Name, it.Qty, it.PriceCents); err != nil {
			return PlacedOrder{}, false, fmt.Errorf("saving order %s item %d: %w", o.ID, i, err)
		}
	}
	if s.notify {
		n := notify.Notification{
			Key:       placed.NotificationKey,
			ChatID:    o.ChatID,
			MaxUserID: o.MaxUserID,
			Email:     o.Email,
			Phone:     o.Phone,
			Subject:   "Order " + o.ID + " accepted",
			Text:      text,
			ParseMode: notify.ParseModeHTML,
			Priority:  notify.PriorityTransactional,
			CreatedAt: placed.CreatedAt,
		}
		n.Route = n.DefaultRoute()
		if o.ChatID != 0 && len(n.Route) > 1 {
			var one int
			err := tx.StmtContext(ctx, s.unavailable).QueryRowContext(ctx, o.ChatID).Scan(&one)
			switch {
			case err == nil:
				n.Route = n.Route[1:] // Telegram is first when there is a chat
			case !errors.Is(err, sql.ErrNoRows):
				return PlacedOrder{}, false, fmt.Errorf("placing order %s: %w", o.ID, err)
			}
		}
		if len(n.Route) == 1 && n.Route[0] == notify.ChannelTelegram {
			n.Route = nil // written as payload version 1, which every worker reads
		}
		_, err := s.outbox.Enqueue(ctx, tx, n)
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

// Order returns a stored order with what the shop knows of its
// notification.
func (s *Service) Order(ctx context.Context, id string) (PlacedOrder, error) {
	p, err := s.getOrder(ctx, s.get, s.getItems, id)
	if err != nil {
		return p, err
	}
	var at int64
	var st NotificationStatus
	err = s.getStatus.QueryRowContext(ctx, p.NotificationKey).Scan(&st.Status, &st.Channel, &st.Reason, &at)
	switch {
	case err == nil:
		t := time.Unix(0, at).UTC()
		st.At = &t
		p.Notification = st
	case !errors.Is(err, sql.ErrNoRows):
		return PlacedOrder{}, fmt.Errorf("reading the notification status of order %s: %w", id, err)
	}
	return p, nil
}

func (s *Service) getOrder(ctx context.Context, get, getItems *sql.Stmt, id string) (PlacedOrder, error) {
	p := PlacedOrder{Order: Order{ID: id}, NotificationKey: NotificationKey(id)}
	var created int64
	err := get.QueryRowContext(ctx, id).Scan(&p.ChatID, &p.MaxUserID, &p.Email, &p.Phone, &p.Customer, &p.TotalCents, &created)
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
	p.Notification = NotificationStatus{Status: StatusPending}
	return p, nil
}
