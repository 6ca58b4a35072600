package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// Timeouts of the harness: bounds on waits that only fail when something is
// broken, never figures of a scenario.
const (
	readyTimeout   = 20 * time.Second
	stopTimeout    = 15 * time.Second
	connectTimeout = 10 * time.Second
)

// stack is the part of the system one run needs: always a nats-server
// process and a connection to it; as the scenario requires, the Bot API
// emulator (in-process), the publisher and the telegram worker (processes).
// Each stack has its own directory (store, databases, logs) and is closed at
// the end of its run.
type stack struct {
	dir     string
	sup     *procs.Supervisor
	natsURL string
	nats    *procs.Process
	nc      *nats.Conn
	js      natsjs.JetStream

	emu       *emulatorServer
	publisher *procs.Process
	worker    *procs.Process
	workerURL string

	// cluster is a three-node NATS (newClusterStack); nats is nil then.
	// declaration is the JetStream declaration the daemons read on it.
	cluster     *system.Cluster
	declaration string
	// standby is a second telegram worker, standbyURL its HTTP address.
	standby    *procs.Process
	standbyURL string
}

// serverSync says how the nats-server of a stack stores messages.
type serverSync bool

const (
	// syncDefault is nats-server's default: file storage fsynced every two
	// minutes.
	syncDefault serverSync = false
	// syncAlways is the production configuration's sync_interval: always,
	// an fsync before every PubAck.
	syncAlways serverSync = true
)

func (s serverSync) String() string {
	if s == syncAlways {
		return "sync_interval: always (production config)"
	}
	return "default sync (fsync every 2 min)"
}

// newStack starts a nats-server in a fresh directory under the work
// directory and connects to it.
func (r *runner) newStack(ctx context.Context, name string, sync serverSync) (*stack, error) {
	r.stacks++
	dir := filepath.Join(r.cfg.WorkDir, fmt.Sprintf("%03d-%s", r.stacks, name))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", dir, err)
	}
	sup, err := procs.New(filepath.Join(dir, "logs"), nil)
	if err != nil {
		return nil, err
	}
	st := &stack{dir: dir, sup: sup}
	conf := filepath.Join(dir, "nats-server.conf")
	st.nats, err = st.launch(ctx, 2, func(ports []int) (procs.Spec, string, error) {
		nc := system.NATSConfig{ClientPort: ports[0], MonitorPort: ports[1], StoreDir: filepath.Join(dir, "jetstream"), ServerDefaultSync: sync == syncDefault}
		if err := system.WriteNATSConfig(r.cfg.NATSConfig, conf, nc); err != nil {
			return procs.Spec{}, "", err
		}
		st.natsURL = "nats://" + procs.Addr(ports[0])
		return procs.Spec{Name: "nats-server", Path: r.bin("nats-server"), Args: []string{"-c", conf}, Unset: system.CleanEnv()},
			"http://" + procs.Addr(ports[1]) + "/healthz?js-enabled-only=true", nil
	})
	if err != nil {
		st.close()
		return nil, err
	}
	if st.nc, err = connect(ctx, st.natsURL, "bench"); err != nil {
		st.close()
		return nil, err
	}
	if st.js, err = natsjs.New(st.nc); err != nil {
		st.close()
		return nil, err
	}
	return st, nil
}

// connect opens a NATS connection with the daemons' connection settings and
// waits until it is up.
func connect(ctx context.Context, url, name string) (*nats.Conn, error) {
	nc, err := jetstream.Connect(ctx, jetstream.Options{URLs: url, Name: name}, nil)
	if err != nil {
		return nil, err
	}
	if err := waitFor(ctx, connectTimeout, "connecting to NATS", func() bool { return nc.IsConnected() }); err != nil {
		nc.Close()
		return nil, err
	}
	return nc, nil
}

// provision creates NOTIFY and NOTIFY_DEAD as the daemons do.
func (st *stack) provision(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	return jetstream.ProvisionStreams(ctx, st.js, jetstream.StreamSettings{})
}

// startEmulator serves the Bot API emulator with limits from this process.
func (st *stack) startEmulator(limits emulator.Limits) error {
	var err error
	st.emu, err = startEmulator(limits)
	return err
}

// startPublisher starts bin/publisher on the outbox database db.
func (st *stack) startPublisher(ctx context.Context, bin, db string) error {
	var err error
	st.publisher, err = st.launch(ctx, 1, func(ports []int) (procs.Spec, string, error) {
		args := append([]string{"-db", db, "-nats", st.natsURL, "-http", procs.Addr(ports[0])}, st.declarationArgs()...)
		if st.cluster != nil {
			// As docs/RUNBOOK.md recommends on a cluster: every group's
			// leader kept with NOTIFY's.
			args = append(args, "-gather-leaders")
		}
		return procs.Spec{Name: "publisher", Path: bin, Args: args, Unset: system.CleanEnv()},
			"http://" + procs.Addr(ports[0]) + "/readyz", nil
	})
	return err
}

