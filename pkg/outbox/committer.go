package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
)

// DefaultMaxGroup is how many calls a [Committer] commits together at most
// by default.
const DefaultMaxGroup = 64

// savepoint names the savepoint that keeps each call of a group apart.
const savepoint = "tgnotify_group_call"

// Committer runs concurrent write transactions as one: calls of [Committer.Run]
// that arrive while a transaction is committing wait, and the next
// transaction runs all of them, each in a savepoint of its own, with one
// COMMIT. A database opened with [Open] fsyncs every commit
// (synchronous=FULL), and SQLite takes one writer at a time, so an
// application that commits each request on its own can take no more
// requests a second than its disk takes fsyncs; with a Committer, N
// requests that arrive together cost one.
//
// A lone call is not delayed: it finds no transaction running and runs at
// once, without a savepoint, exactly like a transaction of its own. Calls
// group only when they would otherwise have queued for the write lock.
//
// Create one per database and share it between goroutines. It starts no
// goroutine of its own: the caller whose call finds no transaction running
// runs the group, and hands the next one to a waiting caller.
type Committer struct {
	db  *sql.DB
	max int

	mu      sync.Mutex
	queue   []*call
	running bool // a caller is running a group
}

// call is one waiting [Committer.Run].
type call struct {
	ctx  context.Context
	fn   func(context.Context, *sql.Tx) error
	done chan outcome // buffered: the runner never waits for its caller
}

// outcome is what a call's caller learns: its result, or that it is to run
// the next group.
type outcome struct {
	err      error
	panicked any // the value fn panicked with, re-raised in the caller
	lead     bool
}

// NewCommitter returns a Committer over db, a database opened with [Open]
// (or with the same settings), which groups at most maxGroup calls in one
// transaction; maxGroup <= 0 means [DefaultMaxGroup].
func NewCommitter(db *sql.DB, maxGroup int) *Committer {
	if maxGroup <= 0 {
		maxGroup = DefaultMaxGroup
	}
	return &Committer{db: db, max: maxGroup}
}

// Run calls fn with a transaction and returns when what fn wrote is
// committed, or with the error that kept it from being committed.
//
// fn may share the transaction with other calls of Run. Its writes are
// kept apart by a savepoint: if fn returns an error (or panics), they are
// rolled back, and the others' are committed; fn sees what the calls before
// it in the same transaction wrote. If the shared COMMIT fails (a deferred
// foreign key that one call broke, a full disk), each call of the group
// that succeeded runs again in a transaction of its own, so that one call's
// failure stays its own. fn may therefore be called twice: the first
// call's writes are gone by then, but fn must not leave effects outside tx
// that a second call would double. fn must not commit or roll back tx
// itself, nor keep it after it returns, and it should use the ctx it is
// given for its statements: its caller's context without the
// cancellation, since SQLite rolls back a whole transaction, the other
// calls' writes with it, when one of its writes is interrupted. A panic in
// fn is raised again in Run's caller, after its writes are rolled back.
//
// Run returns nil only when fn returned nil and the transaction committed.
// If Run returns an error, nothing fn wrote is in the database: fn's own
// error, a failed BEGIN or COMMIT (which fails every call of the group), or
// ctx's error when ctx ended before fn was called. Once fn has begun, Run
// waits for the group's COMMIT even if ctx ends, so that its answer is
// always the truth.
func (c *Committer) Run(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	cl := &call{ctx: ctx, fn: fn, done: make(chan outcome, 1)}
	c.mu.Lock()
	if !c.running {
		c.running = true
		c.mu.Unlock()
		return c.lead(cl)
	}
	c.queue = append(c.queue, cl)
	c.mu.Unlock()
	select {
	case o := <-cl.done:
		return c.answer(cl, o)
	case <-ctx.Done():
		c.mu.Lock()
		if i := slices.Index(c.queue, cl); i >= 0 {
			c.queue = slices.Delete(c.queue, i, i+1)
			c.mu.Unlock()
			return ctx.Err()
		}
		c.mu.Unlock()
		return c.answer(cl, <-cl.done) // already taken into a group
	}
}

// answer returns a waiting call's outcome to its caller, running the next
// group first when the call was chosen to lead it.
func (c *Committer) answer(cl *call, o outcome) error {
	if o.lead {
		return c.lead(cl)
	}
	if o.panicked != nil {
		panic(o.panicked)
	}
	return o.err
}

