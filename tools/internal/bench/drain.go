package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
	"github.com/tgnotify/tgnotify/pkg/outbox"
	"github.com/tgnotify/tgnotify/pkg/publisher"
)

// drainChats is how many chats the drained notifications spread over.
const drainChats = 1000

// drainTimeout bounds one variant of one drain run.
const drainTimeout = 10 * time.Minute

// drain is scenario 2: the publisher against raw JetStream publishing, on
// the default server and on one that fsyncs every write.
func (r *runner) drain(ctx context.Context) []*Result {
	var out []*Result
	for _, v := range []struct {
		id   string
		sync serverSync
		rows int
		runs int
	}{
		{"2", syncDefault, r.cfg.DrainRows, r.cfg.Runs},
		{"2′", syncAlways, r.cfg.DrainSyncRows, r.cfg.SyncRuns},
	} {
		res := &Result{
			ID: v.id, Title: fmt.Sprintf("Drain %s rows, %s", group(int64(v.rows)), v.sync),
			Ours: "pkg/publisher: outbox → NOTIFY", Reference: "raw JetStream async publish of the same messages",
			Unit: "msg/s", RefUnit: "msg/s",
			Goal: Goal{Text: "≥ 0.8×", Limit: 0.8},
			ExtraColumns: []string{
				"client CPU µs/msg (outbox)", "client CPU µs/msg (raw)",
				"nats-server CPU µs/msg (outbox)", "nats-server CPU µs/msg (raw)",
			},
			Method: fmt.Sprintf("One nats-server process (`bin/nats-server`, the production configuration, %s) "+
				"per scenario; NOTIFY (file storage, R1) is deleted and provisioned afresh before each variant, so both "+
				"publish into an identical empty stream on the same server. Each run fills a fresh outbox with %d rows "+
				"(the shop's order notifications over %d chats); each variant then moves those rows into the stream twice, "+
				"in the order ABBA (outbox first in odd runs, raw first in even ones) so that a drift of the machine weighs "+
				"on both alike. **outbox**: `publisher.Open` + `Run` on a copy of the outbox, in this process with default options, timed from `Run` to the last row marked published (PubAcks "+
				"counted with the `AfterAck` hook, marking seen in `tgnotify_publisher_published_total`); **raw**: the same "+
				"rows, read from the outbox beforehand, published with nats.go `jetstream.PublishMsgAsync` "+
				"(`jetstream.NotificationMsg`: same subject, payload, headers and `Nats-Msg-Id`), timed to the last PubAck. "+
				"Each drain checks that the stream then holds exactly %d messages. Figure: messages per second over "+
				"both drains of a variant.",
				v.sync, v.rows, drainChats, v.rows),
		}
		var (
			st  *stack
			cpu [3][]float64 // outbox client, raw client, nats-server (mean of both): µs per message
		)
		out = append(out, r.measure(ctx, res, v.runs, func(ctx context.Context, run int) (RunFigures, error) {
			if st == nil { // one server for every run of this variant
				var err error
				if st, err = r.newStack(ctx, "drain", v.sync); err != nil {
					return RunFigures{}, err
				}
			}
			f, o, raw, err := r.drainRun(ctx, st, run, v.rows)
			if err == nil {
				cpu[0], cpu[1], cpu[2] = append(cpu[0], o.cpu()), append(cpu[1], raw.cpu()), append(cpu[2], (o.serverCPU()+raw.serverCPU())/2)
			}
			return f, err
		}))
		if len(res.Runs) > 0 {
			o, raw, srv := Summarize(cpu[0]).Median, Summarize(cpu[1]).Median, Summarize(cpu[2]).Median
			res.Notes = append(res.Notes, fmt.Sprintf("Median CPU per message: the publisher %.1f µs (reading and "+
				"marking SQLite rows included), raw publishing %.1f µs, the nats-server %.1f µs for either. Both clients "+
				"share the machine's %d cores with the server, so each µs of client CPU is taken from the server: "+
				"CPU alone would bound the drain at %s msg/s and the raw publish at %s msg/s (a ratio of %.2f).",
				o, raw, srv, runtime.NumCPU(), fmtNum(float64(runtime.NumCPU())*1e6/(o+srv)), fmtNum(float64(runtime.NumCPU())*1e6/(raw+srv)), (raw+srv)/(o+srv)))
		}
		if st != nil {
			err := st.close()
			st.removeData(err != nil || res.Error != "")
			if err != nil {
				res.fail(err)
			}
		}
	}
	return out
}

