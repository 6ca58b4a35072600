package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// JetStreamFlags are a daemon's flags about the JetStream objects it uses:
// where their declaration is, and whether the daemon may create the ones
// that are missing. The declaration has one owner, `tgnotify provision`;
// a daemon never updates an object.
type JetStreamFlags struct {
	// ConfigFile is the declaration file (-jetstream-config), the one
	// `tgnotify provision -config` applies; empty means the built-in
	// defaults.
	ConfigFile string
	// Provision lets the daemon create missing objects at start
	// (-provision, default true).
	Provision bool
	// Settings is the declaration, read while the flags are parsed.
	Settings jetstream.Settings
}

// Register adds -jetstream-config and -provision to cs. Reading and
// checking the declaration file is one of cs's checks, so a bad file stops
// the daemon at start. The daemon's former flags named in moved are
// declared removed, pointing to the declaration.
func (f *JetStreamFlags) Register(cs *config.Set, moved ...string) {
	config.String(cs, &f.ConfigFile, "jetstream-config", "",
		"the JetStream declaration: a YAML `file` of the subject prefix and the stream, consumer and bucket settings (configs/jetstream.yaml), the one `tgnotify provision -config` applies; its subject-prefix names every stream, subject and bucket the daemon uses (default: the built-in defaults, prefix notify)")
	config.Bool(cs, &f.Provision, "provision", true,
		"create the JetStream objects that are missing at start; false: wait until `tgnotify provision` has created them (for accounts that may not create streams). Existing objects are never changed")
	for _, name := range moved {
		cs.Removed(name, fmt.Sprintf("%s is part of the JetStream declaration now: set it in the file given by -jetstream-config (see configs/jetstream.yaml) and apply it with `tgnotify provision`", name))
	}
	cs.Check(func() error {
		s, err := LoadDeclaration(f.ConfigFile)
		f.Settings = s
		return err
	})
}

// Source says where the declaration comes from, for logs.
func (f JetStreamFlags) Source() string {
	if f.ConfigFile == "" {
		return "built-in defaults"
	}
	return f.ConfigFile
}

// LoadDeclaration reads the JetStream declaration from the YAML file at path
// (keys are the flags of `tgnotify provision`); settings the file does not
// name keep their defaults, and an empty path means the defaults. Every
// mistake is an error matching config.ErrInvalid.
func LoadDeclaration(path string) (jetstream.Settings, error) {
	s := jetstream.DefaultSettings()
	if path == "" {
		return s, nil
	}
	cs := config.New("the JetStream declaration", config.Options{})
	s.RegisterFlags(cs.FlagSet())
	if err := cs.LoadFile(path); err != nil {
		return s, err
	}
	if err := s.Validate(); err != nil {
		return s, &config.Error{Flag: "jetstream-config", Value: path, Err: err}
	}
	return s, nil
}

// MissingError reports declared objects that do not exist while the daemon
// may not create them (-provision=false).
type MissingError struct {
	// Objects are the missing objects.
	Objects []jetstream.Object
}

// Error names the objects and what creates them.
func (e *MissingError) Error() string {
	names := make([]string, len(e.Objects))
	for i, o := range e.Objects {
		names[i] = o.String()
	}
	return "missing " + strings.Join(names, ", ") + ": not created because -provision=false; waiting until `tgnotify provision` creates them"
}

// Objects makes sure the JetStream objects a daemon needs exist, and
// reports how they differ from the declaration: a warning per field and the
// gauge tgnotify_jetstream_drift{kind,name,field}. It keeps the live
// values: a drifted field is the operator's or `tgnotify provision`'s to
// change.
type Objects struct {
	decl      jetstream.Declaration
	provision bool
	source    string
	log       *slog.Logger
	drift     *prometheus.GaugeVec
}

// NewObjects returns the keeper of decl for a daemon with flags f, with its
// gauge registered on reg.
func NewObjects(decl jetstream.Declaration, f JetStreamFlags, log *slog.Logger, reg prometheus.Registerer) (*Objects, error) {
	o := &Objects{
		decl:      decl,
		provision: f.Provision,
		source:    f.Source(),
		log:       log.With("component", "jetstream"),
		drift: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tgnotify_jetstream_drift",
			Help: "1 for each field of a JetStream object whose live value differs from the declaration (the live value is kept; tgnotify provision applies the declaration).",
		}, []string{"kind", "name", "field"}),
	}
	if err := reg.Register(o.drift); err != nil {
		return nil, fmt.Errorf("registering the drift gauge: %w", err)
	}
	return o, nil
}

// Prepare makes one attempt: it creates what is missing (with -provision)
// or fails with a [*MissingError] (without), then reports the drift. A
// conflict is a *jetstream.ConflictError.
func (o *Objects) Prepare(ctx context.Context, js natsjs.JetStream) error {
	var plan *jetstream.Plan
	var err error
	if o.provision {
		plan, err = jetstream.Ensure(ctx, js, o.decl)
	} else {
		plan, err = jetstream.Inspect(ctx, js, o.decl)
		if err == nil && len(plan.Missing) > 0 {
			return &MissingError{Objects: plan.Missing}
		}
	}
	if err != nil {
		return err
	}
	for _, m := range plan.Missing {
		o.log.Info("created JetStream object", "object", m.String(), "declaration", o.source)
	}
	o.drift.Reset()
	for _, d := range plan.Drift {
		o.drift.WithLabelValues(d.Kind, d.Name, d.Field).Set(1)
		o.log.Warn("JetStream configuration drift: keeping the live value; `tgnotify provision` applies the declaration",
			"kind", d.Kind, "name", d.Name, "field", d.Field, "live", d.Live, "declared", d.Declared, "declaration", o.source)
	}
	return nil
}