// lead runs a group: first and the calls queued behind it, up to the most a
// group holds. It then hands the next group to the first call still
// waiting, or marks the Committer idle, answers the group's other callers
// and returns first's outcome.
func (c *Committer) lead(first *call) error {
	c.mu.Lock()
	n := min(len(c.queue), c.max-1)
	group := make([]*call, 0, n+1)
	group = append(group, first)
	group = append(group, c.queue[:n]...)
	c.queue = slices.Delete(c.queue, 0, n)
	c.mu.Unlock()

	// Should the group's run panic outside every call's fn (which call1
	// recovers), the others still learn that nothing was committed and the
	// next group still runs.
	outs := make([]outcome, len(group))
	failLive(outs, errors.New("the transaction's run panicked"))
	defer func() {
		c.mu.Lock()
		if len(c.queue) > 0 {
			next := c.queue[0]
			c.queue = slices.Delete(c.queue, 0, 1)
			next.done <- outcome{lead: true}
		} else {
			c.running = false
		}
		c.mu.Unlock()
		for i, cl := range group[1:] {
			cl.done <- outs[i+1]
		}
	}()
	outs = c.commit(group)
	if outs[0].panicked != nil {
		panic(outs[0].panicked)
	}
	return outs[0].err
}

// commit runs the group's calls in one transaction and returns each one's
// outcome, in the group's order. When the COMMIT of several calls fails
// (a deferred constraint that one of them broke, say), each of those calls
// runs again in a transaction of its own, so that one call's failure is its
// own.
func (c *Committer) commit(group []*call) []outcome {
	outs, atCommit, err := c.transact(group)
	var ok []int
	for i, o := range outs {
		if !o.failed() {
			ok = append(ok, i)
		}
	}
	switch {
	case err == nil:
		return outs
	case atCommit && len(ok) > 1:
		for _, i := range ok {
			alone, _, err := c.transact(group[i : i+1])
			if err != nil {
				alone[0].err = err
			}
			outs[i] = alone[0]
		}
		return outs
	}
	failLive(outs, err)
	return outs
}

// transact runs the group's live calls in one transaction, each in a
// savepoint when there are several, and commits what they wrote unless
// every one failed. The error is a failed BEGIN, savepoint or COMMIT
// (atCommit): the calls whose outcome is not a failure of their own then
// committed nothing.
func (c *Committer) transact(group []*call) (outs []outcome, atCommit bool, err error) {
	outs = make([]outcome, len(group))
	live := 0
	for i, cl := range group {
		if err := cl.ctx.Err(); err != nil {
			outs[i].err = err
			continue
		}
		live++
	}
	if live == 0 {
		return outs, false, nil
	}
	// The transaction outlives any one caller's context: a caller whose
	// context ends waits for the group (Run), and database/sql would roll
	// the transaction back under the others.
	tx, err := c.db.BeginTx(context.WithoutCancel(group[0].ctx), nil)
	if err != nil {
		return outs, false, fmt.Errorf("beginning a transaction: %w", err)
	}
	defer tx.Rollback()
	if live == 1 {
		for i, cl := range group {
			if outs[i].err == nil {
				outs[i] = call1(cl, tx)
			}
		}
	} else if err := runApart(group, tx, outs); err != nil {
		return outs, false, err
	}
	if !slices.ContainsFunc(outs, func(o outcome) bool { return !o.failed() }) {
		return outs, false, nil
	}
	if err := tx.Commit(); err != nil {
		return outs, true, fmt.Errorf("committing: %w", err)
	}
	return outs, false, nil
}

// runApart runs each live call of the group in a savepoint of its own,
// rolling back the writes of a call that fails. An error means a savepoint
// itself failed and the transaction can commit nothing.
func runApart(group []*call, tx *sql.Tx, outs []outcome) error {
	for i, cl := range group {
		if outs[i].err != nil {
			continue
		}
		if _, err := tx.ExecContext(context.WithoutCancel(cl.ctx), "SAVEPOINT "+savepoint); err != nil {
			return fmt.Errorf("opening a savepoint: %w", err)
		}
		outs[i] = call1(cl, tx)
		if outs[i].failed() {
			if _, err := tx.ExecContext(context.WithoutCancel(cl.ctx), "ROLLBACK TO "+savepoint); err != nil {
				return fmt.Errorf("rolling back a failed call: %w", err)
			}
		}
		if _, err := tx.ExecContext(context.WithoutCancel(cl.ctx), "RELEASE "+savepoint); err != nil {
			return fmt.Errorf("releasing a savepoint: %w", err)
		}
	}
	return nil
}

// call1 runs one call's fn, turning a panic into its outcome.
func call1(cl *call, tx *sql.Tx) (o outcome) {
	defer func() {
		if v := recover(); v != nil {
			o = outcome{panicked: v, err: fmt.Errorf("panic: %v", v)}
		}
	}()
	// Once fn has begun, its caller waits for the COMMIT (Run), and an
	// interrupted write would roll back the whole shared transaction
	// (SQLite does that to a statement stopped by sqlite3_interrupt, which
	// the driver calls when a statement's context ends).
	return outcome{err: cl.fn(context.WithoutCancel(cl.ctx), tx)}
}

// failed reports whether the call's writes are not to be committed.
func (o outcome) failed() bool { return o.err != nil }

// failLive gives err to every call of the group that has not failed on its
// own: the transaction that held their writes commits nothing.
func failLive(outs []outcome, err error) {
	for i := range outs {
		if !outs[i].failed() {
			outs[i].err = err
		}
	}
}
