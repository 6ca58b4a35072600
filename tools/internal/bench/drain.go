package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
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
// the default server and on one that fsyncs every write; on the default
// server also against the pinned nats CLI's own publish benchmarks, async
// and fast-ingest, with messages of the same size and count.
func (r *runner) drain(ctx context.Context) []*Result {
	var out []*Result
	for _, v := range []struct {
		id    string
		sync  serverSync
		rows  int
		runs  int
		peers bool
	}{
		{"2", syncDefault, r.cfg.DrainRows, r.cfg.Runs, true},
		{"2′", syncAlways, r.cfg.DrainSyncRows, r.cfg.SyncRuns, false},
	} {
		out = append(out, r.drainScenario(ctx, v.id, v.sync, v.rows, v.runs, v.peers)...)
	}
	return out
}

// drainVariant is one way to move the rows into NOTIFY.
type drainVariant int

const (
	variantOutbox drainVariant = iota
	variantRaw
	variantNATSAsync
	variantNATSFast
)

// drainMethod describes what every variant does, for the report.
func drainMethod(sync serverSync, rows int, peers bool) string {
	variants := "two variants (**outbox**, **raw**)"
	order := "in the order ABBA (outbox first in odd runs, raw first in even ones)"
	if peers {
		variants = "four variants (**outbox**, **raw**, **nats bench async**, **nats bench fast**)"
		order = "in a palindromic order that rotates from run to run (ABCDDCBA, BCDAADCB, ...)"
	}
	m := fmt.Sprintf("One nats-server process (`bin/nats-server`, the production configuration, %s) "+
		"per scenario; NOTIFY (file storage, R1, as declared: `allow_batched` on) is deleted and provisioned afresh "+
		"before each drain, so every variant publishes into an identical empty stream on the same server. Each run "+
		"fills a fresh outbox with %d rows (the shop's order notifications over %d chats); %s then move that many "+
		"messages into the stream twice each, %s, so that a drift of the machine weighs on all alike, "+
		"between two raw drains that are not counted (a run's first and last places were measured slower). "+
		"**outbox**: `publisher.Open` + `Run` on a copy of the outbox, in this process with default options "+
		"(fast-ingest batches), timed from `Run` to the last row marked published (rows counted with the `AfterAck` "+
		"hook, marking seen in `tgnotify_publisher_published_total`); **raw**: the same rows, read from the outbox "+
		"beforehand, published with nats.go `jetstream.PublishMsgAsync` (`jetstream.NotificationMsg`: same subject, "+
		"payload, headers and `Nats-Msg-Id`), timed to the last PubAck.",
		sync, rows, drainChats, variants, order)
	if peers {
		m += fmt.Sprintf(" **nats bench async** and **nats bench fast**: the pinned CLI (`bin/nats bench js pub async` "+
			"and `... fast`, default flags otherwise) publishing the same count to NOTIFY with payloads of the rows' mean "+
			"size, `--dedup` (a `Nats-Msg-Id` each), the rows' other headers (`-H`) and %d subjects "+
			"(`--multisubject --multisubjectmax %d`); their figure is the rate the CLI reports, which leaves out its "+
			"start-up, and their CPU is the whole process's.", natsBenchChats, natsBenchChats)
	}
	return m + fmt.Sprintf(" Each drain checks that the stream then holds exactly %d messages. Figure: messages per "+
		"second over both drains of a variant; client CPU: the publishing process's CPU time per message (this "+
		"process's for outbox and raw).", rows)
}

