package bench

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/outbox"
)

// natsBenchKind is a publishing mode of `nats bench js pub`.
type natsBenchKind string

const (
	// natsBenchAsync is JetStream async publish, a PubAck per message.
	natsBenchAsync natsBenchKind = "async"
	// natsBenchFast is fast-ingest batch publish (nats-server 2.14+).
	natsBenchFast natsBenchKind = "fast"
)

// natsBenchChats is how many subjects the peer spreads its messages over,
// as the drain spreads rows over drainChats chats.
const natsBenchChats = drainChats

// natsBenchRate reads the rate from the stats line `nats bench` prints:
// "NATS JetStream asynchronous publisher stats: 37,533 msgs/sec ~ ...".
var natsBenchRate = regexp.MustCompile(`stats: ([0-9,]+) msgs/sec`)

// messageShape is what a peer publishes to look like the drained rows: the
// payload size and the headers besides Nats-Msg-Id, which `nats bench
// --dedup` sets itself.
type messageShape struct {
	size    int
	headers []string
}

// shapeOf returns the mean payload size of rows and their headers, with
// values of the same length as the first row's.
func shapeOf(rows []outbox.Row) messageShape {
	total := 0
	for _, r := range rows {
		total += len(r.Payload)
	}
	s := messageShape{size: total / max(1, len(rows))}
	if len(rows) > 0 {
		r := rows[0]
		msg := jetstream.NotificationMsg(r.ChatID, r.Key, r.CreatedAt, "application/json", nil)
		for _, k := range []string{jetstream.HeaderKey, jetstream.HeaderCreatedAt, jetstream.HeaderContentType} {
			s.headers = append(s.headers, k+":"+msg.Header.Get(k))
		}
	}
	return s
}

// drainNATSBench runs the pinned nats CLI's JetStream publish benchmark
// against NOTIFY (fresh, as the stack declares it) with n messages of the
// rows' shape, over natsBenchChats subjects under notify.bench. Its figure
// is the rate the CLI reports (timed from its first publish to its last
// acknowledgement, without its start-up); its CPU is the whole process's.
func (r *runner) drainNATSBench(ctx context.Context, st *stack, kind natsBenchKind, n int, shape messageShape) (drainFigures, error) {
	if err := freshStream(ctx, st); err != nil {
		return drainFigures{}, err
	}
	args := []string{"-s", st.natsURL, "bench", "js", "pub", string(kind),
		"--msgs", strconv.Itoa(n), "--size", strconv.Itoa(shape.size),
		"--stream", jetstream.StreamNotify, "--dedup", "--no-progress",
		"--multisubject", "--multisubjectmax", strconv.Itoa(natsBenchChats)}
	for _, h := range shape.headers {
		args = append(args, "-H", h)
	}
	args = append(args, "notify.bench")
	cctx, cancel := context.WithTimeout(ctx, drainTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, r.bin("nats"), args...)
	cmd.Env = append(cmd.Environ(), "NATS_CONTEXT=", "HOME="+st.dir) // no user context or config
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	nats0, _ := ProcessCPU(st.nats.Pid())
	err := cmd.Run()
	nats1, _ := ProcessCPU(st.nats.Pid())
	if err != nil {
		return drainFigures{}, fmt.Errorf("nats bench js pub %s: %w: %s", kind, err, lastLines(out.String(), 5))
	}
	m := natsBenchRate.FindStringSubmatch(out.String())
	if m == nil {
		return drainFigures{}, fmt.Errorf("nats bench js pub %s printed no rate: %s", kind, lastLines(out.String(), 5))
	}
	rate, err := strconv.ParseFloat(strings.ReplaceAll(m[1], ",", ""), 64)
	if err != nil || rate <= 0 {
		return drainFigures{}, fmt.Errorf("nats bench js pub %s: rate %q", kind, m[1])
	}
	var cpu time.Duration
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if got, err := streamMsgs(ctx, st.js); err != nil || got != uint64(n) {
		return drainFigures{}, fmt.Errorf("after nats bench js pub %s NOTIFY holds %d messages, want %d (%v)", kind, got, n, err)
	}
	return drainFigures{n: n, wall: time.Duration(float64(n) / rate * float64(time.Second)), self: cpu, nats: nats1 - nats0}, nil
}

// lastLines returns the last n lines of s, on one line.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return oneLine(strings.Join(lines[max(0, len(lines)-n):], " / "))
}
