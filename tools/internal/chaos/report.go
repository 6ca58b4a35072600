package chaos

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/system"
)

// maxDetail bounds the lines printed under a failed check.
const maxDetail = 12

// printReport writes the figures and the checks of a run.
func printReport(w io.Writer, c Config, res Result, elapsed time.Duration) {
	f := res.Figures
	fmt.Fprintln(w)
	fmt.Fprintf(w, "================ tgnotify chaos report (%s run, seed %d) ================\n", c.Name, c.Seed)
	fmt.Fprintf(w, "orders          %d planned, %d accepted over %d chats; %d POST /orders (%d repeats answered 200)\n",
		f.Orders, f.Accepted, f.Chats, f.Posts, f.Repeats)
	fmt.Fprintf(w, "kills survived  publisher %d, workers %d (%s), all SIGKILL\n", f.PublisherKills, f.WorkerKills, byProcess(f.KillsBy))
	fmt.Fprintf(w, "nats-server     %d restarts on the same store and port (%d with SIGKILL)\n", f.NATSRestarts, f.HardNATSRestarts)
	fmt.Fprintf(w, "hot standby     started %d times\n", f.StandbyStarts)
	fmt.Fprintf(w, "Telegram        outages %s; %d scripted 429s; %d chats blocked during the run\n", counts(f.Outages), f.Pauses, f.Blocks)
	e := f.Emulator
	fmt.Fprintf(w, "emulator        %d requests, %d delivered, %d 429s (%d sent inside a pause, %d crossed the 429 on the wire, %d in flight when announced, %d punished), %d hit by outages\n",
		e.Requests, e.Delivered, e.RateLimited, e.SentInAnyPause, e.SentCrossing429, e.InAnyPause, e.InPause, e.Faulted)
	fmt.Fprintf(w, "outcomes        %d delivered (%d exactly once), dead letters: %s\n", f.Delivered, f.DeliveredOnce, reasons(f.DeadByReason))
	dups := 0
	for _, n := range f.Duplicates {
		dups += n
	}
	fmt.Fprintf(w, "duplicates      %d extra copies at Telegram", dups)
	for _, cause := range slices.Sorted(maps.Keys(f.Duplicates)) {
		fmt.Fprintf(w, "; %d %s", f.Duplicates[cause], cause)
	}
	fmt.Fprintln(w)
	n := f.Duplicates[CauseWorkerKilled] + f.DeliveredAndDead[CauseWorkerKilled]
	fmt.Fprintf(w, "the window      hit %d times: a worker killed after Telegram accepted a message and before recording it", n)
	if len(f.KillGaps) > 0 {
		lo, hi := slices.Min(f.KillGaps), slices.Max(f.KillGaps)
		fmt.Fprintf(w, " (kill %+v to %+v from the accepted copy)", lo.Round(time.Millisecond), hi.Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	if len(f.DeliveredAndDead) > 0 {
		fmt.Fprintf(w, "delivered+dead  %s (delivered, the answer lost, then the chat blocked)\n", counts(f.DeliveredAndDead))
	}
	fmt.Fprintf(w, "order           %d violations\n", f.OrderViolations)
	if len(f.Latency) > 0 {
		fmt.Fprintf(w, "commit→delivery p50 %v, p99 %v, max %v over %d orders\n",
			system.Percentile(f.Latency, 50), system.Percentile(f.Latency, 99), system.Percentile(f.Latency, 100), len(f.Latency))
	}
	fmt.Fprintf(w, "outages         %d calls failed in full outages, breaker bound %d\n", f.OutageFailing, f.OutageBound)
	fmt.Fprintln(w, "checks")
	for _, c := range res.Checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  [%s] %s\n", mark, c.Text)
		if c.OK {
			continue
		}
		for i, d := range c.Detail {
			if i == maxDetail {
				fmt.Fprintf(w, "         … and %d more\n", len(c.Detail)-maxDetail)
				break
			}
			fmt.Fprintf(w, "         %s\n", d)
		}
	}
	result := "PASS"
	if !res.Passed() {
		result = "FAIL"
	}
	fmt.Fprintf(w, "RESULT: %s in %v (seed %d)\n", result, elapsed.Round(time.Second), c.Seed)
}

// byProcess renders kill counts per process.
func byProcess(m map[string]int) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(m)) {
		if name != namePublisher {
			parts = append(parts, fmt.Sprintf("%s %d", name, m[name]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// counts renders a count per name.
func counts(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var parts []string
	total := 0
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
		total += m[k]
	}
	return fmt.Sprintf("%d (%s)", total, strings.Join(parts, ", "))
}
