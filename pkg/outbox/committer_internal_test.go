package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// committerDB opens a real database with a parent table and a child table
// whose foreign key is checked only at COMMIT.
func committerDB(t *testing.T) *sql.DB {
	t.Helper()
	ctx := context.Background()
	db, err := Open(ctx, filepath.Join(t.TempDir(), "app.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, stmt := range []string{
		`CREATE TABLE parent (id INTEGER PRIMARY KEY)`,
		`CREATE TABLE child (id INTEGER PRIMARY KEY, parent INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`,
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatal(err)
		}
	}
	return db
}

// waiting is how many calls wait for a group.
func (c *Committer) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// eventually waits for cond, failing the test after a generous deadline.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// holdGroup starts a call that holds the Committer's transaction open until
// release is called, so that the calls made meanwhile wait and then go
// together, in the order they were queued. The held call inserts parent 0.
func holdGroup(t *testing.T, c *Committer) (release func(), done <-chan error) {
	t.Helper()
	entered, held, out := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		out <- c.Run(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			close(entered)
			<-held
			_, err := tx.ExecContext(ctx, `INSERT INTO parent (id) VALUES (0)`)
			return err
		})
	}()
	<-entered
	var once sync.Once
	release = func() { once.Do(func() { close(held) }) }
	t.Cleanup(release)
	return release, out
}

// queue makes a call that waits behind the held one, and returns once it
// waits.
func queue(t *testing.T, c *Committer, ctx context.Context, fn func(context.Context, *sql.Tx) error) <-chan error {
	t.Helper()
	n := c.waiting()
	out := make(chan error, 1)
	go func() { out <- c.Run(ctx, fn) }()
	eventually(t, fmt.Sprintf("%d calls wait", n+1), func() bool { return c.waiting() == n+1 })
	return out
}

func insert(table string, id int, parent ...int) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		var err error
		if table == "child" {
			_, err = tx.ExecContext(ctx, `INSERT INTO child (id, parent) VALUES (?, ?)`, id, parent[0])
		} else {
			_, err = tx.ExecContext(ctx, `INSERT INTO parent (id) VALUES (?)`, id)
		}
		return err
	}
}

