package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// BenchmarkPending measures what reading pending rows costs the publisher
// per row: batches of 256 in id order after a cursor, each after a marking
// commit, which (as in the publisher) empties the reading connection's page
// cache. It reports CPU time per row, which a busy machine distorts less
// than wall time.
func BenchmarkPending(b *testing.B) {
	ctx := context.Background()
	db, _ := openDB(b)
	w, err := outbox.NewWriter(ctx, db)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	const rows = 20000
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range rows {
		n := notify.Notification{
			Key:       fmt.Sprintf("order:%d:accepted", i),
			ChatID:    int64(1000 + i%1000),
			Text:      fmt.Sprintf("Order <b>#%d</b> was accepted and will ship tomorrow: 1 × Tea, 2 × Cake &lt;large&gt;, total 29.48.", i),
			ParseMode: notify.ParseModeHTML,
			Priority:  notify.PriorityTransactional,
			CreatedAt: time.Now(),
		}
		if _, err := w.Enqueue(ctx, tx, n); err != nil {
			b.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
	r := outbox.NewReader(db)
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	read := 0
	var cursor int64
	for read < b.N {
		batch, err := r.Pending(ctx, cursor, 256)
		if err != nil {
			b.Fatal(err)
		}
		if len(batch) == 0 {
			cursor = 0
			continue
		}
		read += len(batch)
		cursor = batch[len(batch)-1].ID
		b.StopTimer()
		// A commit that changes nothing the reader sees (a negative upto
		// is below every id).
		if _, err := db.ExecContext(ctx, `INSERT INTO outbox_marks (upto, at) VALUES (?, 0) ON CONFLICT DO NOTHING`, -cursor); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/row")
}

// cpuTime returns the CPU time (user + system) this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConcurrentCommits measures writers that each commit one
// notification at a time, many at once (16 goroutines), as an
// application's requests do: each in a transaction of its own, and through
// a Committer, which commits the requests that wait together. Every commit
// is fsynced (synchronous=FULL), so the first is bound by the disk's
// fsyncs, one a request.
func BenchmarkConcurrentCommits(b *testing.B) {
	for _, grouped := range []bool{false, true} {
		name := map[bool]string{false: "own_transaction", true: "committer"}[grouped]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			db, _ := openDB(b)
			w, err := outbox.NewWriter(ctx, db)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			c := outbox.NewCommitter(db, 0)
			var next atomic.Int64
			b.SetParallelism(8) // 16 goroutines on 2 cores
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					fn := func(ctx context.Context, tx *sql.Tx) error {
						_, err := w.Enqueue(ctx, tx, notify.Notification{
							Key: fmt.Sprintf("order:%d:accepted", i), ChatID: 1000 + i%1000, Text: "Order accepted",
						})
						return err
					}
					if err := commitOne(ctx, db, c, grouped, fn); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

// commitOne runs fn through c, or in a transaction of its own.
func commitOne(ctx context.Context, db *sql.DB, c *outbox.Committer, grouped bool, fn func(context.Context, *sql.Tx) error) error {
	if grouped {
		return c.Run(ctx, fn)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(ctx, tx); err != nil {
		return err
	}
	return tx.Commit()
}
