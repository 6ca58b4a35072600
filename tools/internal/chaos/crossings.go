package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CrossingRecord is one 429 a worker read, from its log, with the
// requests it had in flight while the answered request was: admitted
// before it read the 429, they are the only ones of its requests that may
// reach Telegram after Telegram wrote it (pkg/delivery, crossing.go).
type CrossingRecord struct {
	// Process names the worker; Pid is the process that logged the 429.
	Process string
	Pid     int
	// At is when it logged the 429 (millisecond resolution).
	At time.Time
	// Recipient is the chat whose request was answered with the 429, and
	// Crossed the chats of the requests in flight with it (in_flight_with).
	Recipient string
	Crossed   []string
}

// Log messages and fields of the workers that readCrossings reads
// (internal/workerd, pkg/delivery attempt.go).
const (
	logConfiguration = "configuration"
	logRateLimitHit  = "rate limit hit: pausing every request"
)

// readCrossings reads the 429s every worker of a channel with a rate limit
// logged in dir (the process logs: worker-1.log, worker-2.log, ... for
// Telegram, max-worker.log, sms-worker.log). A log holds the worker's
// successive processes, each beginning with its configuration line, which
// names its pid.
func readCrossings(dir string) ([]CrossingRecord, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "worker-*.log"))
	if err != nil {
		return nil, err
	}
	for _, ch := range []string{"max", "sms"} {
		p := filepath.Join(dir, channelWorkerName(ch)+".log")
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
		}
	}
	var out []CrossingRecord
	for _, p := range paths {
		process := strings.TrimSuffix(filepath.Base(p), ".log")
		recs, err := readCrossingsOf(p, process)
		if err != nil {
			return out, fmt.Errorf("reading %s: %w", p, err)
		}
		out = append(out, recs...)
	}
	return out, nil
}

// readCrossingsOf reads the 429s logged in one worker's log file.
func readCrossingsOf(path, process string) ([]CrossingRecord, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out []CrossingRecord
		pid int
	)
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4*1024*1024)
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		if !strings.HasPrefix(text, "time=") {
			continue // the supervisor's start marker, or a panic's output
		}
		kv, err := parseLogLine(text)
		if err != nil {
			if strings.Contains(text, "msg="+logConfiguration) || strings.Contains(text, strconv.Quote(logRateLimitHit)) {
				return out, fmt.Errorf("line %d: %w", line, err)
			}
			continue // not one of ours: a line cut short by a SIGKILL, say
		}
		switch kv["msg"] {
		case logConfiguration:
			if pid, err = strconv.Atoi(kv["pid"]); err != nil {
				return out, fmt.Errorf("line %d: the configuration line has no pid: %q", line, kv["pid"])
			}
		case logRateLimitHit:
			at, err := time.Parse(time.RFC3339Nano, kv["time"])
			if err != nil {
				return out, fmt.Errorf("line %d: %w", line, err)
			}
			if pid == 0 {
				return out, fmt.Errorf("line %d: a 429 logged before the configuration line", line)
			}
			r := CrossingRecord{Process: process, Pid: pid, At: at, Recipient: kv["recipient"]}
			if c := kv["in_flight_with"]; c != "" {
				r.Crossed = strings.Split(c, ",")
			}
			out = append(out, r)
		}
	}
	return out, sc.Err()
}

// parseLogLine splits a line of log/slog's text handler into its keys and
// values: key=value pairs separated by spaces, a value quoted (Go syntax)
// when it holds a space, a quote or an equals sign.
func parseLogLine(s string) (map[string]string, error) {
	kv := make(map[string]string)
	for s = strings.TrimLeft(s, " "); s != ""; s = strings.TrimLeft(s, " ") {
		eq := strings.IndexByte(s, '=')
		if eq <= 0 || strings.ContainsRune(s[:eq], ' ') {
			return nil, fmt.Errorf("no key=value at %q", s)
		}
		key := s[:eq]
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				return nil, fmt.Errorf("the value of %s: %w", key, err)
			}
			if val, err = strconv.Unquote(q); err != nil {
				return nil, fmt.Errorf("the value of %s: %w", key, err)
			}
			s = s[len(q):]
		} else {
			end := strings.IndexByte(s, ' ')
			if end < 0 {
				end = len(s)
			}
			val, s = s[:end], s[end:]
		}
		kv[key] = val
	}
	if kv["time"] == "" || kv["msg"] == "" {
		return nil, errors.New("no time or msg")
	}
	return kv, nil
}

// crossedBy returns the 429 that pid logged for the request to chat (a
// recipient, as the worker names it) that
// arrived at arrived, if it named crossed among the requests in flight
// with it. The log's time is at most a millisecond coarser
// than the emulator's.
func crossedBy(recs []CrossingRecord, pid int, chat string, arrived time.Time, crossed string) (CrossingRecord, bool) {
	from := arrived.Truncate(time.Millisecond)
	first := -1
	for i, r := range recs {
		if r.Pid == pid && r.Recipient == chat && !r.At.Before(from) && (first < 0 || r.At.Before(recs[first].At)) {
			first = i
		}
	}
	if first < 0 || !slices.Contains(recs[first].Crossed, crossed) {
		return CrossingRecord{}, false
	}
	return recs[first], true
}
