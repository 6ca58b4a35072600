package publisher

import (
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// chunk returns rows with ids from..to.
func chunk(from, to int64) []outbox.Row {
	var rows []outbox.Row
	for id := from; id <= to; id++ {
		rows = append(rows, outbox.Row{ID: id})
	}
	return rows
}

// ids flattens chunks into their row ids.
func ids(chunks [][]outbox.Row) []int64 {
	var out []int64
	for _, c := range chunks {
		for _, r := range c {
			out = append(out, r.ID)
		}
	}
	return out
}

// putInBackground puts rows into q from a goroutine of the bubble, waits
// until it has returned or blocked, and returns what tells whether the put
// has returned.
func putInBackground(q *ackedQueue, rows []outbox.Row) *atomic.Bool {
	var done atomic.Bool
	go func() {
		q.put(rows)
		done.Store(true)
	}()
	synctest.Wait()
	return &done
}

// TestAckedQueueIsBoundedInRows: many one-row chunks fit as long as their
// rows do (a bound in chunks held only a fraction of a second of them at a
// modest rate), a put that would exceed the bound waits until the mark
// stage takes, and a take returns every chunk queued, in order.
func TestAckedQueueIsBoundedInRows(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newAckedQueue(100)
		for id := int64(1); id <= 100; id++ {
			q.put(chunk(id, id)) // one row each: all fit without waiting
		}
		done := putInBackground(q, chunk(101, 101))
		if done.Load() {
			t.Fatal("a put beyond 100 rows returned at once, want it to wait for the mark stage")
		}
		got, ok := q.take(nil)
		if !ok || len(got) != 100 {
			t.Fatalf("take = %d chunks, %v; want the 100 queued", len(got), ok)
		}
		for i, id := range ids(got) {
			if id != int64(i+1) {
				t.Fatalf("row %d of the take has id %d, want %d: order lost", i, id, i+1)
			}
		}
		synctest.Wait()
		if !done.Load() {
			t.Fatal("the waiting put did not return after the take made room")
		}
		got, ok = q.take(got)
		if !ok || len(got) != 1 || got[0][0].ID != 101 {
			t.Fatalf("second take = %v, %v; want the chunk that waited", ids(got), ok)
		}
	})
}

// TestAckedQueueTakesAChunkLargerThanItsBound: a chunk larger than the
// bound goes into an empty queue (a batch is never split), and the next
// put waits for it to be taken.
func TestAckedQueueTakesAChunkLargerThanItsBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newAckedQueue(10)
		q.put(chunk(1, 50))
		done := putInBackground(q, chunk(51, 51))
		if done.Load() {
			t.Fatal("a put into a queue over its bound returned at once")
		}
		if got, _ := q.take(nil); len(ids(got)) != 50 {
			t.Fatalf("take returned %d rows, want the 50 of the large chunk", len(ids(got)))
		}
		synctest.Wait()
		if !done.Load() {
			t.Fatal("the waiting put did not return after the take")
		}
	})
}

// TestAckedQueueCloses: take returns what was queued before the close,
// then reports the end; a take waiting on an empty queue ends at the close.
func TestAckedQueueCloses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := newAckedQueue(10)
		q.put(chunk(1, 3))
		q.close()
		if got, ok := q.take(nil); !ok || len(ids(got)) != 3 {
			t.Fatalf("take after close = %v, %v; want the 3 rows queued before it", ids(got), ok)
		}
		if got, ok := q.take(nil); ok {
			t.Fatalf("take of a closed, empty queue = %v, true; want false", ids(got))
		}

		q = newAckedQueue(10)
		var ended atomic.Bool
		go func() {
			if _, ok := q.take(nil); !ok {
				ended.Store(true)
			}
		}()
		synctest.Wait()
		q.close()
		synctest.Wait()
		if !ended.Load() {
			t.Fatal("a take waiting on an empty queue did not end at the close")
		}
	})
}

// TestAckedQueueTakeClearsTheSpare: the slice handed back for reuse no
// longer refers to the rows it held, so marked rows can be collected.
func TestAckedQueueTakeClearsTheSpare(t *testing.T) {
	q := newAckedQueue(10)
	q.put(chunk(1, 1))
	first, _ := q.take(nil)
	q.put(chunk(2, 2))
	second, _ := q.take(first)
	if second[0][0].ID != 2 {
		t.Fatalf("second take = %v, want row 2", ids(second))
	}
	q.put(chunk(3, 3))
	third, _ := q.take(second)
	if second[0] != nil {
		t.Fatal("the slice handed back still refers to the rows of the take before")
	}
	if third[0][0].ID != 3 {
		t.Fatalf("third take = %v, want row 3", ids(third))
	}
}
