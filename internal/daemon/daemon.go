// Package daemon holds the wiring the daemons share: exit statuses, logging
// flags, and the HTTP endpoints for metrics, health and readiness, as
// oklog/run actors. Their configuration (flag > environment > YAML file) is
// internal/config.
package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// UsageError is a configuration mistake; the daemon exits with status 2.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// ExitCode maps an error returned by a daemon's main function to its exit
// status: 0 for nil or -h, 2 for a usage error or an invalid configuration
// (config.ErrInvalid), 1 otherwise.
func ExitCode(err error) int {
	var u UsageError
	switch {
	case err == nil || errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &u), errors.Is(err, config.ErrInvalid):
		return 2
	}
	return 1
}

// LogFlags registers -log-level and -log-format.
type LogFlags struct {
	Level, Format string
}

// Defaults of [LogFlags].
const (
	DefaultLogLevel  = "info"
	DefaultLogFormat = "text"
)

// Register adds the flags to cs, with their checks.
func (l *LogFlags) Register(cs *config.Set) {
	config.String(cs, &l.Level, "log-level", DefaultLogLevel, "log `level`: debug, info, warn or error").
		Check(config.OneOf("debug", "info", "warn", "error"))
	config.String(cs, &l.Format, "log-format", DefaultLogFormat, "log `format`: text or json").
		Check(config.OneOf("text", "json"))
}

// Logger builds the logger the flags describe.
func (l LogFlags) Logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.Level)); err != nil {
		return nil, UsageError{Err: fmt.Errorf("-log-level %q: want debug, info, warn or error", l.Level)}
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(l.Format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, UsageError{Err: fmt.Errorf("-log-format %q: want text or json", l.Format)}
}

// NewRegistry returns a metrics registry with the Go runtime and process
// collectors and extra (a daemon's [BuildInfo]).
func NewRegistry(extra ...prometheus.Collector) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reg.MustRegister(extra...)
	return reg
}

// Endpoints are the daemon's HTTP endpoints.
type Endpoints struct {
	// Registry is served on /metrics.
	Registry *prometheus.Registry
	// Ready is checked by /readyz; nil error means ready.
	Ready func() error
	// Extra maps more paths to handlers (/stats).
	Extra map[string]http.Handler
	// Pprof mounts net/http/pprof's profiles under /debug/pprof/ (the
	// -pprof flag, allowed on a loopback address only: see [HTTPFlags]).
	Pprof bool
}

// Handler returns the mux: /metrics, /healthz (the process answers),
// /readyz (503 with the reason when not ready), the extra paths, and with
// Pprof /debug/pprof/.
func (e Endpoints) Handler() http.Handler {
	mux := http.NewServeMux()
	if e.Pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(e.Registry, promhttp.HandlerOpts{Registry: e.Registry}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := e.Ready(); err != nil {
			WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "not ready", "reason": err.Error()})
			return
		}
		WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	for path, h := range e.Extra {
		mux.Handle("GET "+path, h)
	}
	return mux
}

// WriteJSON writes v as a JSON response.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// Listen opens the HTTP listener early, so a taken port is a clear start-up
// error naming the flag.
func Listen(flagName, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, UsageError{Err: fmt.Errorf("-%s %s: %w", flagName, addr, err)}
	}
	return ln, nil
}

// HTTPOption changes the server AddHTTP runs.
type HTTPOption func(*http.Server)

// LongResponses lifts the 10-second write timeout, for /debug/pprof/'s
// profiles and traces, which stream for ?seconds= (30 by default) and
// which net/http/pprof refuses when the server's write timeout is shorter.
// Use it only on a loopback listener.
func LongResponses() HTTPOption {
	return func(s *http.Server) { s.WriteTimeout = 0 }
}

