package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// ReasonPoison is the dead-letter reason of a message whose payload cannot be
// decoded or validated. The other worker-level reasons are ReasonMaxAttempts
// and ReasonExpired; Telegram-level ones come from the botapi package.
const (
	ReasonPoison      = "poison"
	ReasonMaxAttempts = "max_attempts"
	ReasonExpired     = "expired"
)

// errPoison wraps every reason a message is unusable.
var errPoison = errors.New("poison message")

// receive turns a stream message into a job for the dispatcher. It runs on
// the consumer's callback goroutine. A message that cannot be used (not a
// notification payload, wrong subject, mismatching key) is dead-lettered as
// poison at once, and the worker goes on.
func (w *Worker) receive(ctx context.Context, m natsjs.Msg) {
	now := w.now()
	j := &job{msg: m, subject: m.Subject(), received: now, progress: now, pinEpoch: w.pinEpoch.Load()}
	if err := w.decode(j); err != nil {
		j.poison = err
		w.log.Warn("poison message", "subject", j.subject, "seq", j.seq, "err", err)
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := w.deadLetter(dctx, j, letter{reason: ReasonPoison, description: err.Error()}); err != nil {
			w.log.Error("cannot dead-letter a poison message; it will come back", "seq", j.seq, "err", err)
			_ = m.NakWithDelay(5 * time.Second)
		}
		return
	}
	w.received.Add(1)
	select {
	case w.incoming <- j:
	case <-ctx.Done():
		// Stopping: shutdown collects what is queued and hands it back in
		// stream order; only if the queue is full is it handed back here.
		select {
		case w.incoming <- j:
		default:
			_ = m.Nak()
		}
	}
}

// decode fills the job from the message and reports why it is poison.
func (w *Worker) decode(j *job) error {
	meta, err := j.msg.Metadata()
	if err != nil {
		return fmt.Errorf("%w: no JetStream metadata: %v", errPoison, err)
	}
	j.seq = meta.Sequence.Stream
	chat, err := jetstream.ParseTelegramSubject(j.subject)
	if err != nil {
		return fmt.Errorf("%w: %v", errPoison, err)
	}
	j.chat = chat
	n, err := notify.DecodePayload(j.msg.Data())
	if err != nil {
		return fmt.Errorf("%w: %v", errPoison, err)
	}
	if n.ChatID != chat {
		return fmt.Errorf("%w: payload chat_id %d does not match subject %s", errPoison, n.ChatID, j.subject)
	}
	if n.Channel != notify.ChannelTelegram {
		return fmt.Errorf("%w: channel %q is not telegram", errPoison, n.Channel)
	}
	if k := j.msg.Headers().Get(jetstream.HeaderKey); k != "" && k != n.Key {
		return fmt.Errorf("%w: %s header %q does not match payload key %q", errPoison, jetstream.HeaderKey, k, n.Key)
	}
	j.n = n
	return nil
}
