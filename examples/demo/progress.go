package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// telegramBotLimit is Telegram's bot-wide limit the worker keeps to, in
// messages per second, shown next to the measured rate.
const telegramBotLimit = 30

// sample is the system's state at one moment, read from the daemons' own
// endpoints.
type sample struct {
	at        time.Time
	placed    int64   // orders created (201 answers)
	backlog   float64 // outbox rows not yet in JetStream; -1 unknown
	delivered int64   // notifications delivered, over every channel (the workers' counts)
	// byChannel counts the deliveries of each channel.
	byChannel map[string]int64
	// telegram counts the messages Telegram (the emulator) accepted; the
	// worker's count with the real Telegram.
	telegram    int64
	dead        int64 // notifications no channel could deliver (dead events)
	rateLimited int64 // Telegram's 429 answers
	breaker     string
	errs        []string // endpoints that did not answer
}

// sampler reads samples.
type sampler struct {
	stack  *stack
	placer *placer
	js     natsjs.JetStream
	client *http.Client
}

func (s *sampler) take(ctx context.Context) sample {
	smp := sample{backlog: -1, byChannel: map[string]int64{}}
	// Telegram's count first, timed closely: the send rate is measured
	// between two samples.
	smp.at = time.Now()
	if s.stack.emulatorURL != "" {
		var es emulator.Stats
		if err := system.GetJSON(ctx, s.client, s.stack.emulatorURL+"/emulator/stats", &es); err != nil {
			smp.errs = append(smp.errs, "emulator: "+err.Error())
		} else {
			smp.telegram, smp.rateLimited = es.Delivered, es.RateLimited
		}
	}
	smp.placed = s.placer.Created.Load()
	for _, ch := range system.Channels() {
		u := s.stack.workerURLs[ch]
		if u == "" {
			continue
		}
		var ws delivery.Stats
		if err := system.GetJSON(ctx, s.client, u+"/stats", &ws); err != nil {
			smp.errs = append(smp.errs, ch+"-worker: "+err.Error())
			continue
		}
		smp.byChannel[ch] = ws.Sent
		smp.delivered += ws.Sent
		if ch == "telegram" {
			smp.breaker = ws.CircuitBreaker
			if s.stack.emulatorURL == "" {
				smp.telegram, smp.rateLimited = ws.Sent, ws.RateLimited
			}
		}
	}
	if n, err := system.SubjectCount(ctx, s.js, jetstream.StreamNotify, jetstream.SubjectDead); err != nil {
		smp.errs = append(smp.errs, "NOTIFY: "+err.Error())
	} else {
		smp.dead = int64(n)
	}
	if v, err := system.ScrapeGauge(ctx, s.client, s.stack.publisherURL+"/metrics", "tgnotify_publisher_backlog"); err != nil {
		smp.errs = append(smp.errs, "publisher: "+err.Error())
	} else {
		smp.backlog = v
	}
	return smp
}

// display writes the progress: one line rewritten in place on a terminal, a
// line per sample otherwise, or nothing.
type display struct {
	mu    sync.Mutex // show, note and done may be called from two goroutines
	w     io.Writer
	mode  string // tty, lines or off
	width func() int
	start time.Time
	total int
	wrote bool
}

func newDisplay(w io.Writer, mode string, total int) *display {
	f, isFile := w.(*os.File)
	if mode == "auto" {
		mode = "lines"
		if isFile && isTerminal(f) && os.Getenv("TERM") != "dumb" {
			mode = "tty"
		}
	}
	d := &display{w: w, mode: mode, start: time.Now(), total: total, width: func() int { return 0 }}
	if isFile {
		// Asked at every refresh: the terminal may be resized.
		d.width = func() int { return terminalWidth(f) }
	}
	return d
}

// isTerminal reports whether f is a character device (a terminal).
func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// show prints cur, with the send rate measured since prev.
func (d *display) show(prev, cur sample) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.mode == "off" {
		return
	}
	rate := 0.0
	if dt := cur.at.Sub(prev.at).Seconds(); dt > 0 && !prev.at.IsZero() {
		rate = float64(cur.telegram-prev.telegram) / dt
	}
	rateText := fmt.Sprintf("%4.1f/s", rate)
	if prev.at.IsZero() {
		rateText = "   -/s"
	}
	pending := max(0, cur.placed-cur.delivered-cur.dead)
	backlog := "?"
	if cur.backlog >= 0 {
		backlog = fmt.Sprintf("%.0f", cur.backlog)
	}
	breaker := cur.breaker
	if breaker == "" {
		breaker = "?"
	}
	line := fmt.Sprintf("%5.0fs  orders %d/%d  outbox %s  delivered %d (tg %d max %d mail %d sms %d)  pending %d  dead %d  Telegram %s of %d/s %s  429s %d  breaker %s",
		cur.at.Sub(d.start).Seconds(), cur.placed, d.total, backlog, cur.delivered,
		cur.byChannel["telegram"], cur.byChannel["max"], cur.byChannel["email"], cur.byChannel["sms"], pending, cur.dead,
		rateText, telegramBotLimit, bar(rate, telegramBotLimit), cur.rateLimited, breaker)
	if len(cur.errs) > 0 {
		line += "  (" + strings.Join(cur.errs, "; ") + ")"
	}
	if d.mode == "tty" {
		// One line, rewritten: cut to the terminal's width, or a wrapped
		// line would leave its first part behind at every refresh.
		if w := d.width(); w > 1 && utf8.RuneCountInString(line) >= w {
			line = string([]rune(line)[:w-2]) + "…"
		}
		fmt.Fprint(d.w, "\r\033[2K"+line)
		d.wrote = true
		return
	}
	fmt.Fprintln(d.w, line)
}

// note prints a line of its own between two progress lines (a fault the
// demo caused), whatever the mode.
func (d *display) note(line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endLine()
	fmt.Fprintln(d.w, line)
}

// done ends the rewritten line.
func (d *display) done() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.endLine()
}

func (d *display) endLine() {
	if d.wrote {
		fmt.Fprintln(d.w)
		d.wrote = false
	}
}

// bar draws rate against limit in ten cells.
func bar(rate, limit float64) string {
	n := min(10, max(0, int(rate/limit*10+0.5)))
	return "[" + strings.Repeat("#", n) + strings.Repeat(".", 10-n) + "]"
}
