package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

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

// The fallback channels' providers: test credentials only ever sent to the
// emulators.
const (
	// maxToken is the bot token the MAX emulator accepts.
	maxToken = "DEMO-max-emulator-token"
	// twilioSID and twilioToken are the SMS emulator's test account.
	twilioSID   = "AC00000000000000000000000000000000"
	twilioToken = "emulator-auth-token"
	// smsFrom is the shop's sender number.
	smsFrom = "+15005550006"
	// mailFrom is the shop's sender address; mailDomain the right-hand
	// side of every Message-ID.
	mailFrom   = "Demo Shop <orders@shop.example>"
	mailDomain = "shop.example"
)

// maxBlockedUsers are MAX users who stopped the bot: MAX answers 403 and the
// max worker moves their notifications on.
var maxBlockedUsers = []int64{7000001}

// Settings the demo gives the workers so that fallback shows within a
// minute: production keeps a notification on Telegram for 2 minutes before
// the next channel gets it; the SMS sender releases 10 segments a second
// (an international long code) instead of 1, and the email worker sends 20
// a second instead of 5.
const (
	demoFallbackAfter     = "5s"
	demoSMSSegmentsPerSec = "10"
	demoEmailRate         = "20"
)

// stack is the running system.
type stack struct {
	sup *procs.Supervisor

	natsURL     string
	natsMonitor string
	// cluster is the three-node NATS cluster of -cluster (nil on one
	// server); declaration the JetStream declaration every daemon reads
	// there (3 replicas).
	cluster     *system.Cluster
	declaration string
	emulatorURL string // the Telegram emulator; empty with the real Telegram
	maxURL      string
	smsURL      string
	mailpitURL  string // Mailpit's web UI and REST API
	smtpAddr    string
	// workerURLs are each channel worker's HTTP endpoints, by channel.
	workerURLs   map[string]string
	publisherURL string
	shopURL      string
	shopDB       string // the shop's database, with the outbox

	// stopOrder is the order in which the processes are stopped: the
	// application first, the providers, then NATS (whose processes are
	// looked up at the stop: a cluster node may have been restarted).
	stopOrder []*procs.Process
	nats      *procs.Process
}

// destinations are where the providers record what they accepted.
func (s *stack) destinations() system.Destinations {
	return system.Destinations{Telegram: s.emulatorURL, Max: s.maxURL, SMS: s.smsURL, Mailpit: s.mailpitURL}
}

