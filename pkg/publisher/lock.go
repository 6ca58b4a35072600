package publisher

import (
	"context"
	"fmt"
	"time"

	"github.com/gofrs/flock"
)

// LockPath returns the path of the lock file that elects the one active
// publisher of the outbox database at dbPath: dbPath + ".lock".
func LockPath(dbPath string) string { return dbPath + ".lock" }

// leaderLock is an exclusive advisory file lock (flock(2)). The kernel
// releases it when the holder's file descriptor closes, including when the
// process dies of SIGKILL, so a standby can always take over.
type leaderLock struct {
	fl   *flock.Flock
	poll time.Duration
}

func newLeaderLock(path string, poll time.Duration) *leaderLock {
	return &leaderLock{fl: flock.New(path), poll: poll}
}

// acquire polls the lock until it is taken or ctx ends. A failing attempt
// (the file cannot be opened) is retried too, after onError reports it.
func (l *leaderLock) acquire(ctx context.Context, onError func(error)) error {
	tick := time.NewTicker(l.poll)
	defer tick.Stop()
	for {
		ok, err := l.fl.TryLock()
		switch {
		case ok:
			return nil
		case err != nil:
			onError(fmt.Errorf("trying lock %s: %w", l.fl.Path(), err))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// release gives the lock up and closes the file; a later acquire reopens it.
func (l *leaderLock) release() error {
	if err := l.fl.Unlock(); err != nil {
		return fmt.Errorf("releasing lock %s: %w", l.fl.Path(), err)
	}
	return nil
}
