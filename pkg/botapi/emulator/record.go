package emulator

import (
	"maps"
	"slices"
	"time"
)

// Message is a message the emulator delivered.
type Message struct {
	// MessageID is the id returned to the sender; ids count from 1 per chat,
	// as Telegram's do in private chats and basic groups.
	MessageID int64 `json:"message_id"`
	// Method is the method that sent it: sendMessage or sendPhoto.
	Method string `json:"method"`
	// ChatID is the chat the message was delivered to.
	ChatID int64 `json:"chat_id"`
	// Text is the text as sent, markup included; for sendPhoto, the
	// caption.
	Text string `json:"text"`
	// ParseMode is the parse_mode as sent.
	ParseMode string `json:"parse_mode,omitempty"`
	// Photo is sendPhoto's photo as sent: its URL, or a file_id.
	Photo string `json:"photo,omitempty"`
	// ShowCaptionAboveMedia is sendPhoto's flag as sent.
	ShowCaptionAboveMedia bool `json:"show_caption_above_media,omitempty"`
	// MessageThreadID is the forum topic, if any.
	MessageThreadID int64 `json:"message_thread_id,omitempty"`
	// DisableNotification, ProtectContent and AllowPaidBroadcast are the
	// flags as sent.
	DisableNotification bool `json:"disable_notification,omitempty"`
	ProtectContent      bool `json:"protect_content,omitempty"`
	AllowPaidBroadcast  bool `json:"allow_paid_broadcast,omitempty"`
	// HasReplyMarkup reports whether an inline keyboard was attached.
	HasReplyMarkup bool `json:"has_reply_markup,omitempty"`
	// Buttons are the inline keyboard's rows as sent.
	Buttons [][]Button `json:"buttons,omitempty"`
	// LinkPreview are sendMessage's link_preview_options as sent.
	LinkPreview *LinkPreview `json:"link_preview_options,omitempty"`
	// Time is when the emulator accepted the message, on its clock, with
	// nanosecond precision.
	Time time.Time `json:"time"`
	// ResponseDropped is set when the connection was dropped instead of
	// answering (fault mode deliver-drop): the sender did not learn of it.
	ResponseDropped bool `json:"response_dropped,omitempty"`
}

// Stats counts what the emulator saw since it was created or reset.
type Stats struct {
	// Since is when counting started, on the emulator's clock.
	Since time.Time `json:"since"`
	// Requests counts Bot API requests (control endpoints excluded).
	Requests int64 `json:"requests"`
	// ByMethod counts requests per method name ("unknown" for others).
	ByMethod map[string]int64 `json:"by_method"`
	// ByCode counts answers per HTTP status. Dropped and blackholed
	// requests have no status and are not counted here.
	ByCode map[int]int64 `json:"by_code"`
	// RateLimited counts 429 answers.
	RateLimited int64 `json:"rate_limited"`
	// RateLimitedByScope counts 429 answers per scope (bot, paid, chat).
	RateLimitedByScope map[Scope]int64 `json:"rate_limited_by_scope"`
	// InPause counts sendMessage requests made inside an announced pause of
	// their own scope; each was punished with a longer pause.
	InPause int64 `json:"in_pause"`
	// InAnyPause counts sendMessage requests decided inside an announced
	// pause of any scope (the bot's, or any chat's), after the simulated
	// latency. A sender that pauses everything on any 429 keeps it at zero
	// when it has one request in flight at a time; requests already in
	// flight when a 429 is answered can land here.
	InAnyPause int64 `json:"in_any_pause"`
	// SentInAnyPause counts sendMessage requests that arrived while a
	// pause of any scope was in force whose 429 had been written to its
	// sender's connection at least SenderReactionTime before, judged on
	// arrival, before any simulated latency: requests sent after the sender
	// could have known of the pause. It is the figure a pausing sender
	// keeps at zero whatever its concurrency. Each one is logged at WARN
	// level.
	SentInAnyPause int64 `json:"sent_in_any_pause"`
	// SentInPauseRequests are the first MaxSentInPauseKept of those
	// requests, each with the requests whose 429s announced the pauses it
	// was sent in: a harness that kills senders can tell a request sent by
	// a sender that knew from one whose pause was announced to a sender
	// already dead.
	SentInPauseRequests []SentInPause `json:"sent_in_pause_requests,omitempty"`
	// SentCrossing429 counts sendMessage requests that arrived after a
	// pause had been decided but before its sender could have read the 429
	// announcing it (not yet written, or written less than
	// SenderReactionTime before): they crossed the answer, and no sender
	// could have held them back. Not part of SentInAnyPause.
	SentCrossing429 int64 `json:"sent_crossing_429"`
	// Answered429 counts 429s written and flushed to their sender's
	// connection: from then on (SenderReactionTime later) the sender can
	// know of the pause. A 429 whose connection was gone is not counted.
	Answered429 int64 `json:"answered_429"`
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

// MaxSentInPauseKept is how many requests sent inside a pause
// Stats.SentInPauseRequests keeps; the count goes on in SentInAnyPause.
const MaxSentInPauseKept = 100

// SentInPause is one sendMessage request that arrived inside a pause whose
// 429 had been written (counted in Stats.SentInAnyPause).
type SentInPause struct {
	ChatID int64 `json:"chat_id"`
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
	ChatID int64 `json:"chat_id"`
	// Arrived is when the request arrived; Answered when its 429 was
	// written to the connection. A sender that died in between never read
	// it: the write to a closed connection succeeds all the same.
	Arrived  time.Time `json:"arrived"`
	Answered time.Time `json:"answered"`
	// UserAgent is the request's User-Agent header: the telegram worker
	// puts its process id there.
	UserAgent string `json:"user_agent,omitempty"`
}

// clone returns a deep copy.
func (s *Stats) clone() Stats {
	c := *s
	c.SentInPauseRequests = slices.Clone(s.SentInPauseRequests)
	c.ByMethod = maps.Clone(s.ByMethod)
	c.ByCode = maps.Clone(s.ByCode)
	c.RateLimitedByScope = maps.Clone(s.RateLimitedByScope)
	c.ByFault = maps.Clone(s.ByFault)
	return c
}

func newStats(since time.Time) Stats {
	return Stats{
		Since:              since,
		ByMethod:           make(map[string]int64),
		ByCode:             make(map[int]int64),
		RateLimitedByScope: make(map[Scope]int64),
		ByFault:            make(map[FaultMode]int64),
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
