package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// markerFile marks a directory as a chaos run's, so that the next run may
// empty it.
const markerFile = ".tgnotify-chaos"

// ErrInterrupted is returned by Run when its context ended before the
// checks.
var ErrInterrupted = errors.New("chaos run interrupted")

// Run performs a chaos run: it starts the system, places the plan's orders
// while injecting its faults, lets the system drain, reads the final state,
// stops every process, checks the invariants and writes progress and the
// report to out. verbose also writes each fault to out (it always goes to
// faults.log in the run's directory).
//
// The result's checks decide the run; an error means the run could not be
// carried out (bad configuration, a process that would not start, ctx
// ended).
func Run(ctx context.Context, c Config, out io.Writer, verbose bool) (Result, error) {
	began := time.Now()
	if err := c.Validate(); err != nil {
		return Result{}, err
	}
	dir, err := filepath.Abs(c.Dir)
	if err != nil {
		return Result{}, err
	}
	if err := system.PrepareDir(dir, markerFile, "chaos run"); err != nil {
		return Result{}, err
	}
	plan := NewPlan(c)
	fmt.Fprintf(out, "chaos: %s run, seed %d (rerun with -seed %d); data and logs in %s\n", c.Name, c.Seed, c.Seed, dir)
	fmt.Fprintf(out, "plan: %d orders at %.0f/s over %v (%d customers with an email, %d with a phone, %d with a MAX user, of %d); "+
		"%d publisher kills, %d telegram worker kills, %d channel worker kills, %d nats-server restarts, %d Mailpit restarts, "+
		"%d Telegram outages (%d longer than fallback_after %v), %d 429 storms, %d MAX/SMS faults, %d standby periods, %d chats blocked during the run\n",
		len(plan.Orders), c.OrderRate, c.FaultPhase, plan.customersWith("email"), plan.customersWith("sms"), plan.customersWith("max"), plan.Private,
		plan.count(KillPublisher), plan.count(KillWorker), plan.count(KillChannelWorker), plan.count(RestartNATS), plan.count(RestartMailpit),
		plan.count(TelegramOutage), plan.longOutages(), c.Channels.FallbackAfter, plan.count(RateLimitStorm), plan.count(ProviderFault),
		plan.count(StartStandby), plan.count(BlockChat))
	if c.Cluster {
		fmt.Fprintf(out, "cluster: three nats-server nodes behind proxies, every stream, consumer and bucket on 3 replicas; the %d nats-server restarts restart one node each; "+
			"%d node kills, %d leader step-downs, %d partitions of a node\n", plan.count(RestartNATS), plan.count(KillNode), plan.count(StepDown), plan.count(Partition))
	}

	s, err := newSUT(c, dir, plan)
	if err != nil {
		return Result{}, err
	}
	defer s.sup.Close() // whatever happens, nothing is left running
	if err := s.start(ctx); err != nil {
		return Result{}, fmt.Errorf("starting the system: %w", err)
	}
	servers := "nats-server"
	if c.Cluster {
		servers = "nats-n1, nats-n2, nats-n3 (provisioned with tgnotify provision, replicas 3)"
	}
	fmt.Fprintf(out, "started %s, botapi-emulator, max-emulator, sms-emulator, mailpit, shop, publisher, max-worker, email-worker, sms-worker, worker-1 (logs in %s)\n", servers, s.sup.Dir())
	nc, err := nats.Connect(s.natsURL, nats.Name("chaos"), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
	if err != nil {
		return Result{}, fmt.Errorf("connecting to NATS: %w", err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return Result{}, err
	}

	faultLog, err := os.Create(filepath.Join(dir, "faults.log"))
	if err != nil {
		return Result{}, err
	}
	defer faultLog.Close()
	var faultOut io.Writer = faultLog
	if verbose {
		faultOut = io.MultiWriter(faultLog, out)
	}
	r := &runner{c: c, s: s, js: js, out: out, plan: plan, pl: system.NewPlacer(s.shopURL), tl: &timeline{}}
	aborted := r.faultPhase(ctx, faultOut)
	if ctx.Err() != nil {
		return Result{}, ErrInterrupted
	}

	obs := Observed{Plan: plan, Worker: c.Worker, FaultStart: r.faultStart, FaultEnd: r.faultEnd}
	switch {
	case aborted != "":
		obs.Drain = "not drained: " + aborted
	default:
		n := placeLateRepeats(ctx, r.pl, plan.Orders)
		fmt.Fprintf(out, "faults stopped; %d late repeats posted; waiting for the pipeline to drain (at most %v)\n", n, c.DrainTimeout)
		if err := r.drain(ctx); err != nil {
			obs.Drain = err.Error()
		}
	}
	if ctx.Err() != nil {
		return Result{}, ErrInterrupted
	}
	r.collect(ctx, &obs)
	obs.StopLines, obs.StopFailed = s.stopAll()
	obs.Leftovers = s.leftovers()
	for _, f := range s.sup.Failures() {
		obs.Failures = append(obs.Failures, f.Error())
	}
	rec := Record{Config: c, Observed: obs, Elapsed: time.Since(began)}
	if err := rec.save(filepath.Join(dir, recordFile)); err != nil {
		return Result{}, err
	}
	res := Evaluate(obs)
	dupLog := filepath.Join(dir, "duplicates.log")
	if err := os.WriteFile(dupLog, []byte(strings.Join(res.Figures.DuplicateLog, "\n")+"\n"), 0o644); err != nil {
		return res, err
	}
	printReport(out, c, res, rec.Elapsed)
	fmt.Fprintf(out, "faults: %s; duplicates: %s; record: %s\n", faultLog.Name(), dupLog, filepath.Join(dir, recordFile))
	return res, nil
}

// recordFile holds a run's Record in its directory.
const recordFile = "record.json"

// Record is everything a run observed, saved in its directory so that the
// checks can be evaluated again without running it again (Recheck).
type Record struct {
	Config   Config
	Observed Observed
	Elapsed  time.Duration
}

func (r Record) save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := json.NewEncoder(f).Encode(r); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// Recheck evaluates the checks again over the record a run saved in dir and
// prints the report, as the run did.
func Recheck(dir string, out io.Writer) (Result, error) {
	b, err := os.ReadFile(filepath.Join(dir, recordFile))
	if err != nil {
		return Result{}, err
	}
	var rec Record
	if err := json.Unmarshal(b, &rec); err != nil {
		return Result{}, fmt.Errorf("reading %s: %w", filepath.Join(dir, recordFile), err)
	}
	res := Evaluate(rec.Observed)
	printReport(out, rec.Config, res, rec.Elapsed)
	return res, nil
}

// runner is the state of one run.
type runner struct {
	c    Config
	s    *sut
	js   natsjs.JetStream
	out  io.Writer
	plan Plan
	pl   *system.Placer
	tl   *timeline
	// faultStart and faultEnd bound the fault phase.
	faultStart, faultEnd time.Time
}

// faultPhase places the orders and injects the faults, printing progress,
// until both are done. It returns why it stopped early, if it did: a process
// ended by itself.
func (r *runner) faultPhase(ctx context.Context, faultOut io.Writer) (aborted string) {
	start := time.Now()
	r.faultStart = start
	defer func() { r.faultEnd = time.Now() }()
	phaseCtx, stopFaults := context.WithTimeout(ctx, r.c.FaultPhase)
	defer stopFaults()
	placeCtx, stopPlacing := context.WithCancel(ctx)
	defer stopPlacing()
	in := &injector{s: r.s, tl: r.tl, log: faultOut, start: start}
	if r.s.cluster != nil {
		in.nodes = &nodeConns{cluster: r.s.cluster}
		defer in.nodes.close()
	}
	var wg sync.WaitGroup
	placed, injected := make(chan struct{}), make(chan struct{})
	wg.Go(func() { defer close(placed); placeOrders(placeCtx, r.pl, r.plan.Orders, start) })
	wg.Go(func() { defer close(injected); in.run(phaseCtx, r.plan.Events) })
	defer wg.Wait()

	tick := time.NewTicker(r.c.ProgressEvery)
	defer tick.Stop()
	for placed != nil || injected != nil {
		select {
		case <-ctx.Done():
			return "interrupted"
		case <-r.s.sup.Failed():
			stopFaults()
			stopPlacing()
			f := r.s.sup.Failures()[0]
			fmt.Fprintf(r.out, "ABORT: %v\nlast lines of its log:\n%s\n", f, procs.TailFile(f.LogPath, 15))
			return f.Error()
		case <-placed:
			placed = nil
		case <-injected:
			injected = nil
		case <-tick.C:
			r.progress(ctx, start)
		}
	}
	return ""
}

// progress prints one line of the run's state.
func (r *runner) progress(ctx context.Context, start time.Time) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	delivered, dead := "?", "?"
	if n, err := r.delivered(ctx); err == nil {
		delivered = fmt.Sprint(n)
	}
	if str, err := r.js.Stream(ctx, jetstream.StreamDead); err == nil {
		if info, err := str.Info(ctx); err == nil {
			dead = fmt.Sprint(info.State.Msgs)
		}
	}
	r.tl.mu.Lock()
	kills, restarts, outages := len(r.tl.kills), len(r.tl.natsRestart), len(r.tl.outages)
	r.tl.mu.Unlock()
	fmt.Fprintf(r.out, "%6.0fs  accepted %d · delivered %s (all channels) · dead letters %s · kills %d · nats restarts %d · outages %d\n",
		time.Since(start).Seconds(), r.pl.Created.Load(), delivered, dead, kills, restarts, outages)
}

// drain waits until every accepted order's notification is in NOTIFY and
// acknowledged on every channel, the outbox is empty and no provider has
// accepted anything new for a second, or the drain timeout passes.
func (r *runner) drain(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.c.DrainTimeout)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var lastDelivered int64 = -1
	stable := 0
	why := "not checked yet"
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("not drained within %v: %s; %s", r.c.DrainTimeout, why, r.stuck(context.WithoutCancel(ctx)))
		case <-tick.C:
		}
		left := r.notDrained(ctx)
		if ctx.Err() != nil {
			continue // the deadline cut the check short: report the last answer
		}
		why = left
		n, err := r.delivered(ctx)
		if err != nil {
			if ctx.Err() == nil {
				why = "providers: " + err.Error()
			}
			continue
		}
		if n == lastDelivered {
			stable++
		} else {
			stable, lastDelivered = 0, n
		}
		if why == "" && stable >= 2 {
			return nil
		}
	}
}

