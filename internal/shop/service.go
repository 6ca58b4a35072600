package shop

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/template"
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

// addedColumns are the columns of orders that a database made by an older
// shop lacks: the customer's addresses besides the Telegram chat, the
// customer's locale, and the order's status with the times it changed.
func addedColumns() []struct{ name, ddl string } {
	return []struct{ name, ddl string }{
		{"max_user_id", `ALTER TABLE orders ADD COLUMN max_user_id INTEGER NOT NULL DEFAULT 0`},
		{"email", `ALTER TABLE orders ADD COLUMN email TEXT NOT NULL DEFAULT ''`},
		{"phone", `ALTER TABLE orders ADD COLUMN phone TEXT NOT NULL DEFAULT ''`},
		{"locale", `ALTER TABLE orders ADD COLUMN locale TEXT NOT NULL DEFAULT ''`},
		{"status", `ALTER TABLE orders ADD COLUMN status TEXT NOT NULL DEFAULT 'accepted'`},
		{"shipped_at", `ALTER TABLE orders ADD COLUMN shipped_at INTEGER NOT NULL DEFAULT 0`},
		{"delivered_at", `ALTER TABLE orders ADD COLUMN delivered_at INTEGER NOT NULL DEFAULT 0`},
	}
}

// Service places orders, moves them through shipped and delivered, and
// reads them.
type Service struct {
	db          *sql.DB
	outbox      *outbox.Writer
	commit      *outbox.Committer
	get         *sql.Stmt
	getItems    *sql.Stmt
	getStatus   *sql.Stmt
	insert      *sql.Stmt
	insertItem  *sql.Stmt
	unavailable *sql.Stmt
	setStatus   *sql.Stmt
	now         func() time.Time
	notify      bool
	templates   *template.Registry
	orderURL    string
}

// Option configures a [Service].
type Option func(*Service)

// WithClock sets the clock used for created_at times.
func WithClock(now func() time.Time) Option { return func(s *Service) { s.now = now } }

// WithoutNotifications makes PlaceOrder save orders without enqueueing their
// notification. It exists to measure what the outbox write costs.
func WithoutNotifications() Option { return func(s *Service) { s.notify = false } }

// WithTemplates replaces the shop's messages ([Templates]) with r, which
// must have the events "accepted", "shipped" and "delivered" in its
// fallback locale.
func WithTemplates(r *template.Registry) Option { return func(s *Service) { s.templates = r } }

// CheckOrderURL checks the base URL of WithOrderURL: empty, or an absolute
// http or https URL without a query or fragment.
func CheckOrderURL(base string) error {
	if base == "" {
		return nil
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return fmt.Errorf("order URL %q is not an http or https URL without a query, such as https://shop.example/orders", base)
	}
	return nil
}

