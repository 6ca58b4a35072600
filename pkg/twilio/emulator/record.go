package emulator

import (
	"maps"
	"slices"
	"time"
)

// Message is a message the emulator created.
type Message struct {
	// SID is the sid returned to the sender: SM followed by 32 hex digits,
	// counting from 1.
	SID string `json:"sid"`
	// To is the recipient's number. (The emulator is a test tool: its
	// records hold numbers, its logs never do.)
	To string `json:"to"`
	// From or MessagingServiceSID is the sender, as sent.
	From                string `json:"from,omitempty"`
	MessagingServiceSID string `json:"messaging_service_sid,omitempty"`
	// Body is the text as sent.
	Body string `json:"body"`
	// Encoding is "GSM-7" or "UCS-2".
	Encoding string `json:"encoding"`
	// NumSegments is how many segments the body is sent as.
	NumSegments int `json:"num_segments"`
	// Status is the status the creation answered: "queued" (From) or
	// "accepted" (MessagingServiceSid).
	Status string `json:"status"`
	// Time is when the emulator created the message, on its clock.
	Time time.Time `json:"time"`
	// SendAt is when the sender's queue releases it to the carrier (Time
	// when the limits are off).
	SendAt time.Time `json:"send_at"`
	// ResponseDropped is set when the connection was dropped instead of
	// answering (fault mode deliver-drop): the sender did not learn of it.
	ResponseDropped bool `json:"response_dropped,omitempty"`
}

// Stats counts what the emulator saw since it was created or reset.
type Stats struct {
	// Since is when counting started, on the emulator's clock.
	Since time.Time `json:"since"`
	// Requests counts API requests (control endpoints excluded).
	Requests int64 `json:"requests"`
	// ByCode counts answers per HTTP status. Dropped and blackholed
	// requests have no status and are not counted here.
	ByCode map[int]int64 `json:"by_code"`
	// ByErrorCode counts error answers per Twilio error code.
	ByErrorCode map[int]int64 `json:"by_error_code"`
	// RateLimited counts 429 answers.
	RateLimited int64 `json:"rate_limited"`
	// InPause counts requests that arrived inside a 429 pause whose answer
	// had been written SenderReactionTime before or more: requests sent by
	// a sender that could have known better.
	InPause int64 `json:"in_pause"`
	// InPauseRequests describes the first MaxInPauseKept requests counted
	// in InPause: who sent each, to whom, and the 429 that announced the
	// pause, so that a harness that kills workers can tell a request its
	// sender could not have held back from one it sent knowing of the
	// pause.
	InPauseRequests []InPauseRequest `json:"in_pause_requests,omitempty"`
	// AuthFailures counts 401 answers.
	AuthFailures int64 `json:"auth_failures"`
	// Created counts created messages, including those whose answer was
	// dropped; Segments counts their segments.
	Created  int64 `json:"created"`
	Segments int64 `json:"segments"`
	// Faulted counts requests hit by an outage, ByFault per fault mode.
	Faulted int64               `json:"faulted"`
	ByFault map[FaultMode]int64 `json:"by_fault"`
	// Dropped counts connections closed without an answer.
	Dropped int64 `json:"dropped"`
	// MaxConcurrent is the most API requests seen in progress at once.
	MaxConcurrent int64 `json:"max_concurrent"`
	// QueueBacklogSeconds is how long the fullest sender queue needs to
	// drain now; MaxQueueBacklogSeconds the longest a message waited in
	// one. A sender that keeps to its number's rate keeps them near zero.
	QueueBacklogSeconds    float64 `json:"queue_backlog_seconds"`
	MaxQueueBacklogSeconds float64 `json:"max_queue_backlog_seconds"`
	// MessagesKept is how many created messages are still held (see
	// Config.MaxMessages).
	MessagesKept int `json:"messages_kept"`
}

// MaxInPauseKept bounds Stats.InPauseRequests.
const MaxInPauseKept = 100

// InPauseRequest is one request that arrived inside a pause whose 429 had
// been written SenderReactionTime before or more (counted in
// Stats.InPause).
type InPauseRequest struct {
	// To is the message's To parameter; empty for a request that creates
	// no message (the account's) or names no recipient.
	To string `json:"to,omitempty"`
	// Arrived is when the request arrived, on the emulator's clock.
	Arrived time.Time `json:"arrived"`
	// PauseLeft is how much of the pause was left then.
	PauseLeft time.Duration `json:"pause_left"`
	// UserAgent is the request's User-Agent header.
	UserAgent string `json:"user_agent,omitempty"`
	// Opener is the request whose 429 announced the pause.
	Opener PauseOpener `json:"opener"`
}

// PauseOpener is a request answered with the 429 that announced a pause.
type PauseOpener struct {
	// To is as in InPauseRequest.
	To string `json:"to,omitempty"`
	// Arrived is when the request arrived; Answered when its 429 was
	// written to the connection. A sender that died in between never read
	// it: the write to a closed connection succeeds all the same.
	Arrived  time.Time `json:"arrived"`
	Answered time.Time `json:"answered"`
	// UserAgent is the request's User-Agent header: the sms worker puts
	// its process id there.
	UserAgent string `json:"user_agent,omitempty"`
}

// clone returns a deep copy.
func (s *Stats) clone() Stats {
	c := *s
	c.InPauseRequests = slices.Clone(s.InPauseRequests)
	c.ByCode = maps.Clone(s.ByCode)
	c.ByErrorCode = maps.Clone(s.ByErrorCode)
	c.ByFault = maps.Clone(s.ByFault)
	return c
}

func newStats(since time.Time) Stats {
	return Stats{
		Since:       since,
		ByCode:      make(map[int]int64),
		ByErrorCode: make(map[int]int64),
		ByFault:     make(map[FaultMode]int64),
	}
}

// messageLog keeps the most recent created messages in a ring.
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