// drainFigures add up one variant's drains: messages, wall time, and the
// CPU time of this process and of the nats-server.
type drainFigures struct {
	n                int
	wall, self, nats time.Duration
}

func (f drainFigures) add(g drainFigures) drainFigures {
	return drainFigures{n: f.n + g.n, wall: f.wall + g.wall, self: f.self + g.self, nats: f.nats + g.nats}
}

// rate is messages per second.
func (f drainFigures) rate() float64 { return float64(f.n) / f.wall.Seconds() }

// cpu and serverCPU are µs of CPU per message.
func (f drainFigures) cpu() float64       { return float64(f.self.Microseconds()) / float64(f.n) }
func (f drainFigures) serverCPU() float64 { return float64(f.nats.Microseconds()) / float64(f.n) }

// drainRun measures one run: each variant twice, in the order ABBA, A
// being the outbox in even runs and raw publishing in odd ones, so that a
// drift of the machine's speed during the run weighs on both alike.
func (r *runner) drainRun(ctx context.Context, st *stack, run, rows int) (f RunFigures, outboxF, rawF drainFigures, err error) {
	db := filepath.Join(st.dir, fmt.Sprintf("drain-%d.db", run))
	if err := fillOutbox(ctx, db, fmt.Sprintf("D%d-", run), rows, 1000, func(i int) int64 { return int64(1000 + i%drainChats) }); err != nil {
		return f, outboxF, rawF, err
	}
	pending, err := pendingRows(ctx, db)
	if err != nil {
		return f, outboxF, rawF, err
	}
	if len(pending) != rows {
		return f, outboxF, rawF, fmt.Errorf("outbox holds %d pending rows, want %d", len(pending), rows)
	}
	// The second outbox drain needs the rows pending again: a copy of the
	// checkpointed file (it has no -wal) is the same outbox.
	copies := []string{db, db + ".copy"}
	if err := copyFile(db, copies[1]); err != nil {
		return f, outboxF, rawF, err
	}
	defer os.Remove(copies[1])
	for k, outboxTurn := range []bool{true, false, false, true} {
		var g drainFigures
		if outboxTurn == (run%2 == 0) {
			g, err = r.drainOutbox(ctx, st, copies[0], rows)
			copies = copies[1:]
			outboxF = outboxF.add(g)
		} else {
			g, err = r.drainRaw(ctx, st, pending)
			rawF = rawF.add(g)
		}
		if err != nil {
			return f, outboxF, rawF, fmt.Errorf("drain %d of 4: %w", k+1, err)
		}
	}
	o, raw := outboxF.rate(), rawF.rate()
	return RunFigures{
		Ours: o, Reference: raw, Ratio: ratio(o, raw),
		Extra: []string{
			fmt.Sprintf("%.1f", outboxF.cpu()), fmt.Sprintf("%.1f", rawF.cpu()),
			fmt.Sprintf("%.1f", outboxF.serverCPU()), fmt.Sprintf("%.1f", rawF.serverCPU()),
		},
	}, outboxF, rawF, nil
}

// copyFile copies the file at from to to.
func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", from, err)
	}
	return out.Close()
}

// freshStream deletes NOTIFY and provisions it again, empty.
func freshStream(ctx context.Context, st *stack) error {
	dctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := st.js.DeleteStream(dctx, jetstream.StreamNotify); err != nil && !isStreamNotFound(err) {
		return fmt.Errorf("deleting NOTIFY: %w", err)
	}
	return st.provision(ctx)
}