// drainScenario measures the drain on one server setting and returns its
// rows: against raw publishing, and with peers against the two nats bench
// modes.
func (r *runner) drainScenario(ctx context.Context, id string, sync serverSync, rows, runs int, peers bool) []*Result {
	method := drainMethod(sync, rows, peers)
	newResult := func(id, ref, refName string, goal Goal) *Result {
		cols := []string{"client CPU µs/msg (outbox)", "client CPU µs/msg (" + refName + ")",
			"nats-server CPU µs/msg (outbox)", "nats-server CPU µs/msg (" + refName + ")"}
		return &Result{
			ID: id, Title: fmt.Sprintf("Drain %s rows, %s", group(int64(rows)), sync),
			Ours: "pkg/publisher: outbox → NOTIFY", Reference: ref,
			Unit: "msg/s", RefUnit: "msg/s", Goal: goal, ExtraColumns: cols, Method: method,
		}
	}
	raw := newResult(id, "raw JetStream async publish of the same messages", "raw", Goal{Text: "≥ 0.9×", Limit: 0.9})
	results := []*Result{raw}
	refs := []drainVariant{variantRaw}
	if peers {
		async := newResult(id+"a", "`nats bench js pub async`, same size and count", "nats bench", Goal{Text: "≥ 1.0×", Limit: 1.0})
		fast := newResult(id+"b", "`nats bench js pub fast` (fast-ingest batches), same size and count", "nats bench", Goal{Text: "≥ 0.8× (aim)", Limit: 0.8})
		results = append(results, async, fast)
		refs = append(refs, variantNATSAsync, variantNATSFast)
	}
	var (
		st  *stack
		cpu = map[drainVariant][]float64{} // client µs per message, per run
	)
	r.measure(ctx, raw, runs, func(ctx context.Context, run int) (RunFigures, error) {
		if st == nil { // one server for every run of this scenario
			var err error
			if st, err = r.newStack(ctx, "drain", sync); err != nil {
				return RunFigures{}, err
			}
		}
		figs, err := r.drainRun(ctx, st, run, rows, append([]drainVariant{variantOutbox}, refs...))
		if err != nil {
			return RunFigures{}, err
		}
		o := figs[variantOutbox]
		cpu[variantOutbox] = append(cpu[variantOutbox], o.cpu())
		var first RunFigures
		for i, v := range refs {
			f := figs[v]
			cpu[v] = append(cpu[v], f.cpu())
			rf := RunFigures{
				Ours: o.rate(), Reference: f.rate(), Ratio: ratio(o.rate(), f.rate()),
				Extra: []string{
					fmt.Sprintf("%.1f", o.cpu()), fmt.Sprintf("%.1f", f.cpu()),
					fmt.Sprintf("%.1f", o.serverCPU()), fmt.Sprintf("%.1f", f.serverCPU()),
				},
			}
			if i == 0 {
				first = rf
				continue
			}
			results[i].Runs = append(results[i].Runs, rf)
			r.logf("%s %s run %d/%d: %s", results[i].ID, results[i].Title, run+1, runs, results[i].describeRun(rf))
		}
		return first, nil
	})
	for _, res := range results[1:] {
		res.Elapsed, res.Load, res.Error = raw.Elapsed, raw.Load, raw.Error
	}
	if len(raw.Runs) > 0 {
		median := func(v drainVariant) float64 { return Summarize(cpu[v]).Median }
		names := map[drainVariant]string{variantRaw: "raw publishing", variantNATSAsync: "`nats bench` async", variantNATSFast: "`nats bench` fast"}
		for i, v := range refs {
			res := results[i]
			res.Ours += fmt.Sprintf(", client CPU %.1f µs/msg", median(variantOutbox))
			res.Reference += fmt.Sprintf(", client CPU %.1f µs/msg", median(v))
			res.Notes = append(res.Notes, r.drainCPUNote(raw, median(variantOutbox), median(v), names[v]))
		}
	}
	if st != nil {
		err := st.close()
		st.removeData(err != nil || raw.Error != "" || r.cfg.KeepLogs)
		if err != nil {
			for _, res := range results {
				res.fail(err)
			}
		}
	}
	return results
}

