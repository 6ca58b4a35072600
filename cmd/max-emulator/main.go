// Command max-emulator serves a stand-in for the MAX Bot API for tests,
// demos and chaos runs. See docs/CHANNELS.md (MAX).
//
// Every flag can also be set through the environment with the MAX_EMULATOR_
// prefix (-rate is MAX_EMULATOR_RATE); a flag on the command line wins.
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
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/peterbourgon/ff/v3"

	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

// defaultToken is a test token, not a secret: the emulator accepts exactly
// the token it is given, and this is the one tests and the demo use unless
// told otherwise.
const defaultToken = "max-emulator-token"

// exitUsage is the exit status for bad flags or environment values.
const exitUsage = 2

func main() {
	os.Exit(realMain(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
}

// settings are what the command line says besides the emulator's Config.
type settings struct {
	addr            string
	tlsCert, tlsKey string
	logLevel        slog.Level
	cfg             emulator.Config
}

// realMain runs the emulator until a signal or ctx ends it and returns the
// exit status: 0 after a clean stop, 1 after a failure, 2 for bad flags.
func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	s, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "max-emulator: %v\n", err)
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: s.logLevel}))
	s.cfg.Logger = logger
	if err := serve(ctx, s, stdout, logger); err != nil {
		logger.Error("max-emulator stopped", "error", err)
		return 1
	}
	return 0
}

