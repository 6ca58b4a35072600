package chaos

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	_ "modernc.org/sqlite" // the outbox's SQLite driver, read-only here

	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// OutboxRow is a row of the shop's outbox: its id is the commit order.
type OutboxRow struct {
	ID        int64
	Key       string
	Chat      int64
	CreatedAt time.Time
	Published bool
}

// StreamMsg is a notification stored in NOTIFY.
type StreamMsg struct {
	Seq  uint64
	Chat int64
	Key  string
}

// readOutbox reads every outbox row of the database at path, read-only, in
// id order.
func readOutbox(ctx context.Context, path string) ([]OutboxRow, error) {
	dsn := "file:" + (&url.URL{Path: path}).EscapedPath() + "?mode=ro&_pragma=busy_timeout(10000)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("opening the outbox read-only: %w", err)
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, `SELECT id, key, recipient, created_at, published_at IS NOT NULL FROM outbox_status ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("reading the outbox: %w", err)
	}
	defer rows.Close()
	var out []OutboxRow
	for rows.Next() {
		var r OutboxRow
		var created int64
		if err := rows.Scan(&r.ID, &r.Key, &r.Chat, &created, &r.Published); err != nil {
			return out, fmt.Errorf("reading the outbox: %w", err)
		}
		r.CreatedAt = time.Unix(0, created)
		out = append(out, r)
	}
	return out, rows.Err()
}

// pendingRows counts outbox rows not yet published.
func pendingRows(rows []OutboxRow) int {
	n := 0
	for _, r := range rows {
		if !r.Published {
			n++
		}
	}
	return n
}

// readStream reads the key and chat of every notification in NOTIFY, in
// stream order, with an ordered consumer that fetches headers only.
func readStream(ctx context.Context, js natsjs.JetStream) ([]StreamMsg, error) {
	total, err := system.NotificationsInStream(ctx, js)
	if err != nil {
		return nil, err
	}
	c, err := js.OrderedConsumer(ctx, jetstream.StreamNotify, natsjs.OrderedConsumerConfig{
		FilterSubjects: []string{jetstream.TelegramFilter}, HeadersOnly: true,
	})
	if err != nil {
		return nil, fmt.Errorf("reading stream %s: %w", jetstream.StreamNotify, err)
	}
	out := make([]StreamMsg, 0, total)
	for uint64(len(out)) < total {
		batch, err := c.Fetch(1000, natsjs.FetchMaxWait(5*time.Second))
		if err != nil {
			return out, fmt.Errorf("reading stream %s: %w", jetstream.StreamNotify, err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return out, err
			}
			chat, _ := jetstream.ParseTelegramSubject(m.Subject())
			out = append(out, StreamMsg{Seq: meta.Sequence.Stream, Chat: chat, Key: m.Headers().Get(jetstream.HeaderKey)})
		}
		if err := batch.Error(); err != nil && !errors.Is(err, natsjs.ErrNoMessages) {
			return out, fmt.Errorf("reading stream %s: %w", jetstream.StreamNotify, err)
		}
		if n == 0 {
			return out, fmt.Errorf("reading stream %s: %d of %d notifications read, then nothing", jetstream.StreamNotify, len(out), total)
		}
	}
	return out, nil
}

// emulatorRecord reads what the emulator delivered and its counters.
func emulatorRecord(ctx context.Context, client *http.Client, emulatorURL string) ([]emulator.Message, emulator.Stats, error) {
	var msgs struct {
		Messages []emulator.Message `json:"messages"`
	}
	var st emulator.Stats
	if err := system.GetJSON(ctx, client, emulatorURL+"/emulator/messages", &msgs); err != nil {
		return nil, st, err
	}
	if err := system.GetJSON(ctx, client, emulatorURL+"/emulator/stats", &st); err != nil {
		return nil, st, err
	}
	return msgs.Messages, st, nil
}