func ids(t *testing.T, db *sql.DB, table string) string {
	t.Helper()
	rows, err := db.QueryContext(context.Background(), `SELECT id FROM `+table+` ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id int
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, fmt.Sprint(id))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(out, ",")
}

func wait(t *testing.T, what string, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// succeed waits for each call and fails the test on any error.
func succeed(t *testing.T, calls ...<-chan error) {
	t.Helper()
	for i, ch := range calls {
		if err := wait(t, fmt.Sprint("call ", i), ch); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
}

// wantIDs checks the ids a table holds.
func wantIDs(t *testing.T, db *sql.DB, table, want string) {
	t.Helper()
	if got := ids(t, db, table); got != want {
		t.Fatalf("%s ids %q, want %q", table, got, want)
	}
}

// Calls that wait while a transaction runs go together in the next one:
// the first of them inserts a child whose parent only the last inserts, a
// deferred foreign key that a COMMIT of the first alone would refuse.
func TestCommitterGroupsTheCallsThatWait(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 0)
	release, held := holdGroup(t, c)
	var calls []<-chan error
	calls = append(calls, queue(t, c, context.Background(), insert("child", 1, 5)))
	for id := 1; id <= 5; id++ {
		calls = append(calls, queue(t, c, context.Background(), insert("parent", id)))
	}
	release()
	succeed(t, append(calls, held)...)
	wantIDs(t, db, "parent", "0,1,2,3,4,5")
	wantIDs(t, db, "child", "1")
	if n := c.waiting(); n != 0 {
		t.Fatalf("%d calls still wait", n)
	}
}

// A call that fails in a group loses its own writes and no one else's, and
// its caller gets its own error.
func TestCommitterKeepsAFailedCallApart(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 0)
	release, held := holdGroup(t, c)
	errOwn := errors.New("out of stock")
	a := queue(t, c, context.Background(), insert("parent", 1))
	b := queue(t, c, context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		if err := insert("parent", 2)(ctx, tx); err != nil {
			return err
		}
		return errOwn
	})
	d := queue(t, c, context.Background(), insert("parent", 3))
	release()
	succeed(t, held)
	if err := wait(t, "b", b); !errors.Is(err, errOwn) {
		t.Fatalf("the failed call returned %v, want its own error", err)
	}
	succeed(t, a, d)
	wantIDs(t, db, "parent", "0,1,3") // the failed call's row rolled back, the others kept
}

// When the group's COMMIT fails because of one call (a deferred foreign
// key), the other calls run again on their own and commit; only that call
// fails.
func TestCommitterRunsCallsAloneWhenTheGroupCommitFails(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 0)
	release, held := holdGroup(t, c)
	var runs atomic.Int32
	counted := func(fn func(context.Context, *sql.Tx) error) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error { runs.Add(1); return fn(ctx, tx) }
	}
	a := queue(t, c, context.Background(), counted(insert("parent", 1)))
	orphan := queue(t, c, context.Background(), counted(insert("child", 7, 99)))
	b := queue(t, c, context.Background(), counted(insert("parent", 2)))
	release()
	succeed(t, held)
	if err := wait(t, "the orphan", orphan); err == nil || !strings.Contains(err.Error(), "FOREIGN KEY") {
		t.Fatalf("the call that broke the foreign key returned %v, want the failed COMMIT", err)
	}
	succeed(t, a, b)
	wantIDs(t, db, "parent", "0,1,2")
	wantIDs(t, db, "child", "")
	if n := runs.Load(); n != 6 {
		t.Fatalf("the three calls ran %d times, want 6: once in the group, once alone", n)
	}
}

// A call's panic is raised in its own caller, after its writes are rolled
// back; the group's other calls commit.
func TestCommitterRaisesAPanicInItsCaller(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 0)
	release, held := holdGroup(t, c)
	a := queue(t, c, context.Background(), insert("parent", 1))
	recovered := make(chan any, 1)
	n := c.waiting()
	go func() {
		defer func() { recovered <- recover() }()
		_ = c.Run(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
			if err := insert("parent", 2)(ctx, tx); err != nil {
				return err
			}
			panic("bad order")
		})
	}()
	eventually(t, "the panicking call waits", func() bool { return c.waiting() == n+1 })
	b := queue(t, c, context.Background(), insert("parent", 3))
	release()
	succeed(t, held)
	select {
	case v := <-recovered:
		if v != "bad order" {
			t.Fatalf("the caller recovered %v, want the call's panic", v)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the panicking call did not return")
	}
	succeed(t, a, b)
	wantIDs(t, db, "parent", "0,1,3")
}

// A caller whose context ends while it waits returns the context's error,
// and its function never runs.
func TestCommitterCallerGivesUpWhileWaiting(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 0)
	release, held := holdGroup(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	var ran atomic.Bool
	gaveUp := queue(t, c, ctx, func(ctx context.Context, tx *sql.Tx) error {
		ran.Store(true)
		return insert("parent", 1)(ctx, tx)
	})
	a := queue(t, c, context.Background(), insert("parent", 2))
	cancel()
	if err := wait(t, "the cancelled call", gaveUp); !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled call returned %v, want context.Canceled", err)
	}
	if n := c.waiting(); n != 1 {
		t.Fatalf("%d calls wait, want the one left", n)
	}
	release()
	succeed(t, held, a)
	if ran.Load() {
		t.Fatal("the cancelled call's function ran")
	}
	wantIDs(t, db, "parent", "0,2")
}

// A caller whose context ends while its function runs waits for the
// COMMIT: the function's context does not end with it (an interrupted
// write would roll back the whole shared transaction), and its writes and
// the others' commit.
func TestCommitterCallerGivesUpWhileItsCallRuns(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 0)
	release, held := holdGroup(t, c)
	ctx, cancel := context.WithCancel(context.Background())
	started, proceed := make(chan struct{}), make(chan struct{})
	mid := queue(t, c, ctx, func(ctx context.Context, tx *sql.Tx) error {
		close(started)
		<-proceed
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("the call's context ended with its caller's: %w", err)
		}
		return insert("parent", 1)(ctx, tx)
	})
	a := queue(t, c, context.Background(), insert("parent", 2))
	release()
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the call did not start")
	}
	cancel()
	close(proceed)
	succeed(t, held, mid, a)
	wantIDs(t, db, "parent", "0,1,2")
}

// With more calls waiting than a group holds, they go in several groups,
// each led by a caller that waited, and every one commits.
func TestCommitterHandsOnTheNextGroup(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 3)
	release, held := holdGroup(t, c)
	var calls []<-chan error
	for id := 1; id <= 10; id++ {
		calls = append(calls, queue(t, c, context.Background(), insert("parent", id)))
	}
	release()
	succeed(t, append(calls, held)...)
	wantIDs(t, db, "parent", "0,1,2,3,4,5,6,7,8,9,10")
	c.mu.Lock()
	running := c.running
	c.mu.Unlock()
	if running {
		t.Fatal("the Committer still runs a group after every call returned")
	}
}

// Many goroutines at once: every call commits exactly its row (run with
// -race).
func TestCommitterUnderConcurrentCalls(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 8)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for id := 1; id <= n; id++ {
		wg.Go(func() { errs <- c.Run(context.Background(), insert("parent", id)) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	var count int
	if err := db.QueryRowContext(context.Background(), `SELECT COUNT(*) FROM parent`).Scan(&count); err != nil || count != n {
		t.Fatalf("%d rows (%v), want %d", count, err, n)
	}
}

// A lone call that fails leaves nothing, like a transaction of its own.
func TestCommitterLoneCallRollsBack(t *testing.T) {
	db := committerDB(t)
	c := NewCommitter(db, 0)
	err := c.Run(context.Background(), insert("child", 1, 42))
	if err == nil || !strings.Contains(err.Error(), "committing") {
		t.Fatalf("Run = %v, want the failed COMMIT", err)
	}
	errOwn := errors.New("no")
	if err := c.Run(context.Background(), func(ctx context.Context, tx *sql.Tx) error {
		if err := insert("parent", 1)(ctx, tx); err != nil {
			return err
		}
		return errOwn
	}); !errors.Is(err, errOwn) {
		t.Fatalf("Run = %v, want the call's own error", err)
	}
	wantIDs(t, db, "parent", "")
	wantIDs(t, db, "child", "")
	if err := c.Run(context.Background(), insert("parent", 2)); err != nil {
		t.Fatal(err)
	}
}
