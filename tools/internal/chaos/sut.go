package chaos

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/tgnotify/tgnotify/internal/procs"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/delivery"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Test credentials the emulators accept; not secrets.
const (
	emulatorToken = "123456789:CHAOS-emulator-token"
	maxToken      = "CHAOS-max-emulator-token"
	twilioSID     = "AC00000000000000000000000000000000"
	twilioToken   = "emulator-auth-token"
	smsFrom       = "+15005550006"
	mailFrom      = "Chaos Shop <orders@shop.example>"
	// messageIDDomain is the right-hand side of every email's Message-ID.
	messageIDDomain = "shop.example"
)

// Process names.
const (
	nameNATS        = "nats-server"
	nameEmulator    = "botapi-emulator"
	nameMaxEmulator = "max-emulator"
	nameSMSEmulator = "sms-emulator"
	nameMailpit     = "mailpit"
	nameShop        = "shop"
	namePublisher   = "publisher"
)

// workerName names telegram worker i (0 or 1).
func workerName(i int) string { return "worker-" + strconv.Itoa(i+1) }

// channelWorkerName names the worker process of a fallback channel (max,
// email, sms): its binary's name.
func channelWorkerName(channel string) string { return channel + "-worker" }

// workerOf reports whether a process is a worker of channel: worker-1 and
// worker-2 are Telegram's.
func workerOf(process, channel string) bool {
	if channel == "telegram" {
		return strings.HasPrefix(process, "worker-")
	}
	return process == channelWorkerName(channel)
}

