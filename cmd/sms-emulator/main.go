// Command sms-emulator serves a stand-in for Twilio's Programmable Messaging
// API (pkg/twilio/emulator) for tests, demos, benchmarks and chaos runs.
// See docs/CHANNELS.md (SMS).
//
// Every flag can also be set through the environment with the
// SMS_EMULATOR_ prefix (-request-rate is SMS_EMULATOR_REQUEST_RATE); a flag
// on the command line wins.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/peterbourgon/ff/v3"

	"github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

// Test credentials, not secrets: the emulator accepts exactly the ones it
// is given, and these are the ones tests and the demo use unless told
// otherwise.
const (
	defaultAccountSID = "AC00000000000000000000000000000000"
	defaultAuthToken  = "emulator-auth-token"
)

// exitUsage is the exit status for bad flags or environment values.
const exitUsage = 2

func main() {
	os.Exit(realMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// realMain runs the emulator until a signal or ctx ends it and returns the
// exit status: 0 after a clean stop, 1 after a failure, 2 for bad flags.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cfg, addr, logLevel, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "sms-emulator: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: logLevel}))
	cfg.Logger = logger
	if err := serve(ctx, cfg, addr, stdout, logger); err != nil {
		logger.Error("sms-emulator stopped", "error", err)
		return 1
	}
	return 0
}

// serve listens on addr and serves the emulator until ctx ends or a signal
// arrives, then shuts down gracefully.
func serve(ctx context.Context, cfg emulator.Config, addr string, stdout io.Writer, logger *slog.Logger) error {
	emu, err := emulator.New(cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", addr, err)
	}
	srv := &http.Server{Handler: emu, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(stdout, "sms-emulator listening on http://%s\n", ln.Addr())
	logger.Info("listening", "addr", ln.Addr().String(), "limits", cfg.Limits.Enabled)

	var g run.Group
	g.Add(func() error {
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, func(error) {
		// Free blackholed requests first, or Shutdown would wait for them.
		emu.Close()
		shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			logger.Warn("graceful shutdown incomplete", "error", err)
			_ = srv.Close()
		}
	})
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	err = g.Run()
	if errors.Is(err, run.ErrSignal) || errors.Is(err, context.Canceled) {
		logger.Info("stopped", "reason", err.Error())
		return nil
	}
	return err
}

// parseFlags reads the command line and the SMS_EMULATOR_ environment.
func parseFlags(args []string, stderr io.Writer) (emulator.Config, string, slog.Level, error) {
	fs := flag.NewFlagSet("sms-emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: sms-emulator [flags]\n\n"+
			"Serves a stand-in for Twilio's Messages API at /2010-04-01/Accounts/{AccountSid}/Messages.json\n"+
			"(and the Account resource) with control endpoints under /emulator/ (see docs/CHANNELS.md (SMS)).\n"+
			"Every flag can also be set with an SMS_EMULATOR_ environment variable (-request-rate:\n"+
			"SMS_EMULATOR_REQUEST_RATE); a flag on the command line wins.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	def := emulator.DefaultLimits()
	var (
		cfg          emulator.Config
		senders      list
		invalid      numbers
		unsubscribed numbers
		notMobile    numbers
		unverified   numbers
		unreachable  numbers
		forbidden    numbers
		regions      list
		faultMode    string
		logLevel     slog.Level
		addr         = fs.String("http", "127.0.0.1:8082", "listen `address` for the API and the /emulator/ control endpoints")
		accountSID   = fs.String("account-sid", defaultAccountSID, "the Account `SID` the emulator serves (AC and 32 hex digits; a test value)")
		authToken    = fs.String("auth-token", defaultAuthToken, "the auth `token` it accepts (a test value; other credentials get 401 / 20003)")
		friendlyName = fs.String("friendly-name", "tgnotify emulator", "the account's friendly_name")
		limits       = fs.Bool("limits", true, "enforce the concurrency cap, the request rate and the sender queues")
		concurrent   = fs.Int("max-concurrent", def.MaxConcurrent, "API requests in progress at once before 429 / 20429")
		requestRate  = fs.Float64("request-rate", def.RequestRate, "API requests accepted per second before 429 / 20429")
		requestBurst = fs.Int("request-burst", def.RequestBurst, "API requests accepted at once")
		segmentRate  = fs.Float64("segments-per-second", def.SegmentsPerSecond, "segments each sender's queue releases per second (1: long code, 3: toll-free, 100: short code)")
		queueWindow  = fs.Duration("queue-window", def.QueueWindow, "how much a sender's queue holds, as time to drain it, before 400 / 21611")
		noRetryAfter = fs.Bool("no-retry-after", false, "send 429 without a Retry-After header (Twilio documents none)")
		latency      = fs.Duration("latency", 0, "delay of every API answer")
		jitter       = fs.Duration("latency-jitter", 0, "uniform jitter (±) around -latency")
		faultProb    = fs.Float64("fault-probability", 1, "fraction of requests hit by -fault, in (0, 1]")
		faultDur     = fs.Duration("fault-duration", 0, "end -fault after this long (0: until DELETE /emulator/outage)")
		faultStatus  = fs.Int("fault-status", 0, "HTTP status of -fault 5xx (default 500) or html5xx (default 502)")
		faultDelay   = fs.Duration("fault-delay", 5*time.Second, "extra latency of -fault slow")
		seed         = fs.Uint64("seed", 1, "seed for latency jitter and fault probability")
		maxMessages  = fs.Int("max-messages", emulator.DefaultMaxMessages, "created messages kept for /emulator/messages")
	)
	fs.Var(&senders, "senders", "comma-separated From `numbers` the account owns (others get 400 / 21606; empty: any)")
	fs.Var(&invalid, "invalid", "comma-separated `numbers` answered 400 / 21211 (invalid number)")
	fs.Var(&unsubscribed, "unsubscribed", "comma-separated `numbers` answered 400 / 21610 (replied STOP)")
	fs.Var(&notMobile, "not-mobile", "comma-separated `numbers` answered 400 / 21614 (not a mobile number)")
	fs.Var(&unverified, "unverified", "comma-separated `numbers` answered 400 / 21608 (not verified, trial account)")
	fs.Var(&unreachable, "unreachable", "comma-separated `numbers` answered 400 / 21612 (not reachable via SMS)")
	fs.Var(&forbidden, "forbidden", "comma-separated `numbers` answered 403 / 20403")
	fs.Var(&regions, "blocked-regions", "comma-separated E.164 `prefixes` (+98) answered 400 / 21408 (region not permitted)")
	fs.StringVar(&faultMode, "fault", "", "start with an outage: `mode` 5xx, html5xx, drop, slow, blackhole or deliver-drop")
	fs.TextVar(&logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")

	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("SMS_EMULATOR")); err != nil {
		return cfg, "", 0, err
	}
	if fs.NArg() > 0 {
		return cfg, "", 0, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	states := map[string]emulator.NumberState{}
	for _, s := range []struct {
		list  numbers
		state emulator.NumberState
	}{
		{invalid, emulator.NumberInvalid}, {unsubscribed, emulator.NumberUnsubscribed}, {notMobile, emulator.NumberNotMobile},
		{unverified, emulator.NumberUnverified}, {unreachable, emulator.NumberUnreachable}, {forbidden, emulator.NumberForbidden},
	} {
		for _, n := range s.list {
			states[n] = s.state
		}
	}
	cfg = emulator.Config{
		AccountSID:     *accountSID,
		AuthToken:      *authToken,
		FriendlyName:   *friendlyName,
		Senders:        senders,
		Numbers:        states,
		BlockedRegions: regions,
		Latency:        *latency,
		LatencyJitter:  *jitter,
		Seed:           *seed,
		MaxMessages:    *maxMessages,
		Limits: emulator.Limits{
			Enabled:           *limits,
			MaxConcurrent:     *concurrent,
			RequestRate:       *requestRate,
			RequestBurst:      *requestBurst,
			SegmentsPerSecond: *segmentRate,
			QueueWindow:       *queueWindow,
			NoRetryAfter:      *noRetryAfter,
		},
	}
	// Check each numeric flag here so the error names the flag, not a
	// Config field.
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"max-concurrent", *concurrent > 0},
		{"request-rate", *requestRate > 0},
		{"request-burst", *requestBurst > 0},
		{"segments-per-second", *segmentRate > 0},
		{"queue-window", *queueWindow > 0},
		{"latency", *latency >= 0},
		{"latency-jitter", *jitter >= 0},
		{"fault-probability", *faultProb > 0 && *faultProb <= 1},
		{"fault-duration", *faultDur >= 0},
		{"fault-status", *faultStatus == 0 || (*faultStatus >= 500 && *faultStatus <= 599)},
		{"fault-delay", *faultDelay >= 0},
		{"max-messages", *maxMessages > 0},
	} {
		if !c.ok {
			f := fs.Lookup(c.name)
			return cfg, "", 0, fmt.Errorf("invalid value %q for flag -%s: out of range", f.Value.String(), c.name)
		}
	}
	if faultMode != "" {
		mode, err := emulator.ParseFaultMode(faultMode)
		if err != nil {
			return cfg, "", 0, fmt.Errorf("invalid value for flag -fault: %w", err)
		}
		cfg.Outage = &emulator.Outage{Mode: mode, Probability: *faultProb, Duration: *faultDur, Status: *faultStatus, Delay: *faultDelay}
	}
	// What remains for New to refuse are the credentials and the senders.
	if _, err := emulator.New(cfg); err != nil {
		return cfg, "", 0, fmt.Errorf("invalid value for flag -account-sid, -auth-token or -senders: %w", err)
	}
	return cfg, *addr, logLevel, nil
}

// e164 is the shape of a phone number.
var e164 = regexp.MustCompile(`^\+[1-9][0-9]{7,14}$`)

// numbers is a comma-separated list of E.164 numbers.
type numbers []string

func (l *numbers) String() string { return strings.Join(*l, ",") }

func (l *numbers) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		if !e164.MatchString(part) {
			return fmt.Errorf("%q is not an E.164 number such as +15005550006", part)
		}
		*l = append(*l, part)
	}
	return nil
}

// list is a comma-separated list of strings.
type list []string

func (l *list) String() string { return strings.Join(*l, ",") }

func (l *list) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*l = append(*l, part)
		}
	}
	return nil
}
