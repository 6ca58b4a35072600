package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
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
	clean := system.CleanEnv()

	// NATS, from the committed configuration with demo addresses.
	var natsProc *procs.Process
	natsProc, err = d.startProcess(ctx, 2, func(ports []int) (procs.Spec, string, error) {
		conf := filepath.Join(d.cfg.dir, "nats-server.conf")
		if err := system.WriteNATSConfig(d.cfg.natsConfig, conf, system.NATSConfig{ClientPort: ports[0], MonitorPort: ports[1], StoreDir: filepath.Join(dataDir, "nats")}); err != nil {
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

// startProcess starts the process that build describes on nports fresh
// loopback ports, announces it, and waits for its readiness URL (see
// procs.Supervisor.Launch).
func (d *demo) startProcess(ctx context.Context, nports int, build func(ports []int) (procs.Spec, string, error)) (*procs.Process, error) {
	return d.stack.sup.Launch(ctx, procs.Launch{
		Ports: nports,
		Build: func(ports []int) (procs.Spec, string, error) {
			spec, url, err := build(ports)
			spec.StopTimeout = d.cfg.stopWait
			return spec, url, err
		},
		ReadyTimeout: d.cfg.readyWait,
		Started: func(p *procs.Process) {
			fmt.Fprintf(d.out, "started %-16s pid %-7d log %s\n", p.Name(), p.Pid(), d.rel(p.LogPath()))
		},
	})
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
	lines, failed = procs.StopInOrder(order)
	for _, p := range order {
		stopped[p] = true
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
func (s *stack) leftovers() []string { return s.sup.Leftovers() }

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