// sut is the system under test: the processes and where they listen. Ports
// are chosen at the first start and kept, so that a restarted nats-server is
// found by its clients at the same URL.
type sut struct {
	cfg     Config
	plan    Plan
	sup     *procs.Supervisor
	dbPath  string
	dataDir string
	unset   []string
	client  *http.Client

	natsConf    string
	declaration string // the JetStream declaration both daemons read
	// cluster is the three-node NATS of a cluster run (nil on one
	// server); its nodes' routes and client ports pass through proxies.
	cluster     *system.Cluster
	natsPort    int
	monPort     int
	natsURL     string
	emulatorURL string
	maxURL      string
	smsURL      string
	shopURL     string
	// Mailpit keeps its ports across restarts: the email worker knows its
	// SMTP address.
	smtpPort, mailpitAPIPort int
	mailpitURL               string

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
func newSUT(c Config, dir string, plan Plan) (*sut, error) {
	sup, err := procs.New(filepath.Join(dir, "logs"), nil)
	if err != nil {
		return nil, err
	}
	s := &sut{
		cfg: c, plan: plan, sup: sup,
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
	replicas := 1
	if c.Cluster {
		replicas = 3
	}
	if err := os.WriteFile(s.declaration, []byte(c.Worker.declaration(replicas)), 0o644); err != nil {
		return nil, err
	}
	return s, nil
}

// start starts every process, in dependency order, and waits until each is
// ready.
func (s *sut) start(ctx context.Context) error {
	if s.cfg.Cluster {
		if err := s.startCluster(ctx); err != nil {
			return err
		}
	} else {
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
	if err := s.launch(ctx, nameMaxEmulator, func(port int) (procs.Spec, string) {
		s.maxURL = "http://" + procs.Addr(port)
		blocked := slices.Sorted(maps.Keys(s.plan.DeadRecipients["max"]))
		return procs.Spec{Name: nameMaxEmulator, Path: s.bin(nameMaxEmulator), Unset: s.unset, Args: []string{
			"-http", procs.Addr(port), "-token", maxToken, "-blocked", strings.Join(blocked, ","),
			"-latency", "25ms", "-latency-jitter", "15ms", "-seed", strconv.FormatInt(s.cfg.Seed, 10),
		}}, s.maxURL + "/emulator/healthz"
	}); err != nil {
		return err
	}
	if err := s.launch(ctx, nameSMSEmulator, func(port int) (procs.Spec, string) {
		s.smsURL = "http://" + procs.Addr(port)
		var unsubscribed []string
		for _, cu := range s.plan.Customers {
			if _, dead := s.plan.DeadRecipients["sms"]["p"+notify.HashAddress(cu.Phone)]; dead && cu.Phone != "" {
				unsubscribed = append(unsubscribed, cu.Phone)
			}
		}
		slices.Sort(unsubscribed)
		return procs.Spec{Name: nameSMSEmulator, Path: s.bin(nameSMSEmulator), Unset: s.unset, Args: []string{
			"-http", procs.Addr(port), "-account-sid", twilioSID, "-auth-token", twilioToken,
			"-unsubscribed", strings.Join(unsubscribed, ","),
			"-segments-per-second", fmt.Sprint(s.cfg.Channels.SMSSegmentsPerSecond),
			"-latency", "25ms", "-latency-jitter", "15ms", "-seed", strconv.FormatInt(s.cfg.Seed, 10),
		}}, s.smsURL + "/emulator/healthz"
	}); err != nil {
		return err
	}
	mp, err := procs.FreePorts(2)
	if err != nil {
		return err
	}
	s.smtpPort, s.mailpitAPIPort = mp[0], mp[1]
	s.mailpitURL = "http://" + procs.Addr(s.mailpitAPIPort)
	if err := s.startMailpit(ctx); err != nil {
		return err
	}
	if err := s.launch(ctx, nameShop, func(port int) (procs.Spec, string) {
		s.shopURL = "http://" + procs.Addr(port)
		return procs.Spec{Name: nameShop, Path: s.bin(nameShop), Unset: s.unset,
			Args: []string{"-db", s.dbPath, "-http", procs.Addr(port), "-nats", s.natsURL}}, s.shopURL + "/healthz"
	}); err != nil {
		return err
	}
	if err := s.startPublisher(ctx); err != nil {
		return err
	}
	for _, ch := range fallbackChannels() {
		if err := s.startChannelWorker(ctx, ch); err != nil {
			return err
		}
	}
	return s.startWorker(ctx, 0)
}

// fallbackChannels are the channels after Telegram, each with one worker
// process.
func fallbackChannels() []string { return []string{"max", "email", "sms"} }

// destinations are where the providers record what they accepted.
func (s *sut) destinations() system.Destinations {
	return system.Destinations{Telegram: s.emulatorURL, Max: s.maxURL, SMS: s.smsURL, Mailpit: s.mailpitURL}
}

// startMailpit starts Mailpit on the run's SMTP and API ports with its
// database in the data directory, so that a restart finds the messages it
// had. Recipients outside mailDomain are refused with 550 5.1.0 (a hard
// bounce).
func (s *sut) startMailpit(ctx context.Context) error {
	args := append(system.MailpitArgs(procs.Addr(s.smtpPort), procs.Addr(s.mailpitAPIPort), filepath.Join(s.dataDir, "mailpit.db")),
		"--smtp-allowed-recipients", "@"+regexp.QuoteMeta(mailDomain)+"$")
	p, err := s.sup.Start(procs.Spec{Name: nameMailpit, Path: s.bin(nameMailpit), Args: args, Unset: s.unset, StopTimeout: s.cfg.StopTimeout})
	if err != nil {
		return err
	}
	s.set(nameMailpit, p)
	return p.WaitReady(ctx, s.mailpitURL+"/readyz", s.cfg.ReadyTimeout)
}

// stopMailpit stops Mailpit, with SIGKILL when hard.
func (s *sut) stopMailpit(hard bool) error {
	p := s.proc(nameMailpit)
	if p == nil {
		return nil
	}
	if hard {
		p.Kill()
		return nil
	}
	return p.Stop()
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

// startCluster starts the three nodes behind their proxies, waits for the
// meta leader and provisions the declaration (three replicas) with
// tgnotify provision, as an operator would.
func (s *sut) startCluster(ctx context.Context) error {
	c, err := system.StartCluster(ctx, system.ClusterOptions{Sup: s.sup, Bin: s.cfg.Bin, ConfigDir: s.cfg.ClusterConfig,
		Dir: filepath.Join(s.dataDir, "nats"), Proxies: true, Unset: s.unset, ReadyTimeout: s.cfg.ReadyTimeout, StopTimeout: s.cfg.StopTimeout})
	if err != nil {
		return err
	}
	s.cluster = c
	s.natsURL = c.URLs()
	wctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
	defer cancel()
	nc, err := nats.Connect(s.natsURL, nats.Name("chaos-provision"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := system.WaitMetaLeader(wctx, nc); err != nil {
		return err
	}
	for {
		cmd := exec.CommandContext(wctx, s.bin("tgnotify"), "provision", "-config", s.declaration, "-nats", s.natsURL, "-timeout", "10s")
		cmd.Env = environWithout(s.unset)
		out, err := cmd.CombinedOutput()
		if err == nil {
			return nil
		}
		t := time.NewTimer(500 * time.Millisecond) // the cluster may still be placing its first assets
		select {
		case <-wctx.Done():
			t.Stop()
			return fmt.Errorf("tgnotify provision on the cluster: %v\n%s", err, out)
		case <-t.C:
		}
	}
}

// environWithout is this process's environment without the names in
// unset.
func environWithout(unset []string) []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(unset, name) {
			env = append(env, kv)
		}
	}
	return env
}

// healthyWait bounds the wait, after a node fault, for every node to be
// current again before the next node fault.
const healthyWait = 90 * time.Second

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
	args := []string{
		"-db", s.dbPath, "-nats", s.natsURL, "-http", procs.Addr(port), "-retry-max", "2s",
		"-jetstream-config", s.declaration,
	}
	if s.cfg.Cluster {
		// As docs/RUNBOOK.md recommends on a cluster: every group's leader
		// with NOTIFY's, so that a node's loss costs one election or none.
		args = append(args, "-gather-leaders")
	}
	return procs.Spec{Name: namePublisher, Path: s.bin(namePublisher), Unset: s.unset, Args: args},
		"http://" + procs.Addr(port) + "/healthz"
}

// startPublisher starts (or restarts) the publisher.
func (s *sut) startPublisher(ctx context.Context) error {
	return s.restart(ctx, namePublisher, s.publisherSpec)
}

// workerArgs are the flags every worker process gets: NATS, its HTTP port,
// the declaration, the run's timers and fallback_after, and a pause file of
// its own (kept across its restarts, as the systemd units keep it in the
// state directory).
func (s *sut) workerArgs(name string, port int) []string {
	return append([]string{
		"-nats", s.natsURL, "-http", procs.Addr(port), "-pause-file", filepath.Join(s.dataDir, name+".pause"),
		"-stats-interval", "1s", "-shutdown-timeout", "5s", "-jetstream-config", s.declaration,
		"-fallback-after-transactional", s.cfg.Channels.FallbackAfter.String(),
		"-log-level", s.cfg.WorkerLogLevel,
	}, s.cfg.Worker.args()...)
}

// channelWorkerSpec is the worker of a fallback channel on port.
func (s *sut) channelWorkerSpec(channel string) func(port int) (procs.Spec, string) {
	return func(port int) (procs.Spec, string) {
		c := s.cfg.Channels
		args := s.workerArgs(channelWorkerName(channel), port)
		var env []string
		switch channel {
		case "max":
			args = append(args, "-max-api", s.maxURL)
			env = []string{"MAX_BOT_TOKEN=" + maxToken}
		case "email":
			args = append(args, "-smtp", procs.Addr(s.smtpPort), "-smtp-tls", "none", "-from", mailFrom,
				"-message-id-domain", messageIDDomain, "-rate", fmt.Sprint(c.EmailRate), "-recipient-per-minute", fmt.Sprint(c.EmailPerRecipient))
		case "sms":
			args = append(args, "-sms-api", s.smsURL, "-from", smsFrom, "-segments-per-second", fmt.Sprint(c.SMSSegmentsPerSecond),
				"-recipient-per-minute", fmt.Sprint(c.SMSRecipientsPerMinute))
			env = []string{"TWILIO_ACCOUNT_SID=" + twilioSID, "TWILIO_AUTH_TOKEN=" + twilioToken}
		}
		name := channelWorkerName(channel)
		return procs.Spec{Name: name, Path: s.bin(name), Args: args, Env: env, Unset: s.unset},
			"http://" + procs.Addr(port) + "/healthz"
	}
}

// startChannelWorker starts (or restarts) the worker of a fallback
// channel.
func (s *sut) startChannelWorker(ctx context.Context, channel string) error {
	return s.restart(ctx, channelWorkerName(channel), s.channelWorkerSpec(channel))
}

// workerSpec is telegram worker i on port.
func (s *sut) workerSpec(i int) func(port int) (procs.Spec, string) {
	return func(port int) (procs.Spec, string) {
		args := append(s.workerArgs(workerName(i), port), "-telegram-api", s.emulatorURL)
		return procs.Spec{Name: workerName(i), Path: s.bin("telegram-worker"), Args: args,
				Env: []string{"TELEGRAM_BOT_TOKEN=" + emulatorToken}, Unset: s.unset},
			"http://" + procs.Addr(port) + "/healthz"
	}
}

// startWorker starts (or restarts) worker i.
func (s *sut) startWorker(ctx context.Context, i int) error {
	return s.restart(ctx, workerName(i), s.workerSpec(i))
}

// workersOf names the running worker processes of channel.
func (s *sut) workersOf(channel string) []string {
	var out []string
	if channel == "telegram" {
		for i := range 2 {
			if s.proc(workerName(i)) != nil {
				out = append(out, workerName(i))
			}
		}
		return out
	}
	if s.proc(channelWorkerName(channel)) != nil {
		out = append(out, channelWorkerName(channel))
	}
	return out
}

// daemonURL is a daemon's HTTP base URL, or "" before its first start.
func (s *sut) daemonURL(name string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	port, ok := s.ports[name]
	if !ok {
		return ""
	}
	return "http://" + procs.Addr(port)
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
	names := []string{nameShop, namePublisher, workerName(1), workerName(0)}
	for _, ch := range fallbackChannels() {
		names = append(names, channelWorkerName(ch))
	}
	names = append(names, nameEmulator, nameMaxEmulator, nameSMSEmulator, nameMailpit, nameNATS)
	for _, name := range names {
		if p := s.proc(name); p != nil {
			order = append(order, p)
		}
	}
	if s.cluster != nil {
		order = append(order, s.cluster.Processes()...)
	}
	lines, failed = procs.StopInOrder(order)
	s.sup.Close()
	if s.cluster != nil {
		s.cluster.Close()
	}
	return lines, failed
}

// leftovers lists processes the run started that still exist.
func (s *sut) leftovers() []string { return s.sup.Leftovers() }
