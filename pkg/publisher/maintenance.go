package publisher

import (
	"context"
	"time"

	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// maintain runs the leader's periodic chores until ctx ends: refreshing the
// backlog metrics (every BacklogInterval, less often while counting is
// expensive), purging old published rows and checkpointing the WAL.
// Each chore's failure is logged and retried at its next tick; none stops
// the drain loop.
func (p *Publisher) maintain(ctx context.Context) {
	backlog := time.NewTimer(p.refreshBacklog(ctx))
	defer backlog.Stop()
	purge := time.NewTicker(p.opts.PurgeInterval)
	defer purge.Stop()
	checkpoint := time.NewTicker(p.opts.CheckpointInterval)
	defer checkpoint.Stop()
	truncate := time.NewTicker(p.opts.TruncateInterval)
	defer truncate.Stop()
	cancels := time.NewTicker(p.opts.CancelInterval)
	defer cancels.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-backlog.C:
			backlog.Reset(p.refreshBacklog(ctx))
		case <-purge.C:
			p.purge(ctx)
		case <-checkpoint.C:
			p.checkpoint(ctx, "PASSIVE")
		case <-truncate.C:
			p.checkpoint(ctx, "TRUNCATE")
		case <-cancels.C:
			p.carryCancels(ctx)
		}
	}
}

// backlogCostShare bounds the time spent counting the backlog: the next
// refresh waits at least this many times as long as the last count took.
// Counting walks every pending row (the outbox has no pending index, to keep
// enqueues cheap), so with a million rows waiting a count takes a noticeable
// fraction of a second; the metric then refreshes less often instead of
// slowing the drain that is reducing it.
const backlogCostShare = 50

// refreshBacklog updates the backlog and oldest-pending-age metrics and
// returns when to refresh them next.
func (p *Publisher) refreshBacklog(ctx context.Context) time.Duration {
	start := time.Now()
	b, err := p.reader.Backlog(ctx)
	next := max(p.opts.BacklogInterval, backlogCostShare*time.Since(start))
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("refreshing backlog metrics", "err", err)
		}
		return next
	}
	p.metrics.backlog.Set(float64(b.Pending))
	if b.Oldest.IsZero() {
		p.metrics.oldestNanos.Store(0)
	} else {
		p.metrics.oldestNanos.Store(b.Oldest.UnixNano())
	}
	return next
}

// purge deletes rows published more than PurgeRetention ago, PurgeChunk rows
// per transaction so the application's writers never wait long.
func (p *Publisher) purge(ctx context.Context) {
	n, err := p.reader.Purge(ctx, p.opts.Now().Add(-p.opts.PurgeRetention), p.opts.PurgeChunk)
	p.metrics.purged.Add(float64(n))
	switch {
	case err != nil && ctx.Err() == nil:
		p.log.Warn("purging published rows", "err", err, "deleted", n)
	case n > 0:
		p.log.Debug("purged published rows", "deleted", n, "retention", p.opts.PurgeRetention)
	}
}

// cancelBatch bounds the cancel requests carried per tick.
const cancelBatch = 100

// carryCancels writes a cancel mark in notify_delivered for each cancelled
// row of the published prefix whose cancel is not carried yet, and records
// what the mark found in the row's cancel_result. Such a row was published
// before it was cancelled, or while (the publisher had read it), or was
// skipped as cancelled: the mark stops it in every case unless a worker had
// begun sending it. delivery.Cancel publishes the outcome as an event. A
// failure is logged and the request tried again at the next tick.
func (p *Publisher) carryCancels(ctx context.Context) {
	reqs, err := p.reader.CancelRequests(ctx, cancelBatch)
	if err != nil {
		if ctx.Err() == nil {
			p.log.Warn("reading cancel requests", "err", err)
		}
		return
	}
	for _, r := range reqs {
		res, err := delivery.Cancel(ctx, p.js, p.opts.Names, r.Key, "publisher", p.opts.Now())
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("writing a cancel mark; retrying at the next tick", "key", r.Key, "err", err)
			}
			return
		}
		result := outbox.CancelResultCancelled
		if res.Outcome == delivery.CancelTooLate {
			result = outbox.CancelResultTooLate
		}
		if err := p.reader.SetCancelResult(ctx, r.ID, result); err != nil {
			p.log.Warn("recording a cancel result; carried again at the next tick (harmless)", "key", r.Key, "err", err)
			return
		}
		p.log.Info("cancel carried to the workers", "key", r.Key, "result", result)
	}
}

// checkpoint copies the WAL into the database. The publisher's own
// connections never checkpoint inside a commit (see openDB), so this is where
// the WAL of the marking is copied, on a connection of its own, while the
// drain goes on:
//
//   - PASSIVE, every CheckpointInterval: copies what it can without waiting
//     for anyone, and costs microseconds when there is nothing to copy.
//   - TRUNCATE, every TruncateInterval: also truncates the -wal file to zero
//     bytes. It waits for readers and holds off new writers while it waits,
//     so its connection's busy timeout is short; when readers are in the way
//     it reports busy, a PASSIVE checkpoint is done instead, and the next
//     interval tries again. Between truncations the file's size stays bounded
//     by journal_size_limit and by how much is written between checkpoints.
func (p *Publisher) checkpoint(ctx context.Context, mode string) {
	res, err := p.checkpointer.Checkpoint(ctx, mode)
	if err == nil && (!res.Busy || mode == "PASSIVE") {
		return
	}
	if err != nil && !outbox.IsBusy(err) {
		if ctx.Err() == nil {
			p.log.Warn("checkpointing the WAL", "mode", mode, "err", err)
		}
		return
	}
	res, err = p.checkpointer.Checkpoint(ctx, "PASSIVE")
	switch {
	case err != nil && ctx.Err() == nil:
		p.log.Warn("checkpointing the WAL", "mode", "PASSIVE", "err", err)
	case err == nil:
		p.log.Debug("WAL was busy for "+mode+"; checkpointed passively", "frames", res.LogFrames, "checkpointed", res.Checkpointed)
	}
}
