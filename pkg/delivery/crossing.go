package delivery

import "strings"

// crossing describes the requests that may reach the provider inside a
// pause its 429 announced: admitted before the worker read the 429, so
// already on the wire or about to be (admission.go). Such a request
// arriving after the provider wrote the 429 is not one the worker sent
// knowing of the pause, and the worker names them in its log so that
// whoever audits the provider's side (the chaos suite) can tell the two
// apart instead of guessing from how long after the 429 it arrived.
type crossing struct {
	// count is how many were in flight when the 429 was read (the metric
	// crossing_429_total).
	count int
	// recipients are those of every request in flight at some moment
	// while the 429's own was, in no order, one per request: the only
	// requests the provider can have decided after writing the 429. It
	// misses the oldest when more than settledMemory requests were
	// settled meanwhile.
	recipients []string
}

// String lists the recipients, comma-separated.
func (c crossing) String() string { return strings.Join(c.recipients, ",") }

// settledMemory is how many of the latest settled requests the admission
// remembers: more than are settled during a 429's round trip at any rate
// a provider allows (Telegram's paid broadcasts, 1000/s, for a second).
const settledMemory = 1024

// settledTickets remembers the recipients of the latest settled requests,
// numbered in the order they were settled.
type settledTickets struct {
	// n counts every request settled so far; the latest is number n.
	n    uint64
	ring [settledMemory]string
}

// add records that a request for recipient was settled.
func (s *settledTickets) add(recipient string) {
	s.n++
	s.ring[s.n%settledMemory] = recipient
}

// since appends to out the recipients of the requests settled after the
// first n (those still remembered), and returns it.
func (s *settledTickets) since(n uint64, out []string) []string {
	from := max(n+1, s.n-min(s.n, settledMemory-1))
	for i := from; i <= s.n; i++ {
		out = append(out, s.ring[i%settledMemory])
	}
	return out
}
