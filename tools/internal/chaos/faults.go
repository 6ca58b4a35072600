package chaos

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// KillRecord is one SIGKILL of a daemon.
type KillRecord struct {
	Process string
	Pid     int
	// At is the moment of the signal.
	At time.Time
}

// NATSRestart is one restart of nats-server: of the one server, or of a
// cluster node.
type NATSRestart struct {
	Hard     bool
	Down, Up time.Time
	// Node is the cluster node restarted ("" on one server).
	Node string `json:",omitempty"`
}

// ClusterFault is one node kill, step-down or partition of a cluster run,
// as it happened.
type ClusterFault struct {
	Kind Kind
	// Node is the node killed or partitioned, or the leader that stepped
	// down; Target what stepped down; Clients what a partition did to the
	// node's clients.
	Node, Target, Clients string `json:",omitempty"`
	// WasLeader says the node led NOTIFY when the fault began.
	WasLeader bool `json:",omitempty"`
	// Start and End bound the fault: a killed node's time down, a
	// partition's time cut off; a step-down's request.
	Start, End time.Time
	// Leader is the new leader of NOTIFY (of Target for a step-down),
	// found Elected after Start; empty when it did not change or was not
	// watched.
	Leader  string        `json:",omitempty"`
	Elected time.Duration `json:",omitempty"`
	// Healthy is how long after End every node was current again.
	Healthy time.Duration `json:",omitempty"`
}

// OutageRecord is one Telegram outage as it happened.
type OutageRecord struct {
	Outage emulator.Outage
	// Long marks an outage longer than the workers' fallback_after.
	Long       bool `json:",omitempty"`
	Start, End time.Time
	// Failing counts the requests the outage made fail, from the
	// emulator's counters (requests hit by 5xx, json5xx, drop and
	// blackhole; deliveries whose answer was dropped for deliver-drop;
	// none for slow).
	Failing int64
	// Lives is how long each worker process overlapped the outage.
	Lives []time.Duration
}

// MailpitRestart is one stop of Mailpit, the SMTP server.
type MailpitRestart struct {
	Hard     bool
	Down, Up time.Time
}

// ProviderFaultRecord is one fault of the MAX or SMS emulator as it
// happened.
type ProviderFaultRecord struct {
	Fault      ProviderOutage
	Start, End time.Time
}

// PauseRecord is one scripted 429.
type PauseRecord struct {
	Pause emulator.PauseRequest
	At    time.Time
}

// timeline is what the fault runner did, with wall-clock times comparable
// with the emulator's record (same machine, same clock).
type timeline struct {
	mu          sync.Mutex
	kills       []KillRecord
	natsRestart []NATSRestart
	outages     []OutageRecord
	pauses      []PauseRecord
	blocks      map[int64]time.Time
	mailpit     []MailpitRestart
	providers   []ProviderFaultRecord
	cluster     []ClusterFault
	standby     int      // times the standby was started
	problems    []string // fault actions that could not be carried out
}

func (t *timeline) addKill(k KillRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.kills = append(t.kills, k)
}

func (t *timeline) problem(format string, a ...any) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.problems = append(t.problems, fmt.Sprintf(format, a...))
}

// injector carries out a plan's events against the system under test.
type injector struct {
	s     *sut
	nodes *nodeConns // a cluster run's connections to each node
	tl    *timeline
	log   io.Writer // one line per fault
	start time.Time // start of the fault phase
	logMu sync.Mutex
}

// logf writes a fault line with the offset from the start of the phase.
func (in *injector) logf(format string, a ...any) {
	in.logMu.Lock()
	defer in.logMu.Unlock()
	fmt.Fprintf(in.log, "%8.1fs  %s\n", time.Since(in.start).Seconds(), fmt.Sprintf(format, a...))
}

