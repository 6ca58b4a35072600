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
	fmt.Fprintf(w, "kills survived  publisher %d, telegram workers %d, channel workers %d (%s), all SIGKILL\n",
		f.PublisherKills, f.WorkerKills, f.ChannelWorkerKills, byProcess(f.KillsBy))
	if cl := f.Cluster; cl != nil {
		fmt.Fprintf(w, "cluster         3 nodes, 3 replicas: %d node restarts on their stores (%d with SIGKILL), %d node kills (%d of NOTIFY's leader), partitions %s (%d of NOTIFY's leader), step-downs %s\n",
			cl.NodeRestarts, cl.HardRestarts, cl.NodeKills, cl.LeaderKills, counts(cl.Partitions), cl.LeaderPartitions, counts(cl.StepDowns))
		fmt.Fprintf(w, "elections       NOTIFY's next leader after its leader was killed or cut off: %s; after a step-down: %s\n",
			durations(cl.Elections), durations(cl.StepDownElections))
	} else {
		fmt.Fprintf(w, "nats-server     %d restarts on the same store and port (%d with SIGKILL)\n", f.NATSRestarts, f.HardNATSRestarts)
	}
	fmt.Fprintf(w, "Mailpit         %d restarts on the same ports and database (%d with SIGKILL)\n", f.MailpitRestarts, f.HardMailpit)
	fmt.Fprintf(w, "hot standby     started %d times\n", f.StandbyStarts)
	fmt.Fprintf(w, "Telegram        outages %s, %d of them longer than fallback_after %v; %d scripted 429s; %d chats blocked during the run\n",
		counts(f.Outages), f.LongOutages, c.Channels.FallbackAfter, f.Pauses, f.Blocks)
	fmt.Fprintf(w, "MAX, SMS        faults %s\n", counts(f.ProviderFaults))
	e := f.Emulator
	fmt.Fprintf(w, "Telegram emu    %d requests, %d delivered, %d 429s (%d sent inside a pause, %d crossed the 429 on the wire, %d in flight when announced, %d punished), %d hit by outages\n",
		e.Requests, e.Delivered, e.RateLimited, e.SentInAnyPause, e.SentCrossing429, e.InAnyPause, e.InPause, e.Faulted)
	m, t := f.MaxEmulator, f.SMSEmulator
	fmt.Fprintf(w, "MAX emu         %d requests, %d delivered, %d 429s (%d sent inside a pause), %d hit by outages\n",
		m.Requests, m.Delivered, m.RateLimited, m.SentInPause, m.Faulted)
	fmt.Fprintf(w, "SMS emu         %d requests, %d created, %d 429s (%d sent inside a pause), %d hit by outages\n",
		t.Requests, t.Created, t.RateLimited, t.InPause, t.Faulted)
	fmt.Fprintf(w, "outcomes        %d delivered (%d exactly once) by %s; %d dead on every channel of their route\n",
		f.Delivered, f.DeliveredOnce, reasons(f.DeliveredBy), f.DeadOrders)
	fmt.Fprintf(w, "fallbacks       %s\n", counts(f.Fallbacks))
	fmt.Fprintf(w, "events          %s", reasons(f.Events))
	if n := len(f.DeliveredNoEvent); n > 0 {
		slices.Sort(f.DeliveredNoEvent)
		fmt.Fprintf(w, "; %d delivered orders without a delivered event (%s)", n, strings.Join(f.DeliveredNoEvent[:min(n, 5)], ", "))
	}
	fmt.Fprintln(w)
	if n := len(f.FoundDelivered); n > 0 {
		slices.Sort(f.FoundDelivered)
		fmt.Fprintf(w, "                %d handed on after their channel had delivered them, found delivered by the next one, which sent nothing (%s)\n", n, strings.Join(f.FoundDelivered[:min(n, 5)], ", "))
	}
	if f.HandedOnUndead > 0 {
		fmt.Fprintf(w, "                %d handed on without a dead letter (the worker killed between the two steps, or, %d of them, NATS failing then)\n", f.HandedOnUndead, f.UndeadByNATS)
	}
	fmt.Fprintf(w, "dead letters    %s\n", reasons(f.DeadByReason))
	dups := 0
	for _, n := range f.Duplicates {
		dups += n
	}
	fmt.Fprintf(w, "duplicates      %d extra copies over all providers", dups)
	for _, cause := range slices.Sorted(maps.Keys(f.Duplicates)) {
		fmt.Fprintf(w, "; %d %s", f.Duplicates[cause], cause)
	}
	fmt.Fprintln(w)
	n := f.Duplicates[CauseWorkerKilled] + f.DeliveredAndDead[CauseWorkerKilled]
	fmt.Fprintf(w, "the window      hit %d times: a worker killed after its provider accepted a message and before recording it", n)
	if len(f.KillGaps) > 0 {
		lo, hi := slices.Min(f.KillGaps), slices.Max(f.KillGaps)
		fmt.Fprintf(w, " (kill %+v to %+v from the accepted copy)", lo.Round(time.Millisecond), hi.Round(time.Millisecond))
	}
	fmt.Fprintln(w)
	if len(f.DeliveredAndDead) > 0 {
		fmt.Fprintf(w, "delivered+gave up %s (delivered, the answer lost, then the channel gave up on it)\n", counts(f.DeliveredAndDead))
	}
	fmt.Fprintf(w, "order           %d violations\n", f.OrderViolations)
	if len(f.Latency) > 0 {
		fmt.Fprintf(w, "commit→delivery p50 %v, p99 %v, max %v over %d orders\n",
			system.Percentile(f.Latency, 50), system.Percentile(f.Latency, 99), system.Percentile(f.Latency, 100), len(f.Latency))
	}
	for i, sl := range f.Silences {
		label := "silence         longest"
		if i > 0 {
			label = "                next"
		}
		during := "no fault under way"
		if len(sl.During) > 0 {
			during = "during " + strings.Join(sl.During, ", ")
		}
		fmt.Fprintf(w, "%s %v without any delivery while orders waited, at +%.1fs (%d waiting; %s)\n",
			label, sl.Duration().Round(time.Millisecond), sl.Offset.Seconds(), sl.Waiting, during)
	}
	fmt.Fprintf(w, "outages         %d calls failed in full Telegram outages, breaker bound %d\n", f.OutageFailing, f.OutageBound)
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

// durations renders a few durations, or their median and range when there
// are many; "none" when empty.
func durations(ds []time.Duration) string {
	switch {
	case len(ds) == 0:
		return "none"
	case len(ds) <= 5:
		parts := make([]string, len(ds))
		for i, d := range ds {
			parts[i] = d.Round(time.Millisecond).String()
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("median %v (%v–%v) over %d", system.Percentile(ds, 50), system.Percentile(ds, 0), system.Percentile(ds, 100), len(ds))
}
