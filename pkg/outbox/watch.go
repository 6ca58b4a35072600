package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// CommitWatcher notices commits made by other connections, including other
// processes, within a poll interval. It polls PRAGMA data_version on a
// dedicated connection: the value changes whenever another connection commits
// to the database, and reading it costs microseconds and no lock.
type CommitWatcher struct {
	conn *sql.Conn
	last int64
}

// NewCommitWatcher takes a dedicated connection from db for the watcher.
// Close it to give the connection back.
func NewCommitWatcher(ctx context.Context, db *sql.DB) (*CommitWatcher, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("opening commit watcher connection: %w", err)
	}
	w := &CommitWatcher{conn: conn}
	if w.last, err = w.version(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	return w, nil
}

func (w *CommitWatcher) version(ctx context.Context) (int64, error) {
	var v int64
	if err := w.conn.QueryRowContext(ctx, `PRAGMA data_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading data_version: %w", err)
	}
	return v, nil
}

// Changed polls once and reports whether another connection committed since
// the previous poll.
func (w *CommitWatcher) Changed(ctx context.Context) (bool, error) {
	v, err := w.version(ctx)
	if err != nil {
		return false, err
	}
	changed := v != w.last
	w.last = v
	return changed, nil
}

// Wait polls every interval until another connection commits, timeout
// passes (it then returns false) or ctx ends.
func (w *CommitWatcher) Wait(ctx context.Context, interval, timeout time.Duration) (bool, error) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		changed, err := w.Changed(ctx)
		if err != nil || changed {
			return changed, err
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-deadline.C:
			return false, nil
		case <-tick.C:
		}
	}
}

// Close returns the watcher's connection to the pool.
func (w *CommitWatcher) Close() error { return w.conn.Close() }
