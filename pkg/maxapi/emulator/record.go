package emulator

import (
	"maps"
	"slices"
	"time"
)

// Message is a message the emulator delivered.
type Message struct {
	// MessageID is the mid returned to the sender, such as
	// "mid.0000000000000001": unique across the emulator's life.
	MessageID string `json:"message_id"`
	// Seq is the message's sequence number in its dialog or chat, from 1.
	Seq int64 `json:"seq"`
	// Recipient is the user or chat the message was delivered to.
	Recipient
	// Text is the text as sent, markup included.
	Text string `json:"text"`
	// Format is the format as sent: "html", "markdown" or empty.
	Format string `json:"format,omitempty"`
	// Notify is the notify flag as sent (true when absent).
	Notify bool `json:"notify"`
	// DisableLinkPreview is the disable_link_preview query parameter.
	DisableLinkPreview bool `json:"disable_link_preview,omitempty"`
	// Attachments is how many attachments were sent.
	Attachments int `json:"attachments,omitempty"`
	// Images are the image attachments: their URL as sent (or token:…).
	Images []string `json:"images,omitempty"`
	// Buttons are the inline keyboard's rows as sent.
	Buttons [][]Button `json:"buttons,omitempty"`
	// Time is when the emulator accepted the message, on its clock, with
	// nanosecond precision.
	Time time.Time `json:"time"`
	// ResponseDropped is set when the connection was dropped instead of
	// answering (fault mode deliver-drop): the sender did not learn of it.
	ResponseDropped bool `json:"response_dropped,omitempty"`
}

// Endpoint names counted in Stats.ByEndpoint.
const (
	EndpointSend  = "POST /messages"
	EndpointMe    = "GET /me"
	EndpointOther = "other"
)

// Stats counts what the emulator saw since it was created or reset.
type Stats struct {
	// Since is when counting started, on the emulator's clock.
	Since time.Time `json:"since"`
	// Requests counts API requests (control endpoints excluded).
	Requests int64 `json:"requests"`
	// ByEndpoint counts requests per endpoint: "POST /messages", "GET
	// /me" or "other".
	ByEndpoint map[string]int64 `json:"by_endpoint"`
	// ByCode counts answers per HTTP status. Dropped and blackholed
	// requests have no status and are not counted here.
	ByCode map[int]int64 `json:"by_code"`
	// RateLimited counts 429 answers.
	RateLimited int64 `json:"rate_limited"`
	// InPause counts requests decided inside an announced 429 pause,
	// after the simulated latency. A sender that pauses everything on a
	// 429 keeps it at zero when it has one request in flight at a time;
	// requests already in flight when a 429 is answered can land here.
	InPause int64 `json:"in_pause"`
	// SentInPause counts requests that arrived while a pause was in force
	// whose 429 had been written to its sender's connection at least
	// SenderReactionTime before, judged on arrival, before any simulated
	// latency: requests sent after the sender could have known of the
	// pause. It is the figure a pausing sender keeps at zero whatever its
	// concurrency. Each one is logged at WARN level.
	SentInPause int64 `json:"sent_in_pause"`
	// SentInPauseRequests describes the first MaxSentInPauseKept requests
	// counted in SentInPause: who sent each, and the 429s that announced
	// the pauses in force, so that a harness that kills workers can tell a
	// request its sender could not have held back from one it sent
	// knowing of the pause.
	SentInPauseRequests []SentInPause `json:"sent_in_pause_requests,omitempty"`
	// SentCrossing429 counts requests that arrived after a pause had been
	// decided but before its sender could have read the 429 announcing it:
	// they crossed the answer, and no sender could have held them back.
	// Not part of SentInPause.
	SentCrossing429 int64 `json:"sent_crossing_429"`
	// Delivered counts delivered messages, including those whose answer
	// was dropped.
	Delivered int64 `json:"delivered"`
	// Faulted counts requests hit by an outage.
	Faulted int64 `json:"faulted"`
	// ByFault counts requests hit per fault mode.
	ByFault map[FaultMode]int64 `json:"by_fault"`
	// Dropped counts connections closed without an answer (drop,
	// deliver-drop, and blackholed requests released by the emulator).
	Dropped int64 `json:"dropped"`
	// MessagesKept is how many delivered messages are still held (see
	// Config.MaxMessages).
	MessagesKept int `json:"messages_kept"`
}

// MaxSentInPauseKept bounds Stats.SentInPauseRequests.
const MaxSentInPauseKept = 100

// SentInPause is one request that arrived inside a pause whose 429 had
// been written (counted in Stats.SentInPause).
type SentInPause struct {
	// Endpoint is EndpointSend or EndpointMe.
	Endpoint string `json:"endpoint"`
	// Recipient is the message's recipient (u<user id> or c<chat id>);
	// empty for GET /me, or when the request names no valid recipient.
	Recipient string `json:"recipient,omitempty"`
	// Arrived is when the request arrived, on the emulator's clock.
	Arrived time.Time `json:"arrived"`
	// PauseLeft is how much of the pause was left then.
	PauseLeft time.Duration `json:"pause_left"`
	// UserAgent is the request's User-Agent header.
	UserAgent string `json:"user_agent,omitempty"`
	// Openers are the requests whose 429s announced the pauses in force.
	Openers []PauseOpener `json:"openers"`
}

// PauseOpener is a request answered with a 429 that announced a pause.
type PauseOpener struct {
	// Endpoint and Recipient are as in SentInPause.
	Endpoint  string `json:"endpoint"`
	Recipient string `json:"recipient,omitempty"`
	// Arrived is when the request arrived; Answered when its 429 was
	// written to the connection. A sender that died in between never read
	// it: the write to a closed connection succeeds all the same.
	Arrived  time.Time `json:"arrived"`
	Answered time.Time `json:"answered"`
	// UserAgent is the request's User-Agent header: the max worker puts
	// its process id there.
	UserAgent string `json:"user_agent,omitempty"`
}

// clone returns a deep copy.
func (s *Stats) clone() Stats {
	c := *s
	c.SentInPauseRequests = slices.Clone(s.SentInPauseRequests)
	for i := range c.SentInPauseRequests {
		c.SentInPauseRequests[i].Openers = slices.Clone(c.SentInPauseRequests[i].Openers)
	}
	c.ByEndpoint = maps.Clone(s.ByEndpoint)
	c.ByCode = maps.Clone(s.ByCode)
	c.ByFault = maps.Clone(s.ByFault)
	return c
}

func newStats(since time.Time) Stats {
	return Stats{
		Since:      since,
		ByEndpoint: make(map[string]int64),
		ByCode:     make(map[int]int64),
		ByFault:    make(map[FaultMode]int64),
	}
}

// messageLog keeps the most recent delivered messages in a ring.
type messageLog struct {
	buf   []Message
	start int // index of the oldest message once the ring is full
	max   int
}

func (l *messageLog) add(m Message) {
	if len(l.buf) < l.max {
		l.buf = append(l.buf, m)
		return
	}
	l.buf[l.start] = m
	l.start = (l.start + 1) % l.max
}

// list returns the kept messages, oldest first, that keep accepts.
func (l *messageLog) list(keep func(*Message) bool) []Message {
	out := make([]Message, 0, len(l.buf))
	for _, part := range [][]Message{l.buf[l.start:], l.buf[:l.start]} {
		for i := range part {
			if keep == nil || keep(&part[i]) {
				out = append(out, part[i])
			}
		}
	}
	return out
}