// run executes the events until ctx ends, one goroutine per track so that a
// slow restart on one track does not delay the others. When ctx ends every
// track finishes its current fault (a killed process is started again at
// once, an outage is ended), so the system is whole when run returns.
func (in *injector) run(ctx context.Context, events []Event) {
	tracks := map[string][]Event{}
	for _, e := range events {
		var t string
		switch e.Kind {
		case KillPublisher:
			t = "publisher"
		case KillWorker, StartStandby, StopStandby:
			t = "worker"
		case RestartNATS, KillNode, Partition:
			// One node fault at a time: two nodes down is no quorum.
			t = "nats"
		case StepDown:
			t = "step-down"
		case TelegramOutage, RateLimitStorm:
			t = "telegram"
		case BlockChat:
			t = "block"
		case KillChannelWorker:
			t = "channel-worker"
		case RestartMailpit:
			t = "mailpit"
		case ProviderFault:
			t = "providers"
		}
		tracks[t] = append(tracks[t], e)
	}
	var wg sync.WaitGroup
	for _, evs := range tracks {
		wg.Go(func() {
			for _, e := range evs {
				if !in.waitUntil(ctx, e.At) {
					return
				}
				in.do(ctx, e)
			}
		})
	}
	wg.Wait()
}

// waitUntil waits for the offset at, reporting false if ctx ended first.
func (in *injector) waitUntil(ctx context.Context, at time.Duration) bool {
	t := time.NewTimer(time.Until(in.start.Add(at)))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pause waits d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// do carries out one event. Restarts use a context that outlives ctx, so a
// process killed just before the end of the phase is still brought back.
func (in *injector) do(ctx context.Context, e Event) {
	restartCtx := context.WithoutCancel(ctx)
	switch e.Kind {
	case KillPublisher:
		pid, at, ok := in.s.kill(namePublisher)
		if !ok {
			return
		}
		in.tl.addKill(KillRecord{Process: namePublisher, Pid: pid, At: at})
		pause(ctx, e.Delay)
		if err := in.s.startPublisher(restartCtx); err != nil {
			in.tl.problem("restarting the publisher: %v", err)
			return
		}
		in.logf("killed publisher (pid %d), back after %v", pid, time.Since(at).Round(time.Millisecond))

	case KillWorker:
		i := in.pickWorker(ctx, e.Pick)
		if i < 0 {
			return
		}
		name := workerName(i)
		pid, at, ok := in.s.kill(name)
		if !ok {
			return
		}
		in.tl.addKill(KillRecord{Process: name, Pid: pid, At: at})
		pause(ctx, e.Delay)
		if err := in.s.startWorker(restartCtx, i); err != nil {
			in.tl.problem("restarting %s: %v", name, err)
			return
		}
		in.logf("killed %s (pid %d), back after %v", name, pid, time.Since(at).Round(time.Millisecond))

	case StartStandby:
		if in.s.proc(workerName(1)) != nil {
			return
		}
		if err := in.s.startWorker(restartCtx, 1); err != nil {
			in.tl.problem("starting the standby: %v", err)
			return
		}
		in.tl.mu.Lock()
		in.tl.standby++
		in.tl.mu.Unlock()
		in.logf("started %s (two workers: one pinned, one standby)", workerName(1))

	case StopStandby:
		if err := in.s.stopWorker(1); err != nil {
			in.tl.problem("stopping %s: %v", workerName(1), err)
			return
		}
		in.logf("stopped %s with SIGTERM", workerName(1))

	case RestartNATS:
		if in.s.cluster != nil {
			in.restartNode(ctx, e)
			return
		}
		down := time.Now()
		if err := in.s.stopNATS(e.Hard); err != nil {
			in.tl.problem("stopping nats-server: %v", err)
		}
		pause(ctx, e.Delay)
		if err := in.s.startNATS(restartCtx); err != nil {
			in.tl.problem("restarting nats-server: %v", err)
			return
		}
		r := NATSRestart{Hard: e.Hard, Down: down, Up: time.Now()}
		in.tl.mu.Lock()
		in.tl.natsRestart = append(in.tl.natsRestart, r)
		in.tl.mu.Unlock()
		how := "SIGTERM"
		if e.Hard {
			how = "SIGKILL"
		}
		in.logf("restarted nats-server (%s), down %v", how, r.Up.Sub(r.Down).Round(time.Millisecond))

	case TelegramOutage:
		in.outage(ctx, e.Outage, e.Long)

	case KillChannelWorker:
		name := channelWorkerName(e.Channel)
		pid, at, ok := in.s.kill(name)
		if !ok {
			return
		}
		in.tl.addKill(KillRecord{Process: name, Pid: pid, At: at})
		pause(ctx, e.Delay)
		if err := in.s.startChannelWorker(restartCtx, e.Channel); err != nil {
			in.tl.problem("restarting %s: %v", name, err)
			return
		}
		in.logf("killed %s (pid %d), back after %v", name, pid, time.Since(at).Round(time.Millisecond))

	case RestartMailpit:
		down := time.Now()
		if err := in.s.stopMailpit(e.Hard); err != nil {
			in.tl.problem("stopping Mailpit: %v", err)
		}
		pause(ctx, e.Delay)
		if err := in.s.startMailpit(restartCtx); err != nil {
			in.tl.problem("restarting Mailpit: %v", err)
			return
		}
		r := MailpitRestart{Hard: e.Hard, Down: down, Up: time.Now()}
		in.tl.mu.Lock()
		in.tl.mailpit = append(in.tl.mailpit, r)
		in.tl.mu.Unlock()
		how := "SIGTERM"
		if e.Hard {
			how = "SIGKILL"
		}
		in.logf("restarted Mailpit (%s), SMTP down %v", how, r.Up.Sub(r.Down).Round(time.Millisecond))

	case ProviderFault:
		in.providerFault(ctx, e.Provider)

	case KillNode:
		in.killNode(ctx, e)

	case StepDown:
		in.stepDown(ctx, e)

	case Partition:
		in.partition(ctx, e)

	case RateLimitStorm:
		for _, p := range e.Pauses {
			if err := in.control(restartCtx, http.MethodPost, "/emulator/ratelimit", p.Pause); err != nil {
				in.tl.problem("opening a 429 pause: %v", err)
				continue
			}
			in.tl.mu.Lock()
			in.tl.pauses = append(in.tl.pauses, PauseRecord{Pause: p.Pause, At: time.Now()})
			in.tl.mu.Unlock()
			in.logf("429 scripted: scope %s chat %d retry_after %ds", p.Pause.Scope, p.Pause.ChatID, p.Pause.RetryAfter)
			pause(ctx, p.After)
			if ctx.Err() != nil {
				return
			}
		}

	case BlockChat:
		if err := in.control(restartCtx, http.MethodPost, "/emulator/chats/"+strconv.FormatInt(e.Chat, 10)+"/block", nil); err != nil {
			in.tl.problem("blocking chat %d: %v", e.Chat, err)
			return
		}
		in.tl.mu.Lock()
		if in.tl.blocks == nil {
			in.tl.blocks = map[int64]time.Time{}
		}
		in.tl.blocks[e.Chat] = time.Now()
		in.tl.mu.Unlock()
		in.logf("chat %d blocked the bot", e.Chat)
	}
}

// pickWorker chooses the worker to kill: with two running, the active one
// when pick < 0.75, else the other.
func (in *injector) pickWorker(ctx context.Context, pick float64) int {
	running := []int{}
	for i := range 2 {
		if in.s.proc(workerName(i)) != nil {
			running = append(running, i)
		}
	}
	switch len(running) {
	case 0:
		return -1
	case 1:
		return running[0]
	}
	active := in.s.activeWorker(ctx)
	if active < 0 {
		return running[int(pick*2)%2]
	}
	if pick < 0.75 {
		return active
	}
	return 1 - active
}

// providerFault runs one outage or 429 pause at the MAX or SMS emulator.
func (in *injector) providerFault(ctx context.Context, f ProviderOutage) {
	bg := context.WithoutCancel(ctx)
	base := in.s.maxURL
	if f.Channel == "sms" {
		base = in.s.smsURL
	}
	start := time.Now()
	if f.Mode == "" {
		if err := system.SendJSON(bg, in.s.client, http.MethodPost, base+"/emulator/ratelimit", map[string]int64{"retry_after": f.RetryAfter}); err != nil {
			in.tl.problem("opening a 429 pause at the %s emulator: %v", f.Channel, err)
			return
		}
		pause(ctx, time.Duration(f.RetryAfter)*time.Second)
		in.logf("429 scripted at the %s emulator: retry_after %ds", f.Channel, f.RetryAfter)
	} else {
		body := map[string]any{"mode": f.Mode, "probability": f.Probability, "duration": f.Duration.String()}
		if f.Delay > 0 {
			body["delay"] = f.Delay.String()
		}
		if err := system.SendJSON(bg, in.s.client, http.MethodPost, base+"/emulator/outage", body); err != nil {
			in.tl.problem("starting an outage at the %s emulator: %v", f.Channel, err)
			return
		}
		pause(ctx, f.Duration)
		if err := system.SendJSON(bg, in.s.client, http.MethodDelete, base+"/emulator/outage", nil); err != nil {
			in.tl.problem("ending an outage at the %s emulator: %v", f.Channel, err)
		}
		detail := ""
		if f.Probability < 1 {
			detail = fmt.Sprintf(" (%.0f%% of requests)", f.Probability*100)
		}
		in.logf("%s outage %s%s for %v", f.Channel, f.Mode, detail, time.Since(start).Round(time.Millisecond))
	}
	in.tl.mu.Lock()
	in.tl.providers = append(in.tl.providers, ProviderFaultRecord{Fault: f, Start: start, End: time.Now()})
	in.tl.mu.Unlock()
}

// outage runs one Telegram outage and measures the requests it failed.
func (in *injector) outage(ctx context.Context, o emulator.Outage, long bool) {
	bg := context.WithoutCancel(ctx)
	before, err := in.stats(bg)
	if err != nil {
		in.tl.problem("reading emulator stats: %v", err)
		return
	}
	start := time.Now()
	if err := in.control(bg, http.MethodPost, "/emulator/outage", o); err != nil {
		in.tl.problem("starting an outage: %v", err)
		return
	}
	pause(ctx, o.Duration)
	if err := in.control(bg, http.MethodDelete, "/emulator/outage", nil); err != nil {
		in.tl.problem("ending an outage: %v", err)
	}
	end := time.Now()
	after, err := in.stats(bg)
	if err != nil {
		in.tl.problem("reading emulator stats: %v", err)
		return
	}
	rec := OutageRecord{Outage: o, Long: long, Start: start, End: end, Lives: in.s.livesDuring(start, end)}
	switch o.Mode {
	case emulator.FaultSlow:
	case emulator.FaultDeliverDrop:
		rec.Failing = after.Dropped - before.Dropped
	default:
		rec.Failing = after.Faulted - before.Faulted
	}
	in.tl.mu.Lock()
	in.tl.outages = append(in.tl.outages, rec)
	in.tl.mu.Unlock()
	detail := ""
	if o.Probability < 1 {
		detail = fmt.Sprintf(" (%.0f%% of requests)", o.Probability*100)
	}
	if long {
		detail += " (longer than fallback_after)"
	}
	in.logf("Telegram outage %s%s for %v: %d requests failed", o.Mode, detail, end.Sub(start).Round(time.Millisecond), rec.Failing)
}

// stats reads the emulator's counters.
func (in *injector) stats(ctx context.Context) (emulator.Stats, error) {
	var st emulator.Stats
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := system.GetJSON(ctx, in.s.client, in.s.emulatorURL+"/emulator/stats", &st)
	return st, err
}

// control calls a control endpoint of the Bot API emulator with an
// optional JSON body.
func (in *injector) control(ctx context.Context, method, path string, body any) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return system.SendJSON(ctx, in.s.client, method, in.s.emulatorURL+path, body)
}

// breakerBound is the most requests an outage of the given overlap with
// each worker process may fail: per process, the requests in flight and
// launched until the breaker opens (max-in-flight + breaker-failures − 1),
// one getMe at start, and one half-open probe per breaker-open period.
func breakerBound(w WorkerSettings, lives []time.Duration) int64 {
	var n int64
	for _, d := range lives {
		probes := int64(math.Ceil(d.Seconds() / w.BreakerOpen.Seconds()))
		n += int64(w.MaxInFlight+w.BreakerFailures-1) + 1 + probes
	}
	return n
}
