package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
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
		Goal:         Goal{Text: "≤ 1.2×", AtMost: true, Limit: 1.2},
		ExtraColumns: []string{"p50 with (µs)", "p50 without (µs)", "p99 with (µs)", "p99 without (µs)"},
		Method: fmt.Sprintf("The example shop's `Service.PlaceOrder` (order, two items, the HTML notification "+
			"rendered and enqueued in the same transaction) against the same service built with "+
			"`shop.WithoutNotifications()`: the same %d orders, each variant on its own fresh database file "+
			"opened by `outbox.Open` (WAL, `synchronous=FULL`: every commit is fsynced), placed one at a time. "+
			"The variants are interleaved in blocks of %d orders, and which goes first alternates from run to run, "+
			"so that both see the same machine. Figure: wall time per order (total / orders), after %d warm-up orders.",
			r.cfg.EnqueueOrders, r.cfg.EnqueueBlock, enqueueWarmup),
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
	return RunFigures{
		Ours: with, Reference: without, Ratio: ratio(with, without),
		Extra: []string{
			fmt.Sprintf("%.0f", us(Percentile(each[0], 50))), fmt.Sprintf("%.0f", us(Percentile(each[1], 50))),
			fmt.Sprintf("%.0f", us(Percentile(each[0], 99))), fmt.Sprintf("%.0f", us(Percentile(each[1], 99))),
		},
	}, nil
}
