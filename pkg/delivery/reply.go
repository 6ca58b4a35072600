package delivery

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// replier answers JetStream for one delivery of a stream message. A job
// keeps one instead of nats.go's message (see replySubject).
type replier interface {
	Ack() error
	Nak() error
	NakWithDelay(delay time.Duration) error
	InProgress() error
	TermWithReason(reason string) error
}

// The bodies JetStream's consumers accept on a delivery's reply subject,
// as nats.go's jetstream.Msg sends them.
const (
	ackBody      = "+ACK"
	nakBody      = "-NAK"
	progressBody = "+WPI"
	termBody     = "+TERM"
)

// replySubject answers a delivery on its reply subject, exactly as nats.go's
// jetstream.Msg does (the same bodies, published without waiting, one final
// answer: a second Ack, Nak or Term is refused with
// natsjs.ErrMsgAlreadyAckd; InProgress may be sent any number of times).
//
// It exists for memory: a held nats.go message keeps its parsed header map
// and its receive buffer, about 1 KB a message, and the worker holds up to
// MaxAckPending (10,000) of them (BENCHMARKS.md, row 6). A job keeps this,
// the body and the headers packed in one string (packHeader) instead.
type replySubject struct {
	nc    *nats.Conn
	reply string

	mu       sync.Mutex
	answered bool // acked, nakked or terminated
}

func newReplySubject(nc *nats.Conn, reply string) *replySubject {
	return &replySubject{nc: nc, reply: reply}
}

// Ack acknowledges the delivery: the consumer moves on.
func (r *replySubject) Ack() error { return r.answer(ackBody, true) }

// Nak hands the delivery back for redelivery at once.
func (r *replySubject) Nak() error { return r.answer(nakBody, true) }

// NakWithDelay hands the delivery back for redelivery after delay.
func (r *replySubject) NakWithDelay(delay time.Duration) error {
	if delay <= 0 {
		return r.Nak()
	}
	return r.answer(nakBody+` {"delay": `+strconv.FormatInt(delay.Nanoseconds(), 10)+`}`, true)
}

// InProgress restarts the delivery's ack wait.
func (r *replySubject) InProgress() error { return r.answer(progressBody, false) }

// TermWithReason ends the delivery for good; the reason goes into the
// server's advisory.
func (r *replySubject) TermWithReason(reason string) error {
	body := termBody
	if reason != "" {
		body += " " + reason
	}
	return r.answer(body, true)
}

func (r *replySubject) answer(body string, final bool) error {
	if r.reply == "" {
		return natsjs.ErrMsgNoReply
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.answered {
		return natsjs.ErrMsgAlreadyAckd
	}
	if err := r.nc.Publish(r.reply, []byte(body)); err != nil {
		return err
	}
	r.answered = final
	return nil
}

// headerLine starts a NATS header block, as nats.DecodeHeadersMsg expects.
const headerLine = "NATS/1.0\r\n"

// packHeader writes h, without the header named skip, as one NATS header
// block: one allocation in place of a map of slices, read back by
// unpackHeader only when the message is dead-lettered.
func packHeader(h nats.Header, skip string) string {
	n := len(headerLine) + 2
	for k, vs := range h {
		if k == skip {
			continue
		}
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	var b strings.Builder
	b.Grow(n)
	b.WriteString(headerLine)
	for k, vs := range h {
		if k == skip {
			continue
		}
		for _, v := range vs {
			b.WriteString(k)
			b.WriteString(": ")
			b.WriteString(v)
			b.WriteString("\r\n")
		}
	}
	b.WriteString("\r\n")
	return b.String()
}

// unpackHeader reads a block packHeader wrote into a new header map.
func unpackHeader(s string) (nats.Header, error) {
	if s == "" {
		return nats.Header{}, nil
	}
	return nats.DecodeHeadersMsg([]byte(s))
}
