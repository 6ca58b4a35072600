package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// benchDeadLetters is how many dead letters BenchmarkDLQList lists.
const benchDeadLetters = 20_000

// publishDeadLetters stores n dead letters in NOTIFY_DEAD as the worker
// writes them: a notification's body and headers plus the dead-letter
// headers, over a few reasons and n/4 chats.
func publishDeadLetters(tb testing.TB, js natsjs.JetStream, n int) {
	tb.Helper()
	reasons := []string{"blocked", "max_attempts", "chat_not_found", "content"}
	descriptions := []string{"Forbidden: bot was blocked by the user", "Bad Gateway", "Bad Request: chat not found", "Bad Request: message is too long"}
	codes := []string{"403", "502", "400", "400"}
	created := time.Now().UTC()
	for i := range n {
		chat := int64(1000 + i%(n/4+1))
		key := fmt.Sprintf("order:B%d:accepted", i)
		body, err := notify.Notification{Key: key, ChatID: chat, Text: "Order B" + strconv.Itoa(i) + " accepted: 2 items, 1 490 ₽", CreatedAt: created}.MarshalPayload()
		if err != nil {
			tb.Fatal(err)
		}
		r := i % len(reasons)
		m := jetstream.NotificationMsg(chat, key, created, notify.PayloadContentType, body)
		m.Subject = jetstream.DeadLetterSubject("telegram", reasons[r], strconv.FormatInt(chat, 10))
		m.Header.Set(nats.MsgIdHdr, "dead:"+strconv.Itoa(i+1))
		m.Header.Set(jetstream.HeaderReason, reasons[r])
		m.Header.Set(jetstream.HeaderErrorCode, codes[r])
		m.Header.Set(jetstream.HeaderErrorDescription, descriptions[r])
		m.Header.Set(jetstream.HeaderAttempts, "0")
		m.Header.Set(jetstream.HeaderOriginalSubject, jetstream.TelegramSubject(chat))
		m.Header.Set(jetstream.HeaderOriginalSeq, strconv.Itoa(i+1))
		m.Header.Set(jetstream.HeaderDeadAt, created.Format(time.RFC3339Nano))
		if _, err := js.PublishMsgAsync(m); err != nil {
			tb.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		tb.Fatal("dead letters not acknowledged within a minute")
	}
}

// BenchmarkDLQList lists 20,000 dead letters with `tgnotify dlq list`
// (connecting included, output discarded) and reports dead letters per
// second. With TGNOTIFY_BENCH_SCRIPT=1 and the built nats CLI
// ($TGNOTIFY_BIN), the sub-benchmark "script" runs
// `scripts/dead-letters.sh list` on the same stream for
// TGNOTIFY_BENCH_SCRIPT_SECONDS (default 60; it reads one dead letter per
// nats call, far too slow to list all 20,000 in a benchmark) and reports the
// dead letters it listed per second.
func BenchmarkDLQList(b *testing.B) {
	srv := natstest.Start(b)
	nc, err := nats.Connect(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc, natsjs.WithPublishAsyncMaxPending(4096))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	if err := jetstream.ProvisionStreams(ctx, js, jetstream.StreamSettings{}); err != nil {
		b.Fatal(err)
	}
	publishDeadLetters(b, js, benchDeadLetters)
	env := map[string]string{"NATS_URL": srv.URL()}

	b.Run("tgnotify", func(b *testing.B) {
		var stderr strings.Builder
		for b.Loop() {
			stderr.Reset()
			err := runMain(ctx, []string{"dlq", "list"}, streams{stdout: io.Discard, stderr: &stderr, getenv: func(k string) string { return env[k] }})
			if err != nil || !strings.HasPrefix(stderr.String(), strconv.Itoa(benchDeadLetters)+" dead letter(s)") {
				b.Fatalf("dlq list: %v\n%s", err, stderr.String())
			}
		}
		b.ReportMetric(float64(benchDeadLetters)*float64(b.N)/b.Elapsed().Seconds(), "letters/s")
	})

	b.Run("script", func(b *testing.B) { benchScriptList(b, srv.URL()) })
}
