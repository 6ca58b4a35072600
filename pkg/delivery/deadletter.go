package delivery

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// pinIDHeader is the header nats-server adds to messages delivered to a
// pinned client of a priority group.
const pinIDHeader = "Nats-Pin-Id"

// letter says why a message is dead.
type letter struct {
	reason      string
	code        int
	description string
	attempts    int
}

// deadLetter publishes a copy of the job's message to NOTIFY_DEAD with the
// reason in its headers, waits for the PubAck, and only then terminates the
// original. If the copy cannot be stored the original is left alone, so a
// dead letter is never lost between the two streams.
//
// The copy's Nats-Msg-Id is derived from the original's stream sequence: a
// retry after a crash between the two steps is de-duplicated by NOTIFY_DEAD.
func (w *Worker) deadLetter(ctx context.Context, j *job, l letter) error {
	h := nats.Header{}
	for k, v := range j.msg.Headers() {
		if k == pinIDHeader {
			continue // the server's pull bookkeeping, not part of the notification
		}
		h[k] = append([]string(nil), v...)
	}
	subject := jetstream.DeadSubject(j.chat)
	msgID := "dead:" + strconv.FormatUint(j.seq, 10)
	if j.chat == 0 { // poison on an unusable subject
		subject = "dead." + j.subject
		sum := sha256.Sum256(append([]byte(j.subject+"\x00"), j.msg.Data()...))
		msgID = "dead:poison:" + hex.EncodeToString(sum[:16])
	}
	key := j.n.Key
	if key == "" {
		key = j.msg.Headers().Get(jetstream.HeaderKey)
	}
	h.Set(nats.MsgIdHdr, msgID)
	if key != "" {
		h.Set(jetstream.HeaderKey, key)
	}
	h.Set(jetstream.HeaderReason, l.reason)
	h.Set(jetstream.HeaderErrorCode, strconv.Itoa(l.code))
	h.Set(jetstream.HeaderErrorDescription, l.description)
	h.Set(jetstream.HeaderAttempts, strconv.Itoa(l.attempts))
	h.Set(jetstream.HeaderOriginalSubject, j.subject)
	h.Set(jetstream.HeaderOriginalSeq, strconv.FormatUint(j.seq, 10))
	h.Set(jetstream.HeaderDeadAt, w.now().UTC().Format(time.RFC3339Nano))
	if _, err := w.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: h, Data: j.msg.Data()}); err != nil {
		return fmt.Errorf("publishing dead letter for seq %d to %s: %w", j.seq, subject, err)
	}
	if err := j.msg.TermWithReason(l.reason); err != nil && err != natsjs.ErrMsgAlreadyAckd {
		w.log.Warn("dead letter stored but terminating the original failed; it will be redelivered and dead-lettered again (de-duplicated)",
			"seq", j.seq, "err", err)
	}
	for _, d := range j.dups {
		_ = d.TermWithReason(l.reason)
	}
	w.m.dead.WithLabelValues(l.reason).Inc()
	w.deadN.Add(1)
	w.log.Info("dead-lettered", "key", key, "chat_id", j.chat, "seq", j.seq, "reason", l.reason,
		"code", l.code, "description", l.description, "attempts", l.attempts)
	return nil
}

// ChatEvent is published on notify.events.chat_dead when a chat can no longer
// be reached, and on notify.events.chat_migrated when a group became a
// supergroup. Applications consume it to stop offering Telegram to that
// customer, or to update the stored chat id.
type ChatEvent struct {
	ChatID      int64     `json:"chat_id"`
	Reason      string    `json:"reason"`
	Code        int       `json:"code,omitempty"`
	Description string    `json:"description,omitempty"`
	MigrateTo   int64     `json:"migrate_to_chat_id,omitempty"`
	Key         string    `json:"key,omitempty"`
	At          time.Time `json:"at"`
}

// publishEvent stores an event in the NOTIFY stream (its subjects cover
// notify.events.>); the id makes a repeat after a crash harmless.
func (w *Worker) publishEvent(ctx context.Context, subject, id string, ev ChatEvent) {
	b, err := json.Marshal(ev)
	if err == nil {
		_, err = w.js.Publish(ctx, subject, b, natsjs.WithMsgID(id))
	}
	if err != nil {
		w.log.Error("cannot publish chat event", "subject", subject, "chat_id", ev.ChatID, "err", err)
	}
}
