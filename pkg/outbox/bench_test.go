package outbox_test

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"
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

// BenchmarkAnotherWriterWaits measures how long another writer of the same
// file (the publisher marking what it published) waits for SQLite's write
// lock while an application commits about 1000 orders a second from 32
// goroutines, each order in a transaction of its own or through a
// Committer. SQLite's lock is not fair: a connection that finds it taken
// sleeps in its busy handler, up to 100 ms between tries. Each op is one
// marking; it reports the p99 and the longest wait.
func BenchmarkAnotherWriterWaits(b *testing.B) {
	for _, grouped := range []bool{false, true} {
		name := map[bool]string{false: "own_transaction", true: "committer"}[grouped]
		b.Run(name, func(b *testing.B) {
			ctx := context.Background()
			db, path := openDB(b)
			other, err := sql.Open("sqlite", outbox.DSN(path, outbox.Options{}))
			if err != nil {
				b.Fatal(err)
			}
			defer other.Close()
			if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, v TEXT); CREATE TABLE marks (id INTEGER PRIMARY KEY)`); err != nil {
				b.Fatal(err)
			}
			c := outbox.NewCommitter(db, 0)
			stop := make(chan struct{})
			var wg sync.WaitGroup
			const writers = 32
			for range writers {
				wg.Go(func() {
					tick := time.NewTicker(writers * time.Millisecond) // 1000 orders a second in all
					defer tick.Stop()
					for {
						select {
						case <-stop:
							return
						case <-tick.C:
						}
						err := commitOne(ctx, db, c, grouped, func(ctx context.Context, tx *sql.Tx) error {
							_, err := tx.ExecContext(ctx, `INSERT INTO orders (v) VALUES ('order')`)
							return err
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			defer func() { close(stop); wg.Wait() }()
			var waits []time.Duration
			pause := time.NewTicker(10 * time.Millisecond)
			defer pause.Stop()
			for b.Loop() {
				<-pause.C
				t0 := time.Now()
				if _, err := other.ExecContext(ctx, `INSERT INTO marks DEFAULT VALUES`); err != nil {
					b.Fatal(err)
				}
				waits = append(waits, time.Since(t0))
			}
			slices.Sort(waits)
			b.ReportMetric(float64(waits[len(waits)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds())/1000, "max-ms")
		})
	}
}