// WithOrderURL gives the shop's order pages: base followed by "/" and the
// order id (https://shop.example/orders/A1). The notifications then carry a
// button to the order (accepted), its tracking (shipped) or its review
// (delivered).
func WithOrderURL(base string) Option {
	return func(s *Service) { s.orderURL = strings.TrimSuffix(base, "/") }
}

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
	if s.templates == nil {
		if s.templates, err = Templates(); err != nil {
			return nil, fmt.Errorf("parsing the shop's templates: %w", err)
		}
	}
	if err := CheckOrderURL(s.orderURL); err != nil {
		return nil, err
	}
	if s.outbox, err = outbox.NewWriter(ctx, db); err != nil {
		return nil, err
	}
	s.commit = outbox.NewCommitter(db, 0)
	for _, p := range []struct {
		st    **sql.Stmt
		query string
	}{
		{&s.get, `SELECT chat_id, max_user_id, email, phone, locale, customer, total_cents, created_at, status, shipped_at, delivered_at FROM orders WHERE id = ?`},
		{&s.getItems, `SELECT name, qty, price_cents FROM order_items WHERE order_id = ? ORDER BY line`},
		{&s.getStatus, `SELECT status, channel, reason, at FROM notification_status WHERE key = ?`},
		{&s.insert, `INSERT INTO orders (id, chat_id, max_user_id, email, phone, locale, customer, total_cents, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`},
		{&s.insertItem, `INSERT INTO order_items (order_id, line, name, qty, price_cents) VALUES (?, ?, ?, ?, ?)`},
		{&s.unavailable, `SELECT 1 FROM telegram_unavailable WHERE chat_id = ?`},
		{&s.setStatus, `UPDATE orders SET status = ?, shipped_at = CASE WHEN ? = 'shipped' THEN ? ELSE shipped_at END,
			delivered_at = CASE WHEN ? = 'delivered' THEN ? ELSE delivered_at END WHERE id = ?`},
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
	for _, st := range []*sql.Stmt{s.get, s.getItems, s.getStatus, s.insert, s.insertItem, s.unavailable, s.setStatus} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// addColumns adds the columns a database made by an older shop lacks.
func addColumns(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	for _, c := range addedColumns() {
		var n int
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM pragma_table_info('orders') WHERE name = ?`, c.name).Scan(&n); err != nil {
			return fmt.Errorf("reading the orders table: %w", err)
		}
		if n > 0 {
			continue
		}
		if _, err := tx.ExecContext(ctx, c.ddl); err != nil {
			return fmt.Errorf("adding column %s to orders: %w", c.name, err)
		}
	}
	return tx.Commit()
}

// PlaceOrder saves the order and enqueues its "order accepted" notification
// (key order:<id>:accepted) in one transaction. Nothing else happens here: no
// call to Telegram, so a slow or failing API cannot slow or fail checkout.
//
// The notification is rendered from the shop's templates in the order's
// locale (English when it names none or one the shop does not have), for
// every channel of its route; a template that does not render fails the
// order here, before anything is written, not at send time. Its route
// follows the addresses given, in the order telegram, max, email, sms;
// Telegram is left out when the customer's chat is known to be unavailable
// (the pipeline told the shop it was found dead), unless it is the only
// address.
//
// It is idempotent on the order id: placing the same order again returns the
// stored order with created=false and writes nothing; placing a different
// order under a used id returns [ErrConflict]. An invalid order returns an
// error matching [ErrInvalidOrder].
//
// Concurrent calls (PlaceOrder, Ship, Deliver) share their transaction
// through an [outbox.Committer]: the orders that arrive while one commit is
// being fsynced are saved together with the next one, each in a savepoint
// of its own, so that one order's failure leaves the others' intact. A
// call returns when its order is committed, as before.
func (s *Service) PlaceOrder(ctx context.Context, o Order) (placed PlacedOrder, created bool, err error) {
	if err := o.Validate(); err != nil {
		return PlacedOrder{}, false, err
	}
	var own error // place's own error, returned as it is
	err = s.commit.Run(ctx, func(ctx context.Context, tx *sql.Tx) error {
		placed, created, own = s.place(ctx, tx, o)
		return own
	})
	switch {
	case own != nil:
		return PlacedOrder{}, false, own
	case err != nil:
		return PlacedOrder{}, false, fmt.Errorf("placing order %s: %w", o.ID, err)
	}
	return placed, created, nil
}

// place saves order o and enqueues its notification in tx, or returns the
// stored order when it was placed before.
func (s *Service) place(ctx context.Context, tx *sql.Tx, o Order) (PlacedOrder, bool, error) {
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

	placed := PlacedOrder{Order: o, TotalCents: o.Total(), CreatedAt: s.now().UTC(), Status: EventAccepted, NotificationKey: NotificationKey(o.ID),
		Notification: NotificationStatus{Status: StatusPending}}
	if _, err := tx.StmtContext(ctx, s.insert).ExecContext(ctx,
		o.ID, o.ChatID, o.MaxUserID, o.Email, o.Phone, o.Locale, o.Customer, placed.TotalCents, placed.CreatedAt.UnixNano()); err != nil {
		return PlacedOrder{}, false, fmt.Errorf("saving order %s: %w", o.ID, err)
	}
	insertItem := tx.StmtContext(ctx, s.insertItem)
	for i, it := range o.Items {
		if _, err := insertItem.ExecContext(ctx, o.ID, i, it.Name, it.Qty, it.PriceCents); err != nil {
			return PlacedOrder{}, false, fmt.Errorf("saving order %s item %d: %w", o.ID, i, err)
		}
	}
	if err := s.enqueue(ctx, tx, o, EventAccepted, placed.CreatedAt); err != nil {
		return PlacedOrder{}, false, err
	}
	return placed, true, nil
}

// Ship marks the order shipped and enqueues its "order shipped"
// notification (key order:<id>:shipped) in one transaction. Shipping an
// order again returns it with changed=false and writes nothing; an unknown
// order is [ErrNotFound], a delivered one [ErrTransition].
func (s *Service) Ship(ctx context.Context, id string) (PlacedOrder, bool, error) {
	return s.advance(ctx, id, EventShipped)
}

// Deliver marks a shipped order delivered and enqueues its "order
// delivered" notification (key order:<id>:delivered) in one transaction.
// Delivering it again returns it with changed=false and writes nothing; an
// order not shipped yet is [ErrTransition].
func (s *Service) Deliver(ctx context.Context, id string) (PlacedOrder, bool, error) {
	return s.advance(ctx, id, EventDelivered)
}

// advance moves an order to status (shipped or delivered) from the status
// before it, enqueueing the notification of that event.
func (s *Service) advance(ctx context.Context, id, status string) (p PlacedOrder, changed bool, err error) {
	var own error // advanceIn's own error, returned as it is
	err = s.commit.Run(ctx, func(ctx context.Context, tx *sql.Tx) error {
		p, changed, own = s.advanceIn(ctx, tx, id, status)
		return own
	})
	switch {
	case own != nil:
		return PlacedOrder{}, false, own
	case err != nil:
		return PlacedOrder{}, false, fmt.Errorf("marking order %s %s: %w", id, status, err)
	}
	return p, changed, nil
}

// advanceIn is advance inside tx.
func (s *Service) advanceIn(ctx context.Context, tx *sql.Tx, id, status string) (PlacedOrder, bool, error) {
	from := EventAccepted
	if status == EventDelivered {
		from = EventShipped
	}
	p, err := s.getOrder(ctx, tx.StmtContext(ctx, s.get), tx.StmtContext(ctx, s.getItems), id)
	if err != nil {
		return PlacedOrder{}, false, err
	}
	switch {
	case statusRank(p.Status) >= statusRank(status):
		return p, false, nil // already there (or past it): a repeat
	case p.Status != from:
		return PlacedOrder{}, false, &TransitionError{ID: id, From: p.Status, To: status}
	}
	now := s.now().UTC()
	if _, err := tx.StmtContext(ctx, s.setStatus).ExecContext(ctx, status, status, now.UnixNano(), status, now.UnixNano(), id); err != nil {
		return PlacedOrder{}, false, fmt.Errorf("marking order %s %s: %w", id, status, err)
	}
	if err := s.enqueue(ctx, tx, p.Order, status, now); err != nil {
		return PlacedOrder{}, false, err
	}
	p.Status = status
	if status == EventShipped {
		p.ShippedAt = &now
	} else {
		p.DeliveredAt = &now
	}
	return p, true, nil
}

// enqueue renders the notification of an order's event and writes it to
// the outbox in tx, unless the service sends none.
func (s *Service) enqueue(ctx context.Context, tx *sql.Tx, o Order, event string, at time.Time) error {
	if !s.notify {
		return nil
	}
	n := notify.Notification{
		Key:       NotificationKeyFor(o.ID, event),
		ChatID:    o.ChatID,
		MaxUserID: o.MaxUserID,
		Email:     o.Email,
		Phone:     o.Phone,
		Priority:  notify.PriorityTransactional,
		CreatedAt: at,
	}
	n.Route = n.DefaultRoute()
	if o.ChatID != 0 && len(n.Route) > 1 {
		var one int
		err := tx.StmtContext(ctx, s.unavailable).QueryRowContext(ctx, o.ChatID).Scan(&one)
		switch {
		case err == nil:
			n.Route = n.Route[1:] // Telegram is first when there is a chat
		case !errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("placing order %s: %w", o.ID, err)
		}
	}
	route := n.Route
	if len(n.Route) == 1 && n.Route[0] == notify.ChannelTelegram {
		n.Route = nil // written as payload version 1, which every worker reads
	}
	var page string
	if s.orderURL != "" {
		page = s.orderURL + "/" + url.PathEscape(o.ID)
	}
	// Only the bodies of the route's channels: the email's, the SMS's and
	// the subject's templates cost as much again as Telegram's text
	// (BENCHMARKS.md, row 1).
	m, err := s.templates.Render(event, o.Locale, newMessageData(o, page), route...)
	if err != nil {
		return fmt.Errorf("rendering the %s notification of order %s: %w", event, o.ID, err)
	}
	m.Apply(&n)
	if _, err := s.outbox.Enqueue(ctx, tx, n); err != nil {
		if errors.Is(err, notify.ErrInvalid) {
			// The order passed validation but its message does not fit a
			// channel (too long with many long item names).
			return invalidOrder("items", "the order's %s message would be invalid: %v", event, err)
		}
		return fmt.Errorf("enqueueing the %s notification of order %s: %w", event, o.ID, err)
	}
	return nil
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
	var created, shipped, delivered int64
	err := get.QueryRowContext(ctx, id).Scan(&p.ChatID, &p.MaxUserID, &p.Email, &p.Phone, &p.Locale, &p.Customer, &p.TotalCents, &created,
		&p.Status, &shipped, &delivered)
	if errors.Is(err, sql.ErrNoRows) {
		return PlacedOrder{}, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	if err != nil {
		return PlacedOrder{}, fmt.Errorf("reading order %s: %w", id, err)
	}
	p.CreatedAt = time.Unix(0, created).UTC()
	if shipped != 0 {
		t := time.Unix(0, shipped).UTC()
		p.ShippedAt = &t
	}
	if delivered != 0 {
		t := time.Unix(0, delivered).UTC()
		p.DeliveredAt = &t
	}
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
