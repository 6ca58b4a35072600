package delivery

import (
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Event tells the application what became of a notification. It is
// published on notify.events.delivered (a channel delivered it),
// notify.events.fallback (it moved to the next channel of its route, and
// why) and notify.events.dead (no channel can deliver it any more), in the
// NOTIFY stream, under a message id that makes a repeat after a crash
// harmless.
type Event struct {
	// Key is the notification's idempotency key.
	Key string `json:"key"`
	// Event is delivered, fallback or dead.
	Event string `json:"event"`
	// Channel delivered it, or gave up on it.
	Channel string `json:"channel"`
	// Next is the channel it moved to (fallback).
	Next string `json:"next,omitempty"`
	// Recipient is the recipient's subject token on Channel (never an
	// email address or phone number in clear).
	Recipient string `json:"recipient,omitempty"`
	// ProviderID identifies the delivered message at the provider.
	ProviderID string `json:"provider_id,omitempty"`
	// Reason, Code and Description say why Channel gave up.
	Reason      string `json:"reason,omitempty"`
	Code        int    `json:"code,omitempty"`
	Description string `json:"description,omitempty"`
	// At is when it happened.
	At time.Time `json:"at"`
}

// Event names.
const (
	EventDelivered = "delivered"
	EventFallback  = "fallback"
	EventDead      = "dead"
)

// events publishes events without holding up the attempt that caused them:
// asynchronously, with a goroutine that checks each PubAck.
type events struct {
	js      natsjs.JetStream
	channel string
	log     *slog.Logger
	errors  func()
	acks    chan natsjs.PubAckFuture
	done    chan struct{}
}

func newEvents(js natsjs.JetStream, channel string, log *slog.Logger, onError func()) *events {
	return &events{js: js, channel: channel, log: log, errors: onError, acks: make(chan natsjs.PubAckFuture, 4096), done: make(chan struct{})}
}

// run checks the PubAcks until close.
func (e *events) run() {
	defer close(e.done)
	for f := range e.acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			e.errors()
			e.log.Warn("an event was not stored", "subject", f.Msg().Subject, "id", f.Msg().Header.Get(nats.MsgIdHdr), "err", err)
		}
	}
}

// close waits at most timeout for the outstanding PubAcks.
func (e *events) close(timeout time.Duration) {
	close(e.acks)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-e.done:
	case <-t.C:
		e.log.Warn("events not confirmed at shutdown")
	}
}

func (e *events) publish(subject, id string, ev Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		return
	}
	m := &nats.Msg{Subject: subject, Data: b, Header: nats.Header{}}
	m.Header.Set(nats.MsgIdHdr, id)
	m.Header.Set(jetstream.HeaderKey, ev.Key)
	m.Header.Set(jetstream.HeaderContentType, "application/json")
	f, err := e.js.PublishMsgAsync(m)
	if err != nil {
		e.errors()
		e.log.Warn("cannot publish an event", "subject", subject, "key", ev.Key, "err", err)
		return
	}
	select {
	case e.acks <- f:
	default:
		// Too many unconfirmed: checked by nobody, but sent.
	}
}

// delivered tells that the notification was delivered on channel. A
// redelivery that finds the delivery record tells it again from the
// record: the first event may have been lost in a crash; the message id
// drops the repeat.
func (e *events) delivered(key, channel, recipient, providerID string, at time.Time) {
	e.publish(jetstream.SubjectDelivered, "delivered:"+key, Event{
		Key: key, Event: EventDelivered, Channel: channel, Recipient: recipient, ProviderID: providerID, At: at})
}

// fallback tells that the notification moved to next.
func (e *events) fallback(j *job, next notify.Channel, l letter, at time.Time) {
	e.publish(jetstream.SubjectFallback, "fallback:"+j.n.Key+":"+e.channel, Event{
		Key: j.n.Key, Event: EventFallback, Channel: e.channel, Next: string(next), Recipient: j.lane,
		Reason: l.reason, Code: l.code, Description: l.description, At: at})
}

// dead tells that no channel can deliver the notification any more.
func (e *events) dead(j *job, l letter, at time.Time) {
	if j.n.Key == "" {
		return // poison without a key: nobody to tell
	}
	e.publish(jetstream.SubjectDead, "dead:"+j.n.Key, Event{
		Key: j.n.Key, Event: EventDead, Channel: e.channel, Recipient: j.lane,
		Reason: l.reason, Code: l.code, Description: l.description, At: at})
}