// clocks samples the CPU time of this process and of the nats-server.
type clocks struct {
	wall       time.Time
	self, nats time.Duration
}

func (st *stack) clocks() clocks {
	c := clocks{wall: time.Now(), self: SelfCPU()}
	c.nats, _ = ProcessCPU(st.nats.Pid())
	return c
}

// figures turns the clocks before and after n messages into a drain figure.
func (c clocks) figures(end clocks, n int) drainFigures {
	return drainFigures{n: n, wall: end.wall.Sub(c.wall), self: end.self - c.self, nats: end.nats - c.nats}
}

// drainOutbox drains the outbox at db with pkg/publisher in this process.
func (r *runner) drainOutbox(ctx context.Context, st *stack, db string, rows int) (drainFigures, error) {
	if err := freshStream(ctx, st); err != nil {
		return drainFigures{}, err
	}
	nc, err := connect(ctx, st.natsURL, "bench-publisher")
	if err != nil {
		return drainFigures{}, err
	}
	defer nc.Close()
	reg := prometheus.NewRegistry()
	var acked atomic.Int64
	p, err := publisher.Open(ctx, db, nc, publisher.Options{Registerer: reg, AfterAck: func(rows []outbox.Row) error {
		acked.Add(int64(len(rows)))
		return nil
	}})
	if err != nil {
		return drainFigures{}, err
	}
	defer p.Close()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	before := st.clocks()
	go func() { done <- p.Run(runCtx) }()
	err = waitFor(ctx, drainTimeout, "for every row's PubAck", func() bool { return acked.Load() >= int64(rows) })
	if err == nil {
		err = waitFor(ctx, time.Minute, "for every row to be marked published", func() bool {
			return counterValue(reg, "tgnotify_publisher_published_total") >= float64(rows)
		})
	}
	after := st.clocks()
	stop()
	if rerr := <-done; rerr != nil && err == nil {
		err = fmt.Errorf("publisher: %w", rerr)
	}
	if err != nil {
		return drainFigures{}, err
	}
	if got, err := streamMsgs(ctx, st.js); err != nil || got != uint64(rows) {
		return drainFigures{}, fmt.Errorf("after the drain NOTIFY holds %d messages, want %d (%v)", got, rows, err)
	}
	return before.figures(after, rows), nil
}

// drainRaw publishes the rows' messages straight to JetStream.
func (r *runner) drainRaw(ctx context.Context, st *stack, rows []outbox.Row) (drainFigures, error) {
	if err := freshStream(ctx, st); err != nil {
		return drainFigures{}, err
	}
	nc, err := connect(ctx, st.natsURL, "bench-raw")
	if err != nil {
		return drainFigures{}, err
	}
	defer nc.Close()
	before := st.clocks()
	failed, err := publishAsync(ctx, nc, len(rows), func(i int) (*nats.Msg, error) {
		row := rows[i]
		return jetstream.NotificationMsg(row.ChatID, row.Key, row.CreatedAt, notify.PayloadContentType, row.Payload), nil
	})
	after := st.clocks()
	if err != nil {
		return drainFigures{}, err
	}
	if failed > 0 {
		return drainFigures{}, fmt.Errorf("%d raw publishes failed", failed)
	}
	if got, err := streamMsgs(ctx, st.js); err != nil || got != uint64(len(rows)) {
		return drainFigures{}, fmt.Errorf("after the raw publish NOTIFY holds %d messages, want %d (%v)", got, len(rows), err)
	}
	return before.figures(after, len(rows)), nil
}

// counterValue returns the value of a counter in reg, 0 when absent.
func counterValue(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// isStreamNotFound reports whether err says the stream does not exist.
func isStreamNotFound(err error) bool {
	return errors.Is(err, natsjs.ErrStreamNotFound)
}