// Wait calls Prepare until it succeeds, fails with a conflict, or ctx ends,
// retrying while NATS is unreachable or the objects are missing, with a
// warning at once and every 30 seconds after.
//
// The objects an attempt found are not looked up again by the next one
// (foundObjects): an attempt that runs out of time in an election leaves
// only the objects behind it to the next.
func (o *Objects) Wait(ctx context.Context, js natsjs.JetStream) error {
	reconnects := func() uint64 { return js.Conn().Stats().Reconnects }
	found := newFoundObjects(js)
	return o.retry(ctx, reconnects, func(ctx context.Context) error {
		err := o.Prepare(ctx, found)
		// An API request the user may not make only times out: say which
		// subject the server refused.
		return jetstream.Denied(js.Conn(), err)
	})
}

// Bounds of one attempt of Wait. In a cluster a request to a stream whose
// leader has just died goes unanswered until it times out, while the
// election that replaces the leader takes a few seconds: a short attempt
// retried soon starts a daemon seconds after the election, where a long
// one waits out its full bound. An attempt that ran out of time gets twice
// as long the next time, up to maxAttemptTimeout: since the next attempt
// does not repeat the lookups that succeeded (Wait), a machine too slow
// for the short bound still gets through as long as one lookup fits in
// the long one. maxAttemptTimeout was 16 s, when each attempt started
// over: the long cluster chaos run on 631a2fd saw a worker wait 16 s on a
// request lost in an election that had ended seconds before.
const (
	firstAttemptTimeout = 2 * time.Second
	maxAttemptTimeout   = 4 * time.Second
)

// errReconnected cuts an attempt short: the NATS connection it sent its
// requests on was replaced, and their answers will not come.
var errReconnected = errors.New("the NATS connection was re-established during the attempt")

// reconnectPoll is how often an attempt looks whether the connection was
// re-established.
const reconnectPoll = 100 * time.Millisecond

// retry runs attempt until it succeeds, fails with a conflict, or ctx ends.
// An attempt is cut short once the connection has been re-established
// since it began (reconnects counts the reconnects), and tried again at
// once with the same bound: a request sent before a node died waited out
// its whole bound, up to maxAttemptTimeout, after the client was connected
// to another node (the long chaos run on the cluster: a worker started in
// a minute of node faults was still waiting 8 s after its reconnect).
func (o *Objects) retry(ctx context.Context, reconnects func() uint64, attempt func(context.Context) error) error {
	const baseDelay, maxDelay, warnEvery = 200 * time.Millisecond, 2 * time.Second, 30 * time.Second
	delay := baseDelay
	timeout := firstAttemptTimeout
	var warned time.Time
	waited := false
	for {
		tctx, cancelTimeout := context.WithTimeout(ctx, timeout)
		pctx, cancel := context.WithCancelCause(tctx)
		watched := cutOnReconnect(pctx, cancel, reconnects)
		err := attempt(pctx)
		cut := errors.Is(context.Cause(pctx), errReconnected)
		timedOut := tctx.Err() != nil
		cancel(nil)
		cancelTimeout()
		<-watched
		var conflict *jetstream.ConflictError
		switch {
		case err == nil:
			if waited {
				o.log.Info("JetStream objects ready")
			}
			return nil
		case errors.As(err, &conflict):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		}
		waited = true
		if cut {
			o.log.Debug("a JetStream lookup cut short by a reconnect; trying again at once", "err", err)
			continue
		}
		if timedOut {
			// The attempt itself took its bound: the next one may begin
			// soon. An election ends between two attempts, and a longer
			// pause would only delay the one after it.
			timeout = min(timeout*2, maxAttemptTimeout)
			delay = baseDelay
		}
		if time.Since(warned) >= warnEvery {
			o.log.Warn("waiting for the JetStream objects", "err", err, "retry_in", delay, "attempt_timeout", timeout)
			warned = time.Now()
		} else {
			o.log.Debug("waiting for the JetStream objects", "err", err, "retry_in", delay, "attempt_timeout", timeout)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		delay = min(delay*2, maxDelay)
	}
}

// cutOnReconnect cancels ctx with errReconnected once reconnects has
// counted a reconnect since the call. The returned channel is closed when
// it stops watching, at the latest when ctx ends.
func cutOnReconnect(ctx context.Context, cancel context.CancelCauseFunc, reconnects func() uint64) <-chan struct{} {
	done := make(chan struct{})
	start := reconnects()
	go func() {
		defer close(done)
		t := time.NewTicker(reconnectPoll)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if reconnects() != start {
					cancel(errReconnected)
					return
				}
			}
		}
	}()
	return done
}
