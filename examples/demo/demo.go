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
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// demo is one run.
type demo struct {
	cfg    *config
	out    io.Writer
	errOut io.Writer
	stack  *stack
	start  time.Time
	// prev is the last progress sample shown.
	prev sample
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

	mode := "the Bot API emulator (Telegram's limits on), the MAX and SMS emulators and Mailpit"
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
	smp := &sampler{stack: s, placer: pl, js: js, client: &http.Client{Timeout: 2 * time.Second}}
	disp := newDisplay(d.out, d.cfg.progress, len(orders)+d.cfg.outageOrders)

	// The burst.
	placeCtx, stopPlacing := context.WithCancel(ctx)
	defer stopPlacing()
	placed := make(chan struct{})
	placeStart := time.Now()
	fmt.Fprintf(d.out, "placing %d orders through POST %s/orders (%d concurrent clients, %.0f%% repeated)\n",
		len(orders), s.shopURL, d.cfg.concurrency, d.cfg.repeat*100)
	rep.burstStart = placeStart
	go func() {
		defer close(placed)
		pl.place(placeCtx, orders, d.cfg.concurrency)
	}()
	// On a cluster, its faults during the burst.
	faulted := make(chan *clusterLog, 1)
	if s.cluster != nil {
		go func() { faulted <- d.clusterFaults(ctx, s, nc, placeStart, disp.note) }()
	}
	err = d.watch(ctx, js, s, smp, disp, placed, rep)
	stopPlacing()
	<-placed
	rep.placeTook = rep.placedAt.Sub(placeStart)
	if s.cluster != nil {
		rep.cluster = <-faulted
	}

	// The outage: orders with a phone while Telegram answers 5xx.
	if err == nil && d.cfg.outageOrders > 0 {
		err = d.outage(ctx, js, s, smp, disp, pl, rep, runID)
	}
	disp.done()
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
	if rep.cluster != nil {
		rep.cluster.collect(ctx, nc)
	}
	rep.check()
	rep.complete = true
	if d.cfg.keep {
		rep.printChecks(d.out)
		d.keepRunning(ctx, s, rep)
	}
	return rep, nil
}

// outageLimit ends the Telegram outage by itself should the demo not end
// it (the emulator's own timer).
const outageLimit = 2 * time.Minute

// outage takes Telegram down (5xx on every request), places the outage
// orders — each with a Telegram chat and a phone — waits until every one is
// delivered (by SMS, once fallback_after passed) and brings Telegram back.
func (d *demo) outage(ctx context.Context, js natsjs.JetStream, s *stack, smp *sampler, disp *display, pl *placer, rep *report, runID string) error {
	orders := planOutageOrders(d.cfg, runID)
	ctl := &http.Client{Timeout: 5 * time.Second}
	o := emulator.Outage{Mode: emulator.Fault5xx, Duration: outageLimit}
	if err := system.SendJSON(ctx, ctl, http.MethodPost, s.emulatorURL+"/emulator/outage", o); err != nil {
		return fmt.Errorf("starting the Telegram outage: %w", err)
	}
	rep.outageStart = time.Now()
	disp.done()
	fmt.Fprintf(d.out, "Telegram is DOWN (every request answered 502); placing %d orders whose customers have a phone: after %s on Telegram (fallback_after) they go by SMS\n",
		len(orders), demoFallbackAfter)
	placed := make(chan struct{})
	go func() {
		defer close(placed)
		pl.place(ctx, orders, d.cfg.concurrency)
	}()
	err := d.watch(ctx, js, s, smp, disp, placed, rep)
	<-placed
	if stopErr := system.SendJSON(context.WithoutCancel(ctx), ctl, http.MethodDelete, s.emulatorURL+"/emulator/outage", nil); stopErr != nil && err == nil {
		err = fmt.Errorf("ending the Telegram outage: %w", stopErr)
	}
	rep.outageEnd = time.Now()
	rep.orders = append(rep.orders, orders...)
	disp.done()
	fmt.Fprintf(d.out, "Telegram is back after %v\n", rep.outageEnd.Sub(rep.outageStart).Round(100*time.Millisecond))
	return err
}

// watch shows progress until every notification placed so far is
// accounted for (delivered by a channel, or dead on every channel of its
// route) and no channel has anything left in flight, the timeout passes, a
// process dies or ctx ends. The timeout counts from the end of placing.
func (d *demo) watch(ctx context.Context, js natsjs.JetStream, s *stack, smp *sampler, disp *display, placed <-chan struct{}, rep *report) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var deadline <-chan time.Time
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
			if rep.placedAt.IsZero() {
				rep.placedAt = time.Now()
			}
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
		disp.show(d.prev, cur)
		rep.samples = append(rep.samples, cur)
		d.prev = cur
		if placing || cur.delivered+cur.dead < cur.placed {
			continue
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		done, err := system.Drained(dctx, js, uint64(cur.placed))
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
func (d *demo) keepRunning(ctx context.Context, s *stack, rep *report) {
	example := ""
	for _, o := range rep.orders {
		if o.kind == kindBlocked {
			example = o.order.ID
			break
		}
	}
	if example == "" && len(rep.orders) > 0 {
		example = rep.orders[0].order.ID
	}
	fmt.Fprintf(d.out, `
Everything keeps running until Ctrl-C:
  Mailpit (the emails)     %s/
  export NATS_URL=%s
  bin/nats stream ls                                 # NOTIFY and NOTIFY_DEAD
  scripts/dead-letters.sh list                       # dead letters, see docs/RUNBOOK.md
  curl -s %s/orders/%s            # the shop's view of an order's notification
  curl -s %s/stats                          # the telegram worker (max, email, sms: below)
  curl -s %s/metrics | grep tgnotify_publisher_     # the publisher
`, s.mailpitURL, s.natsURL, s.shopURL, example, s.workerURLs["telegram"], s.publisherURL)
	for _, ch := range system.Channels()[1:] {
		fmt.Fprintf(d.out, "  curl -s %s/stats                          # the %s worker\n", s.workerURLs[ch], ch)
	}
	if s.emulatorURL != "" {
		fmt.Fprintf(d.out, "  curl -s %s/emulator/messages             # what the emulated Telegram received\n", s.emulatorURL)
	}
	fmt.Fprintf(d.out, "  curl -s %s/emulator/messages             # what the emulated MAX received\n", s.maxURL)
	fmt.Fprintf(d.out, "  curl -s %s/emulator/messages             # the SMS the emulated Twilio created\n", s.smsURL)
	fmt.Fprintf(d.out, "  curl -s '%s/api/v1/messages?limit=10'   # Mailpit's API (SMTP on %s)\n", s.mailpitURL, s.smtpAddr)
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