// notDrained says what is still in the pipeline, or "" when nothing is.
func (r *runner) notDrained(ctx context.Context) string {
	qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	rows, err := system.ReadOutbox(qctx, r.s.dbPath)
	if err != nil {
		return err.Error()
	}
	if n := system.PendingRows(rows); n > 0 {
		return fmt.Sprintf("%d outbox rows pending", n)
	}
	want := uint64(r.pl.Created.Load())
	done, err := system.Drained(qctx, r.js, want)
	if err != nil {
		return err.Error()
	}
	if !done {
		bs, err := system.Backlogs(qctx, r.js)
		if err != nil {
			return err.Error()
		}
		return fmt.Sprintf("%d notifications accepted; consumers: %s", want, system.BacklogText(bs))
	}
	return ""
}

// stuck describes, for a run that did not drain, each channel's consumer
// with anything left (pending, unacknowledged, waiting pull requests, the
// pinned client, the leader) and what its workers say of themselves
// (/stats), so that a stall can be told from slowness.
func (r *runner) stuck(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var parts []string
	for _, ch := range system.Channels() {
		info, err := system.ChannelConsumerInfo(ctx, r.js, ch)
		if err != nil {
			parts = append(parts, fmt.Sprintf("%s: consumer unreadable (%v)", ch, err))
			continue
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			continue
		}
		d := fmt.Sprintf("%s: consumer %d pending, %d unacknowledged, %d pull requests waiting", ch, info.NumPending, info.NumAckPending, info.NumWaiting)
		for _, g := range info.PriorityGroups {
			if g.PinnedClientID != "" {
				d += fmt.Sprintf(", pinned %s since %s", g.PinnedClientID, g.PinnedTS.Format("15:04:05.000"))
			}
		}
		if info.Cluster != nil {
			d += ", leader " + orNone(info.Cluster.Leader)
		}
		for _, name := range r.s.workersOf(ch) {
			var st delivery.Stats
			if err := system.GetJSON(ctx, r.s.client, r.s.daemonURL(name)+"/stats", &st); err != nil {
				d += fmt.Sprintf("; %s: no stats (%v)", name, err)
				continue
			}
			d += fmt.Sprintf("; %s: consuming %v, in flight %d, held %d, parked %d, lanes %d, breaker %s, sent %d", name, st.Consuming, st.InFlight, st.Held, st.Parked, st.Lanes, st.CircuitBreaker, st.Sent)
		}
		parts = append(parts, d)
	}
	if len(parts) == 0 {
		return "every consumer empty now"
	}
	return strings.Join(parts, " | ")
}