// drainCPUNote explains the CPU per message of the outbox and of a
// reference, from the medians of the runs: on a machine whose cores the
// clients share with the server, CPU alone bounds each rate.
func (r *runner) drainCPUNote(res *Result, ours, ref float64, refName string) string {
	var srv []float64
	for _, f := range res.Runs {
		if len(f.Extra) == 4 {
			v, err := strconv.ParseFloat(f.Extra[2], 64)
			if err == nil {
				srv = append(srv, v)
			}
		}
	}
	s := Summarize(srv).Median
	cores := float64(runtime.NumCPU())
	return fmt.Sprintf("Median client CPU per message: the publisher %.1f µs (reading and marking SQLite rows included), "+
		"%s %.1f µs; the nats-server spends %.1f µs per message of the drain. The clients share the machine's %d cores "+
		"with the server, so each µs of client CPU is taken from the server: CPU alone would bound the drain at %s msg/s.",
		ours, refName, ref, s, runtime.NumCPU(), fmtNum(cores*1e6/(ours+s)))
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

// drainOrder is the order of the drains of one run: the variants in a
// rotation that moves on with every run, then the same in reverse, so each
// variant drains twice and a drift of the machine during the run weighs on
// all of them alike. With two variants it is ABBA and BAAB.
func drainOrder(variants []drainVariant, run int) []drainVariant {
	n := len(variants)
	order := make([]drainVariant, 0, 2*n)
	for i := range n {
		order = append(order, variants[(i+run)%n])
	}
	for i := n - 1; i >= 0; i-- {
		order = append(order, order[i])
	}
	return order
}

// drainRun measures one run: every variant twice, in drainOrder, between
// two raw drains that are not counted.
func (r *runner) drainRun(ctx context.Context, st *stack, run, rows int, variants []drainVariant) (map[drainVariant]drainFigures, error) {
	db := filepath.Join(st.dir, fmt.Sprintf("drain-%d.db", run))
	if err := fillOutbox(ctx, db, fmt.Sprintf("D%d-", run), rows, 1000, func(i int) int64 { return int64(1000 + i%drainChats) }); err != nil {
		return nil, err
	}
	defer os.Remove(db)
	pending, err := pendingRows(ctx, db)
	if err != nil {
		return nil, err
	}
	if len(pending) != rows {
		return nil, fmt.Errorf("outbox holds %d pending rows, want %d", len(pending), rows)
	}
	shape := shapeOf(pending)
	// A raw drain that is not counted comes first and another one last:
	// the variant the rotation put in a run's first and last places came
	// out slower (analysis §2; the first follows the outbox's fill), so no
	// counted drain takes them.
	if _, err := r.drainRaw(ctx, st, pending); err != nil {
		return nil, fmt.Errorf("drain before the run's counted ones: %w", err)
	}
	figs := map[drainVariant]drainFigures{}
	outboxDrains := 0
	for k, v := range drainOrder(variants, run) {
		var (
			g   drainFigures
			err error
		)
		switch v {
		case variantOutbox:
			// Each outbox drain needs the rows pending: a copy of the
			// checkpointed file (it has no -wal) is the same outbox.
			outboxDrains++
			cp := fmt.Sprintf("%s.%d", db, outboxDrains)
			if err := copyFile(db, cp); err != nil {
				return nil, err
			}
			g, err = r.drainOutbox(ctx, st, cp, rows)
			os.Remove(cp)
		case variantRaw:
			g, err = r.drainRaw(ctx, st, pending)
		case variantNATSAsync:
			g, err = r.drainNATSBench(ctx, st, natsBenchAsync, rows, shape)
		case variantNATSFast:
			g, err = r.drainNATSBench(ctx, st, natsBenchFast, rows, shape)
		}
		if err != nil {
			return nil, fmt.Errorf("drain %d of %d: %w", k+1, 2*len(variants), err)
		}
		figs[v] = figs[v].add(g)
	}
	if _, err := r.drainRaw(ctx, st, pending); err != nil {
		return nil, fmt.Errorf("drain after the run's counted ones: %w", err)
	}
	return figs, nil
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
	if err := st.provision(ctx); err != nil {
		return err
	}
	if got, err := streamMsgs(ctx, st.js); err != nil || got != 0 {
		return fmt.Errorf("NOTIFY holds %d messages after it was created afresh, want 0 (%v)", got, err)
	}
	return nil
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