// AddHTTP adds an actor serving h on ln until the group stops.
func AddHTTP(g *run.Group, ln net.Listener, h http.Handler, log *slog.Logger, opts ...HTTPOption) {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      10 * time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	for _, o := range opts {
		o(srv)
	}
	g.Add(func() error {
		log.Info("http endpoints listening", "addr", ln.Addr().String())
		if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serving http: %w", err)
		}
		return nil
	}, func(error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
}

// SignalHandler is run.SignalHandler for SIGINT and SIGTERM, except that it
// subscribes to the signals when it is called rather than when the group
// runs the actor. run.SignalHandler subscribes inside its goroutine, so a
// SIGTERM that arrived while the group was starting (its HTTP endpoints may
// already answer) met no handler and killed the process by the default
// action, without the graceful stop. Call it before anything that gives up
// another handler, and run the group soon after: until then the signals are
// held for it.
func SignalHandler(ctx context.Context) (execute func() error, interrupt func(error)) {
	ctx, cancel := context.WithCancel(ctx)
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	return func() error {
			defer signal.Stop(sigc)
			select {
			case sig := <-sigc:
				return &run.SignalError{Signal: sig}
			case <-ctx.Done():
				return ctx.Err()
			}
		}, func(error) {
			cancel()
		}
}

// SignalStopped reports whether the group ended because of a signal.
func SignalStopped(err error) bool { return errors.Is(err, run.ErrSignal) }

// NATSFlags registers the NATS connection flags of o on cs
// (jetstream.Options.RegisterFlags) and resolves where the connection's
// settings come from, like the NATS ecosystem's clients (the `nats` CLI):
//
//  1. the daemon's own settings: a flag, <PREFIX>_<FLAG>, the -config file
//     (in the order internal/config gives them);
//  2. the standard environment variables NATS_URL, NATS_CREDS, NATS_NKEY,
//     NATS_USER, NATS_PASSWORD, NATS_TOKEN, NATS_CA, NATS_CERT, NATS_KEY
//     (aliases of the flags, after <PREFIX>_*): a standard authentication
//     variable is ignored when the daemon's own settings choose an
//     authentication method, so an operator's exported NATS_USER never
//     contradicts a unit's -nats-creds;
//  3. the `nats` CLI context named by -nats-context (or NATS_CONTEXT):
//     its URL, authentication and TLS files fill what 1 and 2 leave unset;
//  4. the defaults.
//
// o.Origins records where the URL and the credentials came from, for the
// start-up log line jetstream.Connect writes. The password and token never
// show in logs or errors, and the options are validated with the rest of the
// settings.
func NATSFlags(cs *config.Set, o *jetstream.Options) {
	o.RegisterFlags(cs.FlagSet())
	for flag, env := range jetstream.StandardEnv() {
		cs.Alias(flag, env)
	}
	cs.Secret(jetstream.FlagPassword, jetstream.FlagToken)
	cs.Redact(jetstream.FlagURL, jetstream.RedactURL)
	cs.Check(func() error { return resolveNATS(cs, o) })
}

// natsField returns the field of o that flag sets.
func natsField(o *jetstream.Options, flag string) *string {
	switch flag {
	case jetstream.FlagURL:
		return &o.URLs
	case jetstream.FlagCreds:
		return &o.CredsFile
	case jetstream.FlagNKey:
		return &o.NKeyFile
	case jetstream.FlagUser:
		return &o.User
	case jetstream.FlagPassword:
		return &o.Password
	case jetstream.FlagToken:
		return &o.Token
	case jetstream.FlagTLSCA:
		return &o.TLSCA
	case jetstream.FlagTLSCert:
		return &o.TLSCert
	case jetstream.FlagTLSKey:
		return &o.TLSKey
	case jetstream.FlagContext:
		return &o.Context
	case jetstream.FlagInboxPrefix:
		return &o.InboxPrefix
	}
	panic("daemon: no NATS option for -" + flag)
}

// authFlags are the flags of the authentication methods, one of which a
// connection uses; the password goes with the user.
var authFlags = [...]string{jetstream.FlagCreds, jetstream.FlagNKey, jetstream.FlagUser, jetstream.FlagToken}

// resolveNATS applies NATSFlags' order of sources to o once cs is parsed.
func resolveNATS(cs *config.Set, o *jetstream.Options) error {
	std := jetstream.StandardEnv()
	standard := func(flag string) bool {
		or := cs.Origin(flag)
		return or.Source == config.FromEnv && or.Where == std[flag]
	}
	own := func(flag string) bool {
		return cs.Origin(flag).Source != config.FromDefault && !standard(flag) && *natsField(o, flag) != ""
	}
	var ignored []string
	if slices.ContainsFunc(authFlags[:], own) {
		for _, f := range authFlags {
			if standard(f) {
				*natsField(o, f) = ""
				ignored = append(ignored, std[f])
			}
		}
	}
	if o.User == "" && standard(jetstream.FlagPassword) && o.Password != "" {
		o.Password = ""
		ignored = append(ignored, std[jetstream.FlagPassword])
	}
	// What a context leaves alone is what came from somewhere else.
	explicit := func(flag string) bool {
		return cs.Origin(flag).Source != config.FromDefault && *natsField(o, flag) != ""
	}
	o.Origins = jetstream.Origins{}
	if o.Context != "" {
		c, err := jetstream.LoadContext(o.Context, cs.Getenv)
		if err != nil {
			return &config.Error{Flag: jetstream.FlagContext, Origin: cs.Origin(jetstream.FlagContext), Err: err}
		}
		o.ApplyContext(c, explicit)
	}
	describe := func(flag string) string {
		or := cs.Origin(flag)
		switch or.Source {
		case config.FromFlag:
			return "flag -" + flag
		case config.FromDefault:
			return "default"
		}
		return or.String()
	}
	if o.Origins.URL == "" {
		o.Origins.URL = describe(jetstream.FlagURL)
	}
	var methods []string
	for _, f := range authFlags {
		if explicit(f) {
			methods = append(methods, "-"+f+" ("+describe(f)+")")
			if o.Origins.Auth == "" {
				o.Origins.Auth = describe(f)
				if f == jetstream.FlagUser && explicit(jetstream.FlagPassword) && describe(jetstream.FlagPassword) != o.Origins.Auth {
					o.Origins.Auth += ", password from " + describe(jetstream.FlagPassword)
				}
			}
		}
	}
	if len(methods) > 1 {
		return &config.Error{Err: fmt.Errorf("give at most one NATS authentication method, not %s", strings.Join(methods, ", "))}
	}
	switch {
	case o.Origins.Auth != "":
	case strings.Contains(o.ServerURLs(), "@"):
		o.Origins.Auth = "the URL, from " + o.Origins.URL
	default:
		o.Origins.Auth = "none"
	}
	if len(ignored) > 0 {
		o.Origins.Auth += " (ignoring " + strings.Join(ignored, ", ") + ")"
	}
	if err := o.Validate(); err != nil {
		return &config.Error{Err: err}
	}
	return nil
}
