package chaos

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// emulatorToken is the test token the emulator accepts; not a secret.
const emulatorToken = "123456789:CHAOS-emulator-token"

// Process names.
const (
	nameNATS      = "nats-server"
	nameEmulator  = "botapi-emulator"
	nameShop      = "shop"
	namePublisher = "publisher"
)

// workerName names worker i (0 or 1).
func workerName(i int) string { return "worker-" + strconv.Itoa(i+1) }

// sut is the system under test: the processes and where they listen. Ports
// are chosen at the first start and kept, so that a restarted nats-server is
// found by its clients at the same URL.
type sut struct {
	cfg     Config
	sup     *procs.Supervisor
	dbPath  string
	dataDir string
	unset   []string
	client  *http.Client

	natsConf    string
	declaration string // the JetStream declaration both daemons read
	natsPort    int
	monPort     int
	natsURL     string
	emulatorURL string
	shopURL     string

	mu    sync.Mutex
	procs map[string]*procs.Process
	ports map[string]int // HTTP port of each daemon, kept across restarts
	lives []life         // worker processes, for the breaker bound
}

// life is one run of a worker process.
type life struct {
	name       string
	start, end time.Time // end is zero while it runs
}

// newSUT prepares the directories; start starts the processes.
func newSUT(c Config, dir string) (*sut, error) {
	sup, err := procs.New(filepath.Join(dir, "logs"), nil)
	if err != nil {
		return nil, err
	}
	s := &sut{
		cfg: c, sup: sup,
		dataDir: filepath.Join(dir, "data"),
		unset:   system.CleanEnv(),
		client:  &http.Client{Timeout: 5 * time.Second},
		procs:   map[string]*procs.Process{},
		ports:   map[string]int{},
	}
	s.dbPath = filepath.Join(s.dataDir, "shop.db")
	s.natsConf = filepath.Join(dir, "nats-server.conf")
	s.declaration = filepath.Join(dir, "jetstream.yaml")
	if err := os.MkdirAll(s.dataDir, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(s.declaration, []byte(c.Worker.declaration()), 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

// start starts every process, in dependency order, and waits until each is
// ready.
func (s *sut) start(ctx context.Context) error {
	ports, err := procs.FreePorts(2)
	if err != nil {
		return err
	}
	s.natsPort, s.monPort = ports[0], ports[1]
	s.natsURL = "nats://" + procs.Addr(s.natsPort)
	if err := system.WriteNATSConfig(s.cfg.NATSConfig, s.natsConf, system.NATSConfig{ClientPort: s.natsPort, MonitorPort: s.monPort, StoreDir: filepath.Join(s.dataDir, "nats")}); err != nil {
		return err
	}
	if err := s.startNATS(ctx); err != nil {
		return err
	}
	if err := s.launch(ctx, nameEmulator, func(port int) (procs.Spec, string) {
		s.emulatorURL = "http://" + procs.Addr(port)
		dead := startDead()
		var blocked, deactivated []string
		for chat, reason := range dead {
			if reason == "deactivated" {
				deactivated = append(deactivated, strconv.FormatInt(chat, 10))
			} else {
				blocked = append(blocked, strconv.FormatInt(chat, 10))
			}
		}
		return procs.Spec{Name: nameEmulator, Path: s.bin(nameEmulator), Unset: s.unset, Args: []string{
			"-http", procs.Addr(port), "-token", emulatorToken, "-limits=true",
			"-blocked", strings.Join(blocked, ","), "-deactivated", strings.Join(deactivated, ","),
			"-migrate", fmt.Sprintf("%d=%d", migratedGroup, supergroup),
			"-latency", "25ms", "-latency-jitter", "15ms", "-seed", strconv.FormatInt(s.cfg.Seed, 10),
		}}, s.emulatorURL + "/emulator/healthz"
	}); err != nil {
		return err
	}
	if err := s.launch(ctx, nameShop, func(port int) (procs.Spec, string) {
		s.shopURL = "http://" + procs.Addr(port)
		return procs.Spec{Name: nameShop, Path: s.bin(nameShop), Unset: s.unset,
			Args: []string{"-db", s.dbPath, "-http", procs.Addr(port)}}, s.shopURL + "/healthz"
	}); err != nil {
		return err
	}
	if err := s.startPublisher(ctx); err != nil {
		return err
	}
	return s.startWorker(ctx, 0)
}

// bin returns the path of a binary.
func (s *sut) bin(name string) string { return filepath.Join(s.cfg.Bin, name) }

// launch starts a daemon on a fresh HTTP port and remembers the port.
func (s *sut) launch(ctx context.Context, name string, build func(port int) (procs.Spec, string)) error {
	p, err := s.sup.Launch(ctx, procs.Launch{
		Ports:        1,
		ReadyTimeout: s.cfg.ReadyTimeout,
		Build: func(ports []int) (procs.Spec, string, error) {
			spec, url := build(ports[0])
			spec.StopTimeout = s.cfg.StopTimeout
			s.mu.Lock()
			s.ports[name] = ports[0]
			s.mu.Unlock()
			return spec, url, nil
		},
	})
	if err != nil {
		return err
	}
	s.set(name, p)
	return nil
}

// restart starts a daemon again on its HTTP port. If another program took
// the port meanwhile it starts on a fresh one.
func (s *sut) restart(ctx context.Context, name string, build func(port int) (procs.Spec, string)) error {
	s.mu.Lock()
	port, ok := s.ports[name]
	s.mu.Unlock()
	if !ok {
		return s.launch(ctx, name, build)
	}
	spec, url := build(port)
	spec.StopTimeout = s.cfg.StopTimeout
	p, err := s.sup.Start(spec)
	if err != nil {
		return err
	}
	s.set(name, p)
	if err := p.WaitReady(ctx, url, s.cfg.ReadyTimeout); err != nil {
		if ctx.Err() == nil && p.AddrInUse() {
			_ = p.Stop()
			return s.launch(ctx, name, build)
		}
		return err
	}
	return nil
}

func (s *sut) set(name string, p *procs.Process) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.procs[name] = p
	if strings.HasPrefix(name, "worker-") {
		s.lives = append(s.lives, life{name: name, start: time.Now()})
	}
}

// proc returns the named process if it runs.
func (s *sut) proc(name string) *procs.Process {
	s.mu.Lock()
	p := s.procs[name]
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	select {
	case <-p.Done():
		return nil
	default:
		return p
	}
}

// ended records the end of a worker's life.
func (s *sut) ended(name string, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := len(s.lives) - 1; i >= 0; i-- {
		if s.lives[i].name == name && s.lives[i].end.IsZero() {
			s.lives[i].end = at
			return
		}
	}
}

// livesDuring counts the worker processes that ran at some moment of
// [from, to], and the time each overlapped it.
func (s *sut) livesDuring(from, to time.Time) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []time.Duration
	for _, l := range s.lives {
		end := l.end
		if end.IsZero() {
			end = to
		}
		if l.start.After(to) || end.Before(from) {
			continue
		}
		out = append(out, minTime(end, to).Sub(maxTime(l.start, from)))
	}
	return out
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// startNATS starts nats-server on the run's ports and store.
func (s *sut) startNATS(ctx context.Context) error {
	p, err := s.sup.Start(procs.Spec{Name: nameNATS, Path: s.bin(nameNATS), Args: []string{"-c", s.natsConf},
		Unset: s.unset, StopTimeout: s.cfg.StopTimeout})
	if err != nil {
		return err
	}
	s.set(nameNATS, p)
	return p.WaitReady(ctx, fmt.Sprintf("http://%s/healthz?js-enabled-only=true", procs.Addr(s.monPort)), s.cfg.ReadyTimeout)
}

// stopNATS stops nats-server, with SIGKILL when hard.
func (s *sut) stopNATS(hard bool) error {
	p := s.proc(nameNATS)
	if p == nil {
		return nil
	}
	if hard {
		p.Kill()
		return nil
	}
	return p.Stop()
}

// publisherSpec is the publisher on port.
func (s *sut) publisherSpec(port int) (procs.Spec, string) {
	return procs.Spec{Name: namePublisher, Path: s.bin(namePublisher), Unset: s.unset, Args: []string{
		"-db", s.dbPath, "-nats", s.natsURL, "-http", procs.Addr(port), "-retry-max", "2s",
		"-jetstream-config", s.declaration,
	}}, "http://" + procs.Addr(port) + "/healthz"
}

// startPublisher starts (or restarts) the publisher.
func (s *sut) startPublisher(ctx context.Context) error {
	return s.restart(ctx, namePublisher, s.publisherSpec)
}

// workerSpec is worker i on port.
func (s *sut) workerSpec(i int) func(port int) (procs.Spec, string) {
	return func(port int) (procs.Spec, string) {
		args := append([]string{
			"-nats", s.natsURL, "-telegram-api", s.emulatorURL, "-http", procs.Addr(port),
			"-stats-interval", "1s", "-shutdown-timeout", "5s", "-jetstream-config", s.declaration,
		}, s.cfg.Worker.args()...)
		return procs.Spec{Name: workerName(i), Path: s.bin("telegram-worker"), Args: args,
				Env: []string{"TELEGRAM_BOT_TOKEN=" + emulatorToken}, Unset: s.unset},
			"http://" + procs.Addr(port) + "/healthz"
	}
}

// startWorker starts (or restarts) worker i.
func (s *sut) startWorker(ctx context.Context, i int) error {
	return s.restart(ctx, workerName(i), s.workerSpec(i))
}

// workerURL is worker i's HTTP base URL, or "" before its first start.
func (s *sut) workerURL(i int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	port, ok := s.ports[workerName(i)]
	if !ok {
		return ""
	}
	return "http://" + procs.Addr(port)
}

// kill sends SIGKILL to the named process and returns its pid and the
// moment of the signal; ok is false when it was not running.
func (s *sut) kill(name string) (pid int, at time.Time, ok bool) {
	p := s.proc(name)
	if p == nil {
		return 0, time.Time{}, false
	}
	at = time.Now()
	p.Kill()
	s.ended(name, at)
	return p.Pid(), at, true
}

// stopWorker stops worker i with SIGTERM.
func (s *sut) stopWorker(i int) error {
	p := s.proc(workerName(i))
	if p == nil {
		return nil
	}
	err := p.Stop()
	s.ended(workerName(i), time.Now())
	return err
}

// activeWorker returns the index of the running worker that holds work (the
// pinned one), or -1 when it cannot tell.
func (s *sut) activeWorker(ctx context.Context) int {
	for i := range 2 {
		if s.proc(workerName(i)) == nil {
			continue
		}
		var st delivery.Stats
		ctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
		err := system.GetJSON(ctx, s.client, s.workerURL(i)+"/stats", &st)
		cancel()
		if err == nil && st.Held+st.InFlight+st.Parked+st.Lanes > 0 {
			return i
		}
	}
	return -1
}

// stopAll stops every process gracefully, the application first and NATS
// last, and reports each one's end.
func (s *sut) stopAll() (lines []string, failed bool) {
	var order []*procs.Process
	for _, name := range []string{nameShop, namePublisher, workerName(1), workerName(0), nameEmulator, nameNATS} {
		if p := s.proc(name); p != nil {
			order = append(order, p)
		}
	}
	lines, failed = procs.StopInOrder(order)
	s.sup.Close()
	return lines, failed
}

// leftovers lists processes the run started that still exist.
func (s *sut) leftovers() []string { return s.sup.Leftovers() }
