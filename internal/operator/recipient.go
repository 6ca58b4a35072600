package operator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// RecipientToken turns what an operator knows of a recipient into its
// token on channel, the last token of its subjects: a Telegram chat id as
// is; for MAX u<user id> or c<chat id>; for email an address (hashed, as
// notify.Notification.Recipient does) or its e<hash> token; for SMS a
// phone number in E.164 or its p<hash> token.
func RecipientToken(channel, id string) (string, error) {
	var n notify.Notification
	switch notify.Channel(channel) {
	case notify.ChannelTelegram:
		chat, err := strconv.ParseInt(id, 10, 64)
		if err != nil || chat == 0 {
			return "", fmt.Errorf("%q is not a Telegram chat id", id)
		}
		return id, nil
	case notify.ChannelEmail:
		if !strings.Contains(id, "@") {
			break
		}
		n.Email = id
	case notify.ChannelSMS:
		if !strings.HasPrefix(id, "+") {
			break
		}
		n.Phone = id
	}
	if n.Email != "" || n.Phone != "" {
		return n.Recipient(notify.Channel(channel))
	}
	if !jetstream.ValidToken(id) {
		return "", fmt.Errorf("%q is not a recipient token (no spaces, dots or wildcards)", id)
	}
	return id, nil
}

// Revive deletes the mark that says recipient (a token) is dead on
// channel, so that the workers send to it again (they see the deletion
// within milliseconds), and returns what the mark said. A recipient that is
// not marked dead matches [ErrNotFound].
func Revive(ctx context.Context, js natsjs.JetStream, n jetstream.Names, channel, recipient string) (delivery.DeadRecipient, []byte, error) {
	kv, err := js.KeyValue(ctx, n.BucketChats)
	if err != nil {
		return delivery.DeadRecipient{}, nil, fmt.Errorf("opening bucket %s: %w", n.BucketChats, err)
	}
	key := delivery.DeadRecipientKey(channel, recipient)
	e, err := kv.Get(ctx, key)
	if errors.Is(err, natsjs.ErrKeyNotFound) {
		return delivery.DeadRecipient{}, nil, fmt.Errorf("%s recipient %s is not marked dead (no %s in %s): %w", channel, recipient, key, n.BucketChats, ErrNotFound)
	}
	if err != nil {
		return delivery.DeadRecipient{}, nil, fmt.Errorf("reading %s from %s: %w", key, n.BucketChats, err)
	}
	var d delivery.DeadRecipient
	_ = json.Unmarshal(e.Value(), &d) // a mark that does not parse still marks the recipient dead
	if err := kv.Delete(ctx, key, natsjs.LastRevision(e.Revision())); err != nil {
		return delivery.DeadRecipient{}, nil, fmt.Errorf("deleting %s from %s: %w", key, n.BucketChats, err)
	}
	return d, e.Value(), nil
}