// declarationArgs give a daemon the stack's JetStream declaration, if it
// has one.
func (st *stack) declarationArgs() []string {
	if st.declaration == "" {
		return nil
	}
	return []string{"-jetstream-config", st.declaration}
}

// startWorker starts bin/telegram-worker against the stack's emulator with
// extra flags after the stack's own.
func (st *stack) startWorker(ctx context.Context, bin string, extra ...string) error {
	var err error
	st.worker, st.workerURL, err = st.startWorkerNamed(ctx, "telegram-worker", bin, extra...)
	return err
}

// startStandby starts a second telegram worker on the same consumer: the
// hot standby.
func (st *stack) startStandby(ctx context.Context, bin string, extra ...string) error {
	var err error
	st.standby, st.standbyURL, err = st.startWorkerNamed(ctx, "telegram-worker-2", bin, extra...)
	return err
}

// startWorkerNamed starts a telegram worker process named name and returns
// it with its HTTP base URL.
func (st *stack) startWorkerNamed(ctx context.Context, name, bin string, extra ...string) (*procs.Process, string, error) {
	if st.emu == nil {
		return nil, "", errors.New("starting the worker: the stack has no emulator")
	}
	var url string
	p, err := st.launch(ctx, 1, func(ports []int) (procs.Spec, string, error) {
		url = "http://" + procs.Addr(ports[0])
		args := append(append([]string{
			"-nats", st.natsURL,
			"-telegram-api", st.emu.url,
			"-http", procs.Addr(ports[0]),
			"-stats-interval", "1s",
		}, st.declarationArgs()...), extra...)
		return procs.Spec{Name: name, Path: bin, Args: args, Env: []string{"TELEGRAM_BOT_TOKEN=" + emulatorToken}, Unset: system.CleanEnv()},
			url + "/readyz", nil
	})
	return p, url, err
}

// maxStartAttempts bounds how often a process is started again after losing
// the race for a free port to another program.
const maxStartAttempts = 3

// launch starts the process build describes on nports fresh loopback ports
// and waits for its readiness URL, retrying on new ports when another
// program took one in the meantime.
func (st *stack) launch(ctx context.Context, nports int, build func(ports []int) (procs.Spec, string, error)) (*procs.Process, error) {
	for attempt := 1; ; attempt++ {
		ports, err := procs.FreePorts(nports)
		if err != nil {
			return nil, err
		}
		spec, readyURL, err := build(ports)
		if err != nil {
			return nil, err
		}
		spec.StopTimeout = stopTimeout
		p, err := st.sup.Start(spec)
		if err != nil {
			return nil, err
		}
		err = p.WaitReady(ctx, readyURL, readyTimeout)
		if err == nil {
			return p, nil
		}
		if ctx.Err() == nil && attempt < maxStartAttempts && p.AddrInUse() {
			_ = p.Stop()
			continue
		}
		return nil, err
	}
}

// failure returns an error naming the processes of the stack that ended
// without being asked to; a run with such a failure is not a measurement.
func (st *stack) failure() error {
	var errs []error
	for _, f := range st.sup.Failures() {
		errs = append(errs, f)
	}
	return errors.Join(errs...)
}

// close stops the processes in dependency order (publisher and worker
// first, NATS last), stops the emulator and closes the connection. It
// returns the first unclean stop or unexpected exit.
func (st *stack) close() error {
	errs := []error{st.failure()}
	for _, p := range []*procs.Process{st.publisher, st.worker, st.standby} {
		if p != nil {
			errs = append(errs, p.Stop())
		}
	}
	if st.nc != nil {
		st.nc.Close()
	}
	if st.emu != nil {
		st.emu.close()
	}
	if st.nats != nil {
		errs = append(errs, st.nats.Stop())
	}
	if st.cluster != nil {
		for _, p := range st.cluster.Processes() {
			errs = append(errs, p.Stop())
		}
		st.cluster.Close()
	}
	st.sup.Close()
	return errors.Join(errs...)
}

// removeData deletes the stack's directory (JetStream store, databases),
// keeping its logs only when the run failed.
func (st *stack) removeData(keepLogs bool) {
	entries, err := os.ReadDir(st.dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if keepLogs && e.Name() == "logs" {
			continue
		}
		_ = os.RemoveAll(filepath.Join(st.dir, e.Name()))
	}
	if !keepLogs {
		_ = os.Remove(st.dir)
	}
}

// waitFor polls cond every few milliseconds until it holds, ctx ends or
// timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
	return nil
}
