package shop

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Notification statuses.
const (
	// StatusPending: no channel has delivered it yet (it may be retrying,
	// or have moved to the next channel of its route).
	StatusPending = "pending"
	// StatusDelivered: a channel delivered it.
	StatusDelivered = "delivered"
	// StatusDead: no channel of its route could deliver it.
	StatusDead = "dead"
)

// Event is what the delivery pipeline publishes on notify.events.delivered,
// .fallback and .dead (the fields the shop uses of the published contract,
// docs/CHANNELS.md).
type Event struct {
	Key     string    `json:"key"`
	Event   string    `json:"event"`
	Channel string    `json:"channel"`
	Next    string    `json:"next"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// RecipientEvent is published on notify.events.recipient_dead when a
// recipient can no longer be reached on a channel, and on
// notify.events.recipient_revived when it can again.
type RecipientEvent struct {
	Channel   string    `json:"channel"`
	Recipient string    `json:"recipient"`
	Reason    string    `json:"reason"`
	At        time.Time `json:"at"`
}

// RecordEvent applies what the pipeline said of a notification to its
// status. Delivered and dead are final: an event that arrives after one of
// them (a fallback event published after the next channel already
// delivered) changes nothing. Events of keys that are not this shop's
// orders are ignored.
func (s *Service) RecordEvent(ctx context.Context, ev Event) error {
	if !strings.HasPrefix(ev.Key, "order:") {
		return nil
	}
	st := NotificationStatus{Channel: ev.Channel, Reason: ev.Reason}
	switch ev.Event {
	case "delivered":
		st.Status = StatusDelivered
	case "dead":
		st.Status = StatusDead
	case "fallback":
		st.Status, st.Channel = StatusPending, ev.Next
	default:
		return nil
	}
	_, err := s.db.ExecContext(ctx, `INSERT INTO notification_status (key, status, channel, reason, at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (key) DO UPDATE SET status = excluded.status, channel = excluded.channel, reason = excluded.reason, at = excluded.at
		WHERE notification_status.status NOT IN ('delivered', 'dead')`,
		ev.Key, st.Status, st.Channel, st.Reason, ev.At.UnixNano())
	if err != nil {
		return fmt.Errorf("recording the %s event of %s: %w", ev.Event, ev.Key, err)
	}
	return nil
}

// MarkTelegramUnavailable remembers that the customer's Telegram chat cannot
// be reached (the fault-tolerant delivery article's rule: stop offering a
// channel the customer has left): the next orders of that chat go to the
// customer's other addresses first.
func (s *Service) MarkTelegramUnavailable(ctx context.Context, chatID int64, reason string, at time.Time) error {
	_, err := s.db.ExecContext(ctx, `INSERT INTO telegram_unavailable (chat_id, reason, at) VALUES (?, ?, ?)
		ON CONFLICT (chat_id) DO UPDATE SET reason = excluded.reason, at = excluded.at`, chatID, reason, at.UnixNano())
	if err != nil {
		return fmt.Errorf("marking chat %d unavailable: %w", chatID, err)
	}
	return nil
}

// MarkTelegramAvailable forgets that the customer's Telegram chat was
// found dead: the pipeline revived it (the customer unblocked the bot or
// sent /start, or a retry was delivered), so the customer's next
// notifications go to Telegram first again.
func (s *Service) MarkTelegramAvailable(ctx context.Context, chatID int64) error {
	if _, err := s.db.ExecContext(ctx, `DELETE FROM telegram_unavailable WHERE chat_id = ?`, chatID); err != nil {
		return fmt.Errorf("marking chat %d available: %w", chatID, err)
	}
	return nil
}

// TelegramUnavailable reports whether the chat was found dead.
func (s *Service) TelegramUnavailable(ctx context.Context, chatID int64) (bool, error) {
	var one int
	err := s.unavailable.QueryRowContext(ctx, chatID).Scan(&one)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// EventsConsumer is the name of the shop's durable consumer of
// <prefix>.events.> (notify.events.>).
const EventsConsumer = "shop-events"

// Events follows the pipeline's events with a durable consumer and applies
// them to the shop's notification statuses. Create it with [NewEvents] and
// call Run.
type Events struct {
	svc   *Service
	js    natsjs.JetStream
	names jetstream.Names
	log   *slog.Logger
}

// NewEvents returns the shop's event follower of the pipeline whose names
// are n (jetstream.NewNames of its subject prefix).
func NewEvents(svc *Service, js natsjs.JetStream, n jetstream.Names, log *slog.Logger) *Events {
	return &Events{svc: svc, js: js, names: n.OrDefault(), log: log.With("component", "shop-events")}
}

// Run consumes events until ctx ends, creating the shop's durable consumer
// (shop-events on NOTIFY, filter notify.events.>, under the default
// prefix) if it is missing. An event
// is acknowledged once the database has it; one the database cannot take
// comes back after a delay.
func (e *Events) Run(ctx context.Context) error {
	var c natsjs.Consumer
	for {
		var err error
		c, err = e.js.CreateOrUpdateConsumer(ctx, e.names.Stream, natsjs.ConsumerConfig{
			Durable:       EventsConsumer,
			Description:   "the example shop: what became of each order's notification",
			FilterSubject: e.names.SubjectEvents,
			AckPolicy:     natsjs.AckExplicitPolicy,
			DeliverPolicy: natsjs.DeliverAllPolicy,
			AckWait:       30 * time.Second,
			MaxDeliver:    -1,
		})
		if err == nil {
			break
		}
		e.log.Warn("cannot create the events consumer yet; retrying", "err", jetstream.Denied(e.js.Conn(), err))
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
	cc, err := c.Consume(func(m natsjs.Msg) { e.handle(ctx, m) })
	if err != nil {
		return fmt.Errorf("consuming events: %w", err)
	}
	e.log.Info("following the pipeline's events", "consumer", EventsConsumer)
	<-ctx.Done()
	cc.Stop()
	<-cc.Closed()
	return nil
}

// handle applies one event.
func (e *Events) handle(ctx context.Context, m natsjs.Msg) {
	var err error
	switch m.Subject() {
	case e.names.SubjectDelivered, e.names.SubjectFallback, e.names.SubjectDead:
		var ev Event
		if jerr := json.Unmarshal(m.Data(), &ev); jerr != nil {
			e.log.Warn("an event that is not JSON; skipped", "subject", m.Subject(), "err", jerr)
			_ = m.Term()
			return
		}
		err = e.svc.RecordEvent(ctx, ev)
	case e.names.SubjectRecipientDead:
		var ev RecipientEvent
		if jerr := json.Unmarshal(m.Data(), &ev); jerr != nil {
			_ = m.Term()
			return
		}
		if ev.Channel == "telegram" {
			if chat, perr := strconv.ParseInt(ev.Recipient, 10, 64); perr == nil {
				err = e.svc.MarkTelegramUnavailable(ctx, chat, ev.Reason, ev.At)
			}
		}
	case e.names.SubjectRecipientRevived:
		var ev RecipientEvent
		if jerr := json.Unmarshal(m.Data(), &ev); jerr != nil {
			_ = m.Term()
			return
		}
		if ev.Channel == "telegram" {
			if chat, perr := strconv.ParseInt(ev.Recipient, 10, 64); perr == nil {
				err = e.svc.MarkTelegramAvailable(ctx, chat)
			}
		}
	}
	if err != nil {
		e.log.Warn("cannot apply an event; it comes back later", "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(time.Second)
		return
	}
	_ = m.Ack()
}
