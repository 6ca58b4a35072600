package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/system"
)

// demo is one run.
type demo struct {
	cfg    *config
	out    io.Writer
	errOut io.Writer
	stack  *stack
	start  time.Time
}

// markerFile marks a directory as the demo's, so that it may be emptied.
const markerFile = ".tgnotify-demo"

// run starts the system, places the orders, waits for the notifications,
// checks the invariants, stops everything and prints the report. The report
// is nil when the run did not get as far as placing orders.
func (d *demo) run(ctx context.Context) (rep *report, err error) {
	d.start = time.Now()
	if err := prepareDir(d.cfg.dir); err != nil {
		return nil, err
	}
	defer func() {
		// Whatever happened, stop every process before returning.
		lines, failed := d.stack.stop()
		if rep != nil && rep.complete {
			rep.stopLines, rep.stopFailed = lines, failed
			rep.leftovers = d.stack.leftovers()
			rep.elapsed = time.Since(d.start)
			if d.cfg.keep {
				rep.printEnd(d.out) // the checks were printed before keeping
			} else {
				rep.print(d.out)
			}
			return
		}
		if len(lines) > 0 {
			fmt.Fprintln(d.out, "stopped:")
			for _, l := range lines {
				fmt.Fprintln(d.out, "  "+l)
			}
		}
		if err != nil && d.stack != nil {
			fmt.Fprintf(d.errOut, "process logs are in %s\n", d.rel(d.stack.sup.Dir()))
		}
	}()

	mode := "the Bot API emulator (Telegram's limits on)"
	if d.cfg.real != nil {
		mode = fmt.Sprintf("the REAL Telegram, chat %d", d.cfg.real.chatID)
	}
	fmt.Fprintf(d.out, "tgnotify demo: %d orders to %s; data and logs in %s\n", d.cfg.orders, mode, d.rel(d.cfg.dir))
	s, err := d.startStack(ctx)
	if err != nil {
		return nil, fmt.Errorf("starting the system: %w", err)
	}
	nc, err := nats.Connect(s.natsURL, nats.Name("demo"), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connecting to NATS: %w", err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		return nil, err
	}

	runID := "D" + strings.ToUpper(strconv.FormatInt(time.Now().Unix()%1_000_000, 36))
	orders := planOrders(d.cfg, runID)
	pl := newPlacer(s.shopURL)
	rep = &report{cfg: d.cfg, orders: orders, started: len(s.sup.Processes())}

	placeCtx, stopPlacing := context.WithCancel(ctx)
	defer stopPlacing()
	placed := make(chan struct{})
	placeStart := time.Now()
	fmt.Fprintf(d.out, "placing %d orders through POST %s/orders (%d concurrent clients, %.0f%% repeated)\n",
		len(orders), s.shopURL, d.cfg.concurrency, d.cfg.repeat*100)
	go func() {
		defer close(placed)
		pl.place(placeCtx, orders, d.cfg.concurrency)
	}()

	err = d.watch(ctx, js, s, pl, placed, rep)
	stopPlacing()
	<-placed
	rep.placeTook = rep.placedAt.Sub(placeStart)
	rep.placements = pl.Snapshot()
	rep.failures = s.sup.Failures()
	if ctx.Err() != nil {
		return rep, ctx.Err()
	}
	if err != nil {
		rep.fatal = err.Error()
	}
	if err := rep.collect(ctx, js, s); err != nil {
		rep.fatal = strings.TrimPrefix(rep.fatal+"; ", "; ") + err.Error()
	}
	rep.check()
	rep.complete = true
	if d.cfg.keep {
		rep.printChecks(d.out)
		d.keepRunning(ctx, s)
	}
	return rep, nil
}

// watch shows progress until every notification is accounted for, the
// timeout passes, a process dies or ctx ends.
func (d *demo) watch(ctx context.Context, js natsjs.JetStream, s *stack, pl *placer, placed <-chan struct{}, rep *report) error {
	smp := &sampler{stack: s, placer: pl, client: &http.Client{Timeout: 2 * time.Second}}
	disp := newDisplay(d.out, d.cfg.progress, len(rep.orders))
	defer disp.done()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var deadline <-chan time.Time
	var prev sample
	placing := true
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.sup.Failed():
			disp.done()
			return fmt.Errorf("a process died: %v", s.sup.Failures()[0])
		case <-placed:
			placed = nil
			placing = false
			rep.placedAt = time.Now()
			t := time.NewTimer(d.cfg.timeout)
			defer t.Stop()
			deadline = t.C
			continue
		case <-deadline:
			disp.done()
			return fmt.Errorf("not every notification was delivered or dead-lettered within -timeout %v", d.cfg.timeout)
		case <-tick.C:
		}
		cur := smp.take(ctx)
		disp.show(prev, cur)
		rep.samples = append(rep.samples, cur)
		prev = cur
		if placing || cur.delivered+cur.dead < cur.placed {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		done, err := system.Drained(dctx, js, uint64(pl.Created.Load()))
		cancel()
		if err != nil {
			continue // a transient read error: try again at the next tick
		}
		if done {
			return nil
		}
	}
}

// keepRunning leaves the system up until ctx ends, for exploring.
func (d *demo) keepRunning(ctx context.Context, s *stack) {
	fmt.Fprintf(d.out, `
Everything keeps running until Ctrl-C:
  export NATS_URL=%s
  bin/nats stream ls                                 # NOTIFY and NOTIFY_DEAD
  scripts/dead-letters.sh list                       # dead letters, see docs/RUNBOOK.md
  curl -s %s/stats                          # the worker
  curl -s %s/metrics | grep tgnotify_publisher_     # the publisher
`, s.natsURL, s.workerURL, s.publisherURL)
	if s.emulatorURL != "" {
		fmt.Fprintf(d.out, "  curl -s %s/emulator/stats                # the emulated Telegram\n", s.emulatorURL)
	}
	<-ctx.Done()
}

// prepareDir empties dir if it is the demo's (or empty) and marks it.
func prepareDir(dir string) error { return system.PrepareDir(dir, markerFile, "demo") }

// binPath returns the path of a binary.
func (d *demo) binPath(name string) string { return filepath.Join(d.cfg.bin, name) }

// rel shortens path relative to the working directory when it is below it.
func (d *demo) rel(path string) string {
	wd, err := os.Getwd()
	if err != nil {
		return path
	}
	if r, err := filepath.Rel(wd, path); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return path
}
