package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/procs"
)

// The emulated Telegram: which chats exist and how they misbehave.
const (
	// emulatorToken is the test token the emulator accepts; it is not a
	// secret and only ever reaches the emulator.
	emulatorToken = "123456789:DEMO-emulator-token"
	// groupChat is a basic group that became a supergroup: the Bot API
	// answers 400 with migrate_to_chat_id, and the worker resends.
	groupChat      int64 = -5001
	supergroupChat int64 = -1005001
)

// Chats that can no longer receive messages, and the dead-letter reason the
// worker must give them.
var (
	blockedChats     = []int64{9000001, 9000002}
	deactivatedChats = []int64{9000003}
)

// stack is the running system.
type stack struct {
	sup *procs.Supervisor

	natsURL      string
	natsMonitor  string
	emulatorURL  string // empty with the real Telegram
	workerURL    string
	publisherURL string
	shopURL      string

	// stopOrder is the order in which the processes are stopped: the
	// application first, NATS last.
	stopOrder []*procs.Process
}

// startStack starts every process and waits until each is ready.
func (d *demo) startStack(ctx context.Context) (*stack, error) {
	sup, err := procs.New(filepath.Join(d.cfg.dir, "logs"), nil)
	if err != nil {
		return nil, err
	}
	s := &stack{sup: sup}
	d.stack = s
	dataDir := filepath.Join(d.cfg.dir, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	db := filepath.Join(dataDir, "shop.db")
	clean := cleanEnv()

	// NATS, from the committed configuration with demo addresses.
	var natsProc *procs.Process
	natsProc, err = d.startProcess(ctx, 2, func(ports []int) (procs.Spec, string, error) {
		conf := filepath.Join(d.cfg.dir, "nats-server.conf")
		if err := writeNATSConfig(d.cfg.natsConfig, conf, ports[0], ports[1], filepath.Join(dataDir, "nats")); err != nil {
			return procs.Spec{}, "", err
		}
		s.natsURL = "nats://" + procs.Addr(ports[0])
		s.natsMonitor = "http://" + procs.Addr(ports[1])
		return procs.Spec{Name: "nats-server", Path: d.binPath("nats-server"), Args: []string{"-c", conf}, Unset: clean},
			s.natsMonitor + "/healthz?js-enabled-only=true", nil
	})
	if err != nil {
		return s, err
	}

	var emuProc *procs.Process
	apiURL := ""
	var workerEnv []string
	workerUnset := clean
	if d.cfg.real == nil {
		emuProc, err = d.startProcess(ctx, 1, func(ports []int) (procs.Spec, string, error) {
			s.emulatorURL = "http://" + procs.Addr(ports[0])
			args := []string{
				"-http", procs.Addr(ports[0]),
				"-token", emulatorToken,
				"-limits=true",
				"-blocked", joinIDs(blockedChats),
				"-deactivated", joinIDs(deactivatedChats),
				"-migrate", fmt.Sprintf("%d=%d", groupChat, supergroupChat),
				"-latency", d.cfg.apiLatency.String(),
				"-latency-jitter", (d.cfg.apiLatency * 2 / 3).String(),
				"-seed", strconv.FormatInt(d.cfg.seed, 10),
			}
			return procs.Spec{Name: "botapi-emulator", Path: d.binPath("botapi-emulator"), Args: args, Unset: clean},
				s.emulatorURL + "/emulator/healthz", nil
		})
		if err != nil {
			return s, err
		}
		apiURL = s.emulatorURL
		workerEnv = append(workerEnv, "TELEGRAM_BOT_TOKEN="+emulatorToken)
	} else {
		apiURL = d.cfg.real.apiURL
		// The worker alone inherits the real token; it never appears in
		// an argument or a log.
		workerUnset = without(clean, "TELEGRAM_BOT_TOKEN")
	}

	workerProc, err := d.startProcess(ctx, 1, func(ports []int) (procs.Spec, string, error) {
		s.workerURL = "http://" + procs.Addr(ports[0])
		args := []string{
			"-nats", s.natsURL,
			"-telegram-api", apiURL,
			"-http", procs.Addr(ports[0]),
			"-stats-interval", "1s",
		}
		return procs.Spec{Name: "telegram-worker", Path: d.binPath("telegram-worker"), Args: args, Env: workerEnv, Unset: workerUnset},
			s.workerURL + "/readyz", nil
	})
	if err != nil {
		return s, err
	}

	shopProc, err := d.startProcess(ctx, 1, func(ports []int) (procs.Spec, string, error) {
		s.shopURL = "http://" + procs.Addr(ports[0])
		return procs.Spec{Name: "shop", Path: d.binPath("shop"), Args: []string{"-db", db, "-http", procs.Addr(ports[0])}, Unset: clean},
			s.shopURL + "/healthz", nil
	})
	if err != nil {
		return s, err
	}

	pubProc, err := d.startProcess(ctx, 1, func(ports []int) (procs.Spec, string, error) {
		s.publisherURL = "http://" + procs.Addr(ports[0])
		args := []string{"-db", db, "-nats", s.natsURL, "-http", procs.Addr(ports[0])}
		return procs.Spec{Name: "publisher", Path: d.binPath("publisher"), Args: args, Unset: clean},
			s.publisherURL + "/readyz", nil
	})
	if err != nil {
		return s, err
	}

	s.stopOrder = []*procs.Process{shopProc, pubProc, workerProc}
	if emuProc != nil {
		s.stopOrder = append(s.stopOrder, emuProc)
	}
	s.stopOrder = append(s.stopOrder, natsProc)
	return s, nil
}

// maxStartAttempts bounds how often a process is started again after losing
// the race for a free port to another program.
const maxStartAttempts = 3

// startProcess starts the process that build describes on nports fresh loopback
// ports and waits for its readiness URL. A start that fails because a port
// was taken in the meantime is retried on new ports.
func (d *demo) startProcess(ctx context.Context, nports int, build func(ports []int) (procs.Spec, string, error)) (*procs.Process, error) {
	for attempt := 1; ; attempt++ {
		ports, err := procs.FreePorts(nports)
		if err != nil {
			return nil, err
		}
		spec, readyURL, err := build(ports)
		if err != nil {
			return nil, err
		}
		spec.StopTimeout = d.cfg.stopWait
		p, err := d.stack.sup.Start(spec)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(d.out, "started %-16s pid %-7d log %s\n", spec.Name, p.Pid(), d.rel(p.LogPath()))
		err = p.WaitReady(ctx, readyURL, d.cfg.readyWait)
		if err == nil {
			return p, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if attempt < maxStartAttempts && p.AddrInUse() {
			fmt.Fprintf(d.out, "%s lost its port to another program; starting it again\n", spec.Name)
			_ = p.Stop()
			continue
		}
		return nil, err
	}
}

// stop stops the processes in order and returns one line per process.
func (s *stack) stop() (lines []string, failed bool) {
	if s == nil {
		return nil, false
	}
	stopped := map[*procs.Process]bool{}
	order := s.stopOrder
	if len(order) == 0 { // start-up failed half way: whatever runs, newest first
		all := s.sup.Processes()
		for i := len(all) - 1; i >= 0; i-- {
			order = append(order, all[i])
		}
	}
	for _, p := range order {
		stopped[p] = true
		start := time.Now()
		if err := p.Stop(); err != nil {
			failed = true
			lines = append(lines, fmt.Sprintf("%-16s FAILED: %v", p.Name(), err))
			continue
		}
		lines = append(lines, fmt.Sprintf("%-16s stopped cleanly in %v", p.Name(), time.Since(start).Round(time.Millisecond)))
	}
	for _, p := range s.sup.Processes() { // any left behind by a failed start
		if !stopped[p] {
			_ = p.Stop()
		}
	}
	s.sup.Close()
	return lines, failed
}

// leftovers returns the processes this demo started that still exist.
func (s *stack) leftovers() []string {
	var out []string
	for _, p := range s.sup.Processes() {
		select {
		case <-p.Done():
		default:
			out = append(out, fmt.Sprintf("%s (pid %d)", p.Name(), p.Pid()))
		}
	}
	return out
}

// listenLine, httpLine and storeDirLine are the settings of the committed
// nats-server.conf the demo replaces.
var (
	listenLine   = regexp.MustCompile(`(?m)^listen:.*$`)
	httpLine     = regexp.MustCompile(`(?m)^http:.*$`)
	storeDirLine = regexp.MustCompile(`(?m)^(\s*)store_dir:.*$`)
)

// writeNATSConfig copies the nats-server configuration at from to to, with
// the client and monitoring addresses and the JetStream store directory
// replaced. Everything else, sync_interval included, is the production
// file's.
func writeNATSConfig(from, to string, clientPort, monitorPort int, storeDir string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return fmt.Errorf("reading the nats-server configuration: %w", err)
	}
	conf := string(b)
	for _, r := range []struct {
		re   *regexp.Regexp
		with string
	}{
		{listenLine, "listen: " + procs.Addr(clientPort)},
		{httpLine, "http: " + procs.Addr(monitorPort)},
		{storeDirLine, "${1}store_dir: " + strconv.Quote(storeDir)},
	} {
		if !r.re.MatchString(conf) {
			return fmt.Errorf("%s: no line matches %s; the demo cannot set its addresses", from, r.re)
		}
		conf = r.re.ReplaceAllString(conf, r.with)
	}
	header := "# Generated by the demo from " + from + "; addresses and store_dir replaced.\n"
	return os.WriteFile(to, []byte(header+conf), 0o644)
}

// cleanEnv lists the environment variables of the daemons' own settings
// that are set in the demo's environment: the children must not inherit
// them, or a developer's exported PUBLISHER_NATS would steer the demo
// elsewhere. TELEGRAM_BOT_TOKEN is dropped too, except for the worker with
// the real Telegram, which gets it back explicitly.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		for _, prefix := range []string{"PUBLISHER_", "TELEGRAM_WORKER_", "SHOP_", "EMULATOR_"} {
			if strings.HasPrefix(name, prefix) {
				out = append(out, name)
			}
		}
	}
	return append(out, "NATS_URL", "TELEGRAM_BOT_TOKEN")
}

// without returns names minus drop.
func without(names []string, drop string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n != drop {
			out = append(out, n)
		}
	}
	return out
}

func joinIDs(ids []int64) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(s, ",")
}
