package publisher

import (
	"sync"

	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// ackedQueue carries acknowledged rows from the ack stage to the mark stage.
// It is bounded in rows, not in chunks: at a modest rate every chunk is a
// row or two (the read stage wakes at each commit), so a bound in chunks
// held only a fraction of a second of rows. Marking waits for SQLite's
// write lock, and SQLite's busy handler sleeps up to 100 ms between tries
// while the application commits, so a marking can take hundreds of
// milliseconds. With the queue full in that time the ack stage stopped,
// then the publish stage, and nothing reached the stream until the marking
// ended (benchmark row 8, 2026-12-07: every gap of 100–300 ms in what the
// stream stored coincided with a marking in the busy handler). Bounded in
// rows the queue absorbs such a stall whatever the size of the chunks.
//
// One goroutine puts (the ack stage, which closes the queue when it ends)
// and one takes (the mark stage).
type ackedQueue struct {
	max int // rows; a chunk is accepted into an empty queue whatever its size

	mu     sync.Mutex
	chunks [][]outbox.Row
	rows   int
	closed bool

	// ready holds a token when chunks were added or the queue was closed;
	// room when the mark stage took chunks. Each has one waiter, so a
	// token left by a signal that came before the wait is never lost.
	ready chan struct{}
	room  chan struct{}
}

// newAckedQueue returns a queue that holds up to maxRows rows.
func newAckedQueue(maxRows int) *ackedQueue {
	return &ackedQueue{max: max(1, maxRows), ready: make(chan struct{}, 1), room: make(chan struct{}, 1)}
}

// put appends a chunk of consecutive acknowledged rows, waiting while the
// queue is full. It does not take a context: the mark stage takes chunks
// until the queue is closed and empty, whatever happens to the round.
func (q *ackedQueue) put(rows []outbox.Row) {
	for {
		q.mu.Lock()
		if q.rows == 0 || q.rows+len(rows) <= q.max {
			q.chunks = append(q.chunks, rows)
			q.rows += len(rows)
			q.mu.Unlock()
			signal(q.ready)
			return
		}
		q.mu.Unlock()
		<-q.room
	}
}

// close tells the mark stage that no chunk will follow.
func (q *ackedQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	signal(q.ready)
}

// take waits for chunks and returns every chunk queued, in order, or
// reports false once the queue is closed and empty. spare, the slice a
// previous take returned, is reused for the chunks that come next (its
// elements are cleared, so that marked rows can be collected).
func (q *ackedQueue) take(spare [][]outbox.Row) ([][]outbox.Row, bool) {
	clear(spare)
	for {
		q.mu.Lock()
		if len(q.chunks) > 0 {
			out := q.chunks
			q.chunks, q.rows = spare[:0], 0
			q.mu.Unlock()
			signal(q.room)
			return out, true
		}
		closed := q.closed
		q.mu.Unlock()
		if closed {
			return nil, false
		}
		<-q.ready
	}
}

// signal leaves a token in c (of capacity 1) unless one is there already.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
