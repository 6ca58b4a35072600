package system

import (
	"container/heap"
	"slices"
	"time"
)

// Wait is one notification's wait for its delivery: from the commit of
// its order until a provider first accepted it.
type Wait struct {
	From, To time.Time
}

// Silence is a stretch of time in which no provider accepted anything while
// at least one notification was waiting: what a customer waiting for one
// experiences as the system standing still.
type Silence struct {
	From, To time.Time
	// Waiting is how many notifications were waiting when it ended.
	Waiting int
}

// Duration is how long the silence lasted.
func (s Silence) Duration() time.Duration { return s.To.Sub(s.From) }

// Silences returns the silences within [from, to] (a zero bound is open),
// longest first. deliveries are the instants a provider accepted a message
// (every copy counts: the system was not standing still); waits are the
// waits of the notifications that were delivered, whose ends are among the
// deliveries. A gap between two deliveries is silent from its start, or
// from the first commit inside it, until its end, if a notification waited
// through it.
func Silences(waits []Wait, deliveries []time.Time, from, to time.Time) []Silence {
	ds := slices.Clone(deliveries)
	slices.SortFunc(ds, func(a, b time.Time) int { return a.Compare(b) })
	ws := slices.Clone(waits)
	slices.SortFunc(ws, func(a, b Wait) int { return a.From.Compare(b.From) })
	var out []Silence
	var waiting waitHeap
	next := 0
	for i := 1; i < len(ds); i++ {
		prev, end := ds[i-1], ds[i]
		if !end.After(prev) {
			continue
		}
		// Every wait committed before end joins the heap; those
		// delivered before end leave it as they come to its top.
		for ; next < len(ws) && ws[next].From.Before(end); next++ {
			heap.Push(&waiting, ws[next])
		}
		for waiting.Len() > 0 && waiting[0].To.Before(end) {
			heap.Pop(&waiting)
		}
		if waiting.Len() == 0 {
			continue
		}
		start := prev
		if first := waiting.earliestFrom(end); first.After(start) {
			start = first
		}
		if !from.IsZero() && start.Before(from) {
			start = from
		}
		stop := end
		if !to.IsZero() && stop.After(to) {
			stop = to
		}
		if stop.After(start) {
			out = append(out, Silence{From: start, To: stop, Waiting: waiting.countUntil(end)})
		}
	}
	slices.SortStableFunc(out, func(a, b Silence) int { return int(b.Duration() - a.Duration()) })
	return out
}

// waitHeap holds waits ordered by their end, so that finished ones leave
// first.
type waitHeap []Wait

func (h waitHeap) Len() int           { return len(h) }
func (h waitHeap) Less(i, j int) bool { return h[i].To.Before(h[j].To) }
func (h waitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *waitHeap) Push(x any)        { *h = append(*h, x.(Wait)) }
func (h *waitHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	*h = old[:len(old)-1]
	return w
}

// earliestFrom returns the earliest commit among the waits still open at
// end (the heap holds no wait that ended before it).
func (h waitHeap) earliestFrom(end time.Time) time.Time {
	var first time.Time
	for _, w := range h {
		if !w.To.Before(end) && (first.IsZero() || w.From.Before(first)) {
			first = w.From
		}
	}
	return first
}

// countUntil counts the waits open at end.
func (h waitHeap) countUntil(end time.Time) int {
	n := 0
	for _, w := range h {
		if !w.To.Before(end) {
			n++
		}
	}
	return n
}