// startStack starts every process and waits until each is ready.
func (d *demo) startStack(ctx context.Context) (*stack, error) {
	sup, err := procs.New(filepath.Join(d.cfg.dir, "logs"), nil)
	if err != nil {
		return nil, err
	}
	s := &stack{sup: sup, workerURLs: map[string]string{}}
	d.stack = s
	dataDir := filepath.Join(d.cfg.dir, "data")
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return nil, err
	}
	db := filepath.Join(dataDir, "shop.db")
	s.shopDB = db
	clean := system.CleanEnv()
	var started []*procs.Process // in start order
	start := func(nports int, build func(ports []int) (procs.Spec, string, error)) error {
		p, err := d.startProcess(ctx, nports, build)
		if p != nil {
			started = append(started, p)
		}
		return err
	}

	// NATS, from the committed configuration with demo addresses: one
	// server, or the three nodes of -cluster.
	if d.cfg.cluster {
		if err := d.startCluster(ctx, s, dataDir, clean); err != nil {
			return s, err
		}
	} else {
		s.nats, err = d.startProcess(ctx, 2, func(ports []int) (procs.Spec, string, error) {
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
	}

	// The providers: the Telegram emulator (unless the real one), the MAX
	// and SMS emulators, Mailpit.
	apiURL := ""
	var workerEnv []string
	workerUnset := clean
	if d.cfg.real == nil {
		err = start(1, func(ports []int) (procs.Spec, string, error) {
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
	err = start(1, func(ports []int) (procs.Spec, string, error) {
		s.maxURL = "http://" + procs.Addr(ports[0])
		blocked := make([]string, len(maxBlockedUsers))
		for i, u := range maxBlockedUsers {
			blocked[i] = "u" + strconv.FormatInt(u, 10)
		}
		args := []string{"-http", procs.Addr(ports[0]), "-token", maxToken, "-blocked", strings.Join(blocked, ","),
			"-latency", d.cfg.apiLatency.String(), "-seed", strconv.FormatInt(d.cfg.seed, 10)}
		return procs.Spec{Name: "max-emulator", Path: d.binPath("max-emulator"), Args: args, Unset: clean},
			s.maxURL + "/emulator/healthz", nil
	})
	if err != nil {
		return s, err
	}
	err = start(1, func(ports []int) (procs.Spec, string, error) {
		s.smsURL = "http://" + procs.Addr(ports[0])
		args := []string{"-http", procs.Addr(ports[0]), "-account-sid", twilioSID, "-auth-token", twilioToken,
			"-segments-per-second", demoSMSSegmentsPerSec, "-latency", d.cfg.apiLatency.String(), "-seed", strconv.FormatInt(d.cfg.seed, 10)}
		return procs.Spec{Name: "sms-emulator", Path: d.binPath("sms-emulator"), Args: args, Unset: clean},
			s.smsURL + "/emulator/healthz", nil
	})
	if err != nil {
		return s, err
	}
	err = start(2, func(ports []int) (procs.Spec, string, error) {
		s.smtpAddr, s.mailpitURL = procs.Addr(ports[0]), "http://"+procs.Addr(ports[1])
		args := system.MailpitArgs(s.smtpAddr, procs.Addr(ports[1]), filepath.Join(dataDir, "mailpit.db"))
		return procs.Spec{Name: "mailpit", Path: d.binPath("mailpit"), Args: args, Unset: clean}, s.mailpitURL + "/readyz", nil
	})
	if err != nil {
		return s, err
	}

	// The channel workers.
	workers := []struct {
		channel string
		args    []string
		env     []string
		unset   []string
	}{
		{"telegram", []string{"-telegram-api", apiURL}, workerEnv, workerUnset},
		{"max", []string{"-max-api", s.maxURL}, []string{"MAX_BOT_TOKEN=" + maxToken}, clean},
		{"email", []string{"-smtp", s.smtpAddr, "-smtp-tls", "none", "-from", mailFrom, "-message-id-domain", mailDomain,
			"-rate", demoEmailRate}, nil, clean},
		{"sms", []string{"-sms-api", s.smsURL, "-from", smsFrom, "-segments-per-second", demoSMSSegmentsPerSec},
			[]string{"TWILIO_ACCOUNT_SID=" + twilioSID, "TWILIO_AUTH_TOKEN=" + twilioToken}, clean},
	}
	if d.cfg.real == nil {
		workers[0].args = append(workers[0].args, "-fallback-after-transactional", demoFallbackAfter)
	}
	for _, w := range workers {
		name := w.channel + "-worker"
		err = start(1, func(ports []int) (procs.Spec, string, error) {
			url := "http://" + procs.Addr(ports[0])
			s.workerURLs[w.channel] = url
			args := append(append([]string{"-nats", s.natsURL, "-http", procs.Addr(ports[0]), "-stats-interval", "1s",
				"-pause-file", filepath.Join(dataDir, name+".pause")}, s.declarationArgs()...), w.args...)
			return procs.Spec{Name: name, Path: d.binPath(name), Args: args, Env: w.env, Unset: w.unset}, url + "/readyz", nil
		})
		if err != nil {
			return s, err
		}
	}

	// The shop follows the pipeline's events (-nats), so GET /orders/{id}
	// tells what became of each notification.
	err = start(1, func(ports []int) (procs.Spec, string, error) {
		s.shopURL = "http://" + procs.Addr(ports[0])
		return procs.Spec{Name: "shop", Path: d.binPath("shop"), Args: []string{"-db", db, "-http", procs.Addr(ports[0]), "-nats", s.natsURL}, Unset: clean},
			s.shopURL + "/healthz", nil
	})
	if err != nil {
		return s, err
	}
	err = start(1, func(ports []int) (procs.Spec, string, error) {
		s.publisherURL = "http://" + procs.Addr(ports[0])
		args := append([]string{"-db", db, "-nats", s.natsURL, "-http", procs.Addr(ports[0])}, s.declarationArgs()...)
		return procs.Spec{Name: "publisher", Path: d.binPath("publisher"), Args: args, Unset: clean},
			s.publisherURL + "/readyz", nil
	})
	if err != nil {
		return s, err
	}

	// Stop the application first, then the workers, the providers, NATS
	// last: the reverse of the start.
	for i := len(started) - 1; i >= 0; i-- {
		s.stopOrder = append(s.stopOrder, started[i])
	}
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

// declarationArgs are the flags that give a daemon the JetStream
// declaration of the cluster (none on one server: the defaults).
func (s *stack) declarationArgs() []string {
	if s.declaration == "" {
		return nil
	}
	return []string{"-jetstream-config", s.declaration}
}

// startCluster starts the three nodes of -cluster, waits for the cluster's
// meta leader and provisions every stream, consumer and bucket with three
// replicas, as docs/RUNBOOK.md tells an operator to: tgnotify provision
// with a declaration of replicas: 3, which the daemons then read too.
func (d *demo) startCluster(ctx context.Context, s *stack, dataDir string, clean []string) error {
	c, err := system.StartCluster(ctx, system.ClusterOptions{
		Sup: s.sup, Bin: d.cfg.bin, ConfigDir: d.cfg.clusterDir, Dir: filepath.Join(dataDir, "nats"),
		Unset: clean, ReadyTimeout: d.cfg.readyWait, StopTimeout: d.cfg.stopWait,
		Started: func(p *procs.Process) {
			fmt.Fprintf(d.out, "started %-16s pid %-7d log %s\n", p.Name(), p.Pid(), d.rel(p.LogPath()))
		},
	})
	if err != nil {
		return err
	}
	s.cluster = c
	s.natsURL = c.URLs()
	s.declaration = filepath.Join(d.cfg.dir, "jetstream.yaml")
	if err := os.WriteFile(s.declaration, []byte("# -cluster: every stream, consumer and bucket on all three nodes.\nreplicas: 3\n"), 0o644); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, d.cfg.readyWait)
	defer cancel()
	nc, err := nats.Connect(s.natsURL, nats.Name("demo-provision"), nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	if err != nil {
		return err
	}
	defer nc.Close()
	if err := system.WaitMetaLeader(wctx, nc); err != nil {
		return err
	}
	var out []byte
	for {
		cmd := exec.CommandContext(wctx, d.binPath("tgnotify"), "provision", "-config", s.declaration, "-nats", s.natsURL, "-timeout", "10s")
		cmd.Env = cleanEnviron(clean)
		if out, err = cmd.CombinedOutput(); err == nil {
			break
		}
		t := time.NewTimer(500 * time.Millisecond) // the cluster may still be placing its first assets
		select {
		case <-wctx.Done():
			t.Stop()
			return fmt.Errorf("tgnotify provision on the cluster: %v\n%s", err, out)
		case <-t.C:
		}
	}
	fmt.Fprintf(d.out, "provisioned NOTIFY, NOTIFY_DEAD, the consumers and the buckets with 3 replicas: bin/tgnotify provision -config %s -nats %s\n",
		d.rel(s.declaration), s.natsURL)
	return nil
}

// cleanEnviron is this process's environment without the names in unset.
func cleanEnviron(unset []string) []string {
	drop := map[string]bool{}
	for _, n := range unset {
		drop[n] = true
	}
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !drop[name] {
			env = append(env, kv)
		}
	}
	return env
}

// natsProcesses are the running NATS processes: the server, or the
// cluster's nodes.
func (s *stack) natsProcesses() []*procs.Process {
	if s.cluster != nil {
		return s.cluster.Processes()
	}
	if s.nats != nil {
		return []*procs.Process{s.nats}
	}
	return nil
}

// stop stops the processes in order and returns one line per process.
func (s *stack) stop() (lines []string, failed bool) {
	if s == nil {
		return nil, false
	}
	if s.cluster != nil {
		defer s.cluster.Close()
	}
	stopped := map[*procs.Process]bool{}
	order := s.stopOrder
	if len(order) == 0 { // start-up failed half way: whatever runs, newest first
		all := s.sup.Processes()
		for i := len(all) - 1; i >= 0; i-- {
			order = append(order, all[i])
		}
	} else {
		order = append(order, s.natsProcesses()...)
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
