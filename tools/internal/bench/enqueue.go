package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// enqueueWarmup is how many orders each variant places before timing starts
// (statement caches, page cache, WAL file creation).
const enqueueWarmup = 20

// enqueue is scenario 1: what the outbox write adds to checkout.
func (r *runner) enqueue(ctx context.Context) []*Result {
	res := &Result{
		ID: "1", Title: "Enqueue overhead",
		Ours: "PlaceOrder with the outbox write", Reference: "the same orders without it",
		Unit: "µs/order", RefUnit: "µs/order",
		Goal:         Goal{Text: "≤ 1.1×", AtMost: true, Limit: 1.1},
		ExtraColumns: []string{"p50 with (µs)", "p50 without (µs)", "p99 with (µs)", "p99 without (µs)", "WAL pages/order with", "WAL pages/order without"},
		Method: fmt.Sprintf("The example shop's `Service.PlaceOrder` (order, two items, the HTML notification "+
			"rendered and enqueued in the same transaction) against the same service built with "+
			"`shop.WithoutNotifications()`: the same %d orders, each variant on its own fresh database file "+
			"opened by `outbox.Open` (WAL, `synchronous=FULL`: every commit is fsynced), placed one at a time. "+
			"The variants are interleaved in blocks of %d orders, and which goes first alternates from run to run, "+
			"so that both see the same machine. Figure: wall time per order (total / orders), after %d warm-up orders. "+
			"WAL pages per order: each run also places %d orders per variant on a fresh database with automatic "+
			"checkpoints off and divides the growth of the -wal file by the orders and the frame size: what every "+
			"commit writes and fsyncs, which the machine's load does not change.",
			r.cfg.EnqueueOrders, r.cfg.EnqueueBlock, enqueueWarmup, walOrders),
	}
	return []*Result{r.measure(ctx, res, r.cfg.Runs, r.enqueueRun)}
}

func (r *runner) enqueueRun(ctx context.Context, run int) (RunFigures, error) {
	dir := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("enqueue-%d", run))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return RunFigures{}, err
	}
	defer os.RemoveAll(dir)
	var svcs [2]*shopDB // with, without
	for i, opts := range [][]shop.Option{nil, {shop.WithoutNotifications()}} {
		s, err := openShop(ctx, filepath.Join(dir, fmt.Sprintf("shop-%d.db", i)), opts...)
		if err != nil {
			return RunFigures{}, err
		}
		defer s.close()
		svcs[i] = s
		for w := range enqueueWarmup {
			if err := s.place(ctx, fmt.Sprintf("W%d", w), 1); err != nil {
				return RunFigures{}, err
			}
		}
	}
	var (
		total [2]time.Duration
		each  [2][]time.Duration
	)
	n, block := r.cfg.EnqueueOrders, r.cfg.EnqueueBlock
	for start := 0; start < n; start += block {
		for k := range 2 {
			v := (k + run) % 2 // alternate which variant goes first
			for i := start; i < min(n, start+block); i++ {
				t0 := time.Now()
				if err := svcs[v].place(ctx, fmt.Sprintf("O%d", i), int64(1000+i%500)); err != nil {
					return RunFigures{}, err
				}
				d := time.Since(t0)
				total[v] += d
				each[v] = append(each[v], d)
			}
		}
	}
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	with, without := us(total[0])/float64(n), us(total[1])/float64(n)
	var pages [2]float64
	for i, opts := range [][]shop.Option{nil, {shop.WithoutNotifications()}} {
		p, err := walPagesPerOrder(ctx, filepath.Join(dir, fmt.Sprintf("wal-%d.db", i)), opts...)
		if err != nil {
			return RunFigures{}, err
		}
		pages[i] = p
	}
	return RunFigures{
		Ours: with, Reference: without, Ratio: ratio(with, without),
		Extra: []string{
			fmt.Sprintf("%.0f", us(Percentile(each[0], 50))), fmt.Sprintf("%.0f", us(Percentile(each[1], 50))),
			fmt.Sprintf("%.0f", us(Percentile(each[0], 99))), fmt.Sprintf("%.0f", us(Percentile(each[1], 99))),
			fmt.Sprintf("%.2f", pages[0]), fmt.Sprintf("%.2f", pages[1]),
		},
	}, nil
}

// walOrders is how many orders walPagesPerOrder places.
const walOrders = 200

// walPagesPerOrder places walOrders orders on a fresh database at path with
// automatic checkpoints off and returns the WAL frames each order's commit
// wrote: the -wal file's growth over the orders, in frames (a page and its
// 24-byte header).
func walPagesPerOrder(ctx context.Context, path string, opts ...shop.Option) (float64, error) {
	db, err := outbox.Open(ctx, path, outbox.Options{MaxOpenConns: 1})
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var pageSize int64
	if err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize); err != nil {
		return 0, fmt.Errorf("reading the page size: %w", err)
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_autocheckpoint = 0`); err != nil {
		return 0, fmt.Errorf("turning automatic checkpoints off: %w", err)
	}
	svc, err := shop.NewService(ctx, db, opts...)
	if err != nil {
		return 0, err
	}
	defer svc.Close()
	s := &shopDB{path: path, db: db, svc: svc}
	for w := range enqueueWarmup {
		if err := s.place(ctx, fmt.Sprintf("W%d", w), 1); err != nil {
			return 0, err
		}
	}
	if _, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		return 0, fmt.Errorf("truncating the WAL: %w", err)
	}
	for i := range walOrders {
		if err := s.place(ctx, fmt.Sprintf("O%d", i), int64(1000+i%500)); err != nil {
			return 0, err
		}
	}
	fi, err := os.Stat(path + "-wal")
	if err != nil {
		return 0, fmt.Errorf("measuring the WAL: %w", err)
	}
	return float64(fi.Size()-32) / float64(pageSize+24) / walOrders, nil // the WAL header is 32 bytes
}