// serve listens on the address and serves the emulator until ctx ends or a
// signal arrives, then shuts down gracefully.
func serve(ctx context.Context, s settings, stdout io.Writer, logger *slog.Logger) error {
	emu, err := emulator.New(s.cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", s.addr, err)
	}
	srv := &http.Server{Handler: emu, ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	if s.tlsCert != "" {
		scheme = "https"
	}
	fmt.Fprintf(stdout, "max-emulator listening on %s://%s\n", scheme, ln.Addr())
	logger.Info("listening", "addr", ln.Addr().String(), "tls", s.tlsCert != "", "limits", s.cfg.Limits.Enabled)

	var g run.Group
	g.Add(func() error {
		var err error
		if s.tlsCert != "" {
			err = srv.ServeTLS(ln, s.tlsCert, s.tlsKey)
		} else {
			err = srv.Serve(ln)
		}
		if !errors.Is(err, http.ErrServerClosed) {
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

// parseFlags reads the command line and the MAX_EMULATOR_ environment.
func parseFlags(args []string, stderr io.Writer) (settings, error) {
	fs := flag.NewFlagSet("max-emulator", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: max-emulator [flags]\n\n"+
			"Serves a stand-in for the MAX Bot API (POST /messages, GET /me) and control\n"+
			"endpoints under /emulator/ (see docs/CHANNELS.md (MAX)). Every flag can also be\n"+
			"set with a MAX_EMULATOR_ environment variable (-rate: MAX_EMULATOR_RATE); a\n"+
			"flag on the command line wins. Recipients are u<user id> or c<chat id>.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	var (
		s           settings
		blocked     recipients
		denied      recipients
		notFound    recipients
		forbidden   recipients
		faultMode   string
		token       = fs.String("token", defaultToken, "the bot `token` the emulator accepts in the Authorization header (a test token; any other gets 401)")
		limits      = fs.Bool("limits", true, "enforce MAX's rate limit")
		rate        = fs.Float64("rate", emulator.DefaultRate, "the bot's limit in requests per second")
		burst       = fs.Int("burst", emulator.DefaultBurst, "how many requests the bot may make at once")
		retryHeader = fs.Bool("retry-after-header", true, "send a Retry-After header with every 429 (MAX does not document one)")
		latency     = fs.Duration("latency", 0, "delay of every API answer")
		jitter      = fs.Duration("latency-jitter", 0, "uniform jitter (±) around -latency")
		faultProb   = fs.Float64("fault-probability", 1, "fraction of requests hit by -fault, in (0, 1]")
		faultDur    = fs.Duration("fault-duration", 0, "end -fault after this long (0: until DELETE /emulator/outage)")
		faultStatus = fs.Int("fault-status", 0, "HTTP status of -fault 5xx (default 502) or json5xx (default 500)")
		faultDelay  = fs.Duration("fault-delay", 5*time.Second, "extra latency of -fault slow")
		seed        = fs.Uint64("seed", 1, "seed for latency jitter and fault probability")
		maxMessages = fs.Int("max-messages", emulator.DefaultMaxMessages, "delivered messages kept for /emulator/messages")
		botID       = fs.Int64("bot-id", emulator.DefaultBotID, "the bot's user id in GET /me")
		botName     = fs.String("bot-name", emulator.DefaultBotName, "the bot's name in GET /me")
		botUsername = fs.String("bot-username", emulator.DefaultBotUsername, "the bot's username in GET /me")
	)
	fs.StringVar(&s.addr, "http", "127.0.0.1:8082", "listen `address` for the API and the /emulator/ control endpoints")
	fs.StringVar(&s.tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate `file` (with -tls-key)")
	fs.StringVar(&s.tlsKey, "tls-key", "", "the PEM private key `file` of -tls-cert")
	fs.Var(&blocked, "blocked", "comma-separated `recipients` that stopped the bot (403 chat.denied, error.dialog.suspended)")
	fs.Var(&denied, "denied", "comma-separated `recipients` the bot has no access to (403 chat.denied)")
	fs.Var(&notFound, "not-found", "comma-separated `recipients` that do not exist (404 dialog.not.found / chat.not.found)")
	fs.Var(&forbidden, "forbidden", "comma-separated `recipients` answered with an unrecognised 403 (access.denied)")
	fs.StringVar(&faultMode, "fault", "", "start with an outage: `mode` 5xx, json5xx, drop, slow, blackhole or deliver-drop")
	fs.TextVar(&s.logLevel, "log-level", slog.LevelInfo, "log `level`: debug, info, warn or error")

	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix("MAX_EMULATOR")); err != nil {
		return s, err
	}
	if fs.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	// Check each setting here so the error names the flag, not a Config
	// field.
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"token", emulator.ValidToken(*token)},
		{"rate", *rate > 0},
		{"burst", *burst > 0},
		{"latency", *latency >= 0},
		{"latency-jitter", *jitter >= 0},
		{"fault-probability", *faultProb > 0 && *faultProb <= 1},
		{"fault-duration", *faultDur >= 0},
		{"fault-status", *faultStatus == 0 || (*faultStatus >= 500 && *faultStatus <= 599)},
		{"fault-delay", *faultDelay >= 0},
		{"max-messages", *maxMessages > 0},
		{"bot-id", *botID > 0},
		{"tls-key", (s.tlsCert == "") == (s.tlsKey == "")},
	} {
		if !c.ok {
			value := fs.Lookup(c.name).Value.String()
			if c.name == "token" {
				value = "(not shown)"
			}
			return s, fmt.Errorf("invalid value %s for flag -%s: out of range (the token is 1..512 characters of visible ASCII; -tls-cert and -tls-key go together)", value, c.name)
		}
	}
	states := map[emulator.Recipient]emulator.RecipientState{}
	for _, set := range []struct {
		list  recipients
		state emulator.RecipientState
	}{{blocked, emulator.StateBlocked}, {denied, emulator.StateDenied}, {notFound, emulator.StateNotFound}, {forbidden, emulator.StateForbidden}} {
		for _, r := range set.list {
			states[r] = set.state
		}
	}
	s.cfg = emulator.Config{
		Token:          *token,
		BotID:          *botID,
		BotName:        *botName,
		BotUsername:    *botUsername,
		Limits:         emulator.Limits{Enabled: *limits, Rate: *rate, Burst: *burst},
		OmitRetryAfter: !*retryHeader,
		Latency:        *latency,
		LatencyJitter:  *jitter,
		States:         states,
		Seed:           *seed,
		MaxMessages:    *maxMessages,
	}
	if faultMode != "" {
		mode, err := emulator.ParseFaultMode(faultMode)
		if err != nil {
			return s, fmt.Errorf("invalid value for flag -fault: %w", err)
		}
		s.cfg.Outage = &emulator.Outage{Mode: mode, Probability: *faultProb, Duration: *faultDur, Status: *faultStatus, Delay: *faultDelay}
	}
	if _, err := emulator.New(s.cfg); err != nil {
		return s, err
	}
	return s, nil
}

// recipients is a comma-separated list of u<user id> and c<chat id>.
type recipients []emulator.Recipient

func (l *recipients) String() string {
	parts := make([]string, len(*l))
	for i, r := range *l {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

func (l *recipients) Set(s string) error {
	for part := range strings.SplitSeq(s, ",") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		r, err := emulator.ParseRecipient(part)
		if err != nil {
			return err
		}
		*l = append(*l, r)
	}
	return nil
}
