package publisher_test

import (
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// TestWholeBatchStoredBeforeACrashIsProvenAtOnce crashes a publisher after
// a batch was stored and before its rows were marked, so that its
// successor's first batch is all duplicates, whose final PubAck proves
// nothing (on a replicated NOTIFY a duplicate may be a proposal only). The
// successor must settle it by asking NOTIFY about the batch's last row,
// once, and mark the rows; not by publishing them again one per batch,
// which takes a round trip per row after every restart (found by CI: a
// 4,096-row batch verified row by row stalled the cluster test for
// minutes).
func TestWholeBatchStoredBeforeACrashIsProvenAtOnce(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cluster bool
	}{{"single server", false}, {"three-node cluster", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// A batch ends after 16 reads (maxBatchRows).
			const batchSize, reads, chats = 100, 16, 20
			const n = batchSize * reads // exactly one batch
			var e *env
			if tc.cluster {
				e, _ = newClusterEnv(t, transports[0])
			} else {
				e = newEnv(t)
				transports[0].prepare(t, e)
			}
			e.enqueue(t, 0, n, chats, batchSize)

			opts := testOptions(nil)
			opts.BatchSize = batchSize
			opts.AckTimeout = 10 * time.Second
			opts.AfterAck = func([]outbox.Row) error { return errCrash }
			first := e.start(t, opts)
			waitFor(t, time.Minute, first.exited, "first publisher to crash after its first batch")
			if err := first.stop(); !errors.Is(err, errCrash) {
				t.Fatalf("Run returned %v, want the crash", err)
			}
			if got := streamCount(e.js); got != n {
				t.Fatalf("NOTIFY holds %d messages after the crash, want the whole batch of %d", got, n)
			}
			if got := e.pending(t); got != n {
				t.Fatalf("%d rows pending after the crash, want %d", got, n)
			}

			reg := prometheus.NewRegistry()
			opts = testOptions(reg)
			opts.BatchSize = batchSize
			opts.AckTimeout = 10 * time.Second
			e.start(t, opts)
			waitFor(t, time.Minute, func() bool { return e.pending(t) == 0 }, "the second publisher to mark the stored batch")
			checkOnceInOrder(t, e.js, n, chats)
			for outcome, want := range map[string]float64{"stored": 1, "proposed": 0, "missing": 0, "failed": 0} {
				if got := labeledMetric(t, reg, "tgnotify_publisher_unverified_batches_total", "outcome", outcome); got != want {
					t.Errorf("unverified_batches_total{outcome=%q} = %v, want %v", outcome, got, want)
				}
			}
		})
	}
}
