package chaos

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tgnotify/tgnotify/internal/useragent"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
	maxemu "github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
	"github.com/tgnotify/tgnotify/pkg/notify"
	smsemu "github.com/tgnotify/tgnotify/pkg/twilio/emulator"
)

// checkPauses checks that no provider got a request sent inside a 429
// pause it had announced, that is after the 429 announcing it had been
// answered. Each emulator (Telegram, MAX, SMS) counts a request as sent
// inside a pause when it arrives its SenderReactionTime (5 ms) after the
// 429 was written or later, and describes it (its recipient, its sender's
// User-Agent, which names the worker process, and the 429s that announced
// the pause). Two cases are explained, not failed, when they hold for
// every 429 that announced a pause the request was sent in:
//
//   - Crossed: the worker that sent the request is the one that read the
//     429, and its log names the request's recipient among those it had in
//     flight while the answered request was (pkg/delivery, crossing.go):
//     admitted before the worker read the 429, it was on its way when the
//     429 came, and arrives late only when the machine is slow (a CI run
//     saw one 10 ms after the 429).
//   - Dead sender: the 429 was announced to a worker of the channel that
//     had been SIGKILLed after sending the request the 429 answered and
//     before it could react to the 429: before it was written, or less
//     than SenderReactionTime after. The write to the dead worker's
//     connection succeeds, or the bytes sit unread in its socket, so the
//     emulator counts the pause as known, but no live process could have
//     learned of it: the worker records a pause for the others in
//     notify_chats, a round trip to the cluster after it has read the 429
//     (found by the long cluster run on ee19a8a: a worker SIGKILLed 1.6 ms
//     after its 429 was written, its successor sending into the pause 1.8 s
//     later).
func (r *Result) checkPauses(o Observed) {
	s, m, t := o.Emulator, o.MaxEmulator, o.SMSEmulator
	f := &r.Figures
	f.PauseCrossed, f.PauseDeadSender = map[string]int64{}, map[string]int64{}
	var problems []string
	unexplained := map[string]int64{}
	for _, ch := range []struct {
		channel string
		counted int64
		reqs    []pauseRequest
	}{
		{"telegram", s.SentInAnyPause, telegramPauseRequests(s.SentInPauseRequests)},
		{"max", m.SentInPause, maxPauseRequests(m.SentInPauseRequests)},
		{"sms", t.InPause, smsPauseRequests(t.InPauseRequests)},
	} {
		var explained int64
		for _, q := range ch.reqs {
			why, k, ok := explainSentInPause(ch.channel, q, o.Kills, o.Crossings)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s at %s by %q, %v of the pause left, announced by %s",
					ch.channel, recipientName(ch.channel, q.recipient), q.arrived.Format(time.TimeOnly+".000"), q.userAgent,
					q.left.Round(time.Millisecond), openers(ch.channel, q.openers)))
				continue
			}
			explained++
			if k == deadSender {
				f.PauseDeadSender[ch.channel]++
			} else {
				f.PauseCrossed[ch.channel]++
			}
			problems = append(problems, fmt.Sprintf("explained: %s: %s at %s, %v of the pause left: %s",
				ch.channel, recipientName(ch.channel, q.recipient), q.arrived.Format(time.TimeOnly+".000"), q.left.Round(time.Millisecond), why))
		}
		if u := ch.counted - explained; u != 0 {
			unexplained[ch.channel] = u
			if int64(len(ch.reqs)) < ch.counted {
				problems = append(problems, fmt.Sprintf("%s: %d requests sent in a pause were counted but not described (the emulator keeps the first %d)",
					ch.channel, ch.counted-int64(len(ch.reqs)), len(ch.reqs)))
			}
		}
	}
	f.SentInPauseToDeadSender, f.SentInPauseCrossed = f.PauseDeadSender["telegram"], f.PauseCrossed["telegram"]
	r.add(len(unexplained) == 0,
		fmt.Sprintf("no request sent inside an announced 429 pause: Telegram sent_in_any_pause %d, %d of them in flight with the request their worker's 429 answered (its log), %d in a pause announced only to a worker killed before it could read its 429 (429s %d, crossed the 429 on the wire within %v %d, in flight when announced %d, punished %d); MAX sent_in_pause %d, %d crossed, %d to a killed worker (429s %d); SMS in_pause %d, %d crossed, %d to a killed worker (429s %d)",
			s.SentInAnyPause, f.PauseCrossed["telegram"], f.PauseDeadSender["telegram"], s.RateLimited, emulator.SenderReactionTime, s.SentCrossing429, s.InAnyPause, s.InPause,
			m.SentInPause, f.PauseCrossed["max"], f.PauseDeadSender["max"], m.RateLimited,
			t.InPause, f.PauseCrossed["sms"], f.PauseDeadSender["sms"], t.RateLimited),
		problems)
}

// pauseRequest is a request an emulator saw arrive inside a pause its
// sender could have known of, in one form for every provider.
type pauseRequest struct {
	// recipient is the worker's name of the request's recipient (the
	// chat id, u<user id>, p<phone hash>: notify.Notification.Recipient),
	// "" for a request that sends nothing (getMe, the account's).
	recipient string
	arrived   time.Time
	left      time.Duration
	userAgent string
	openers   []pauseOpener
}

// pauseOpener is a request whose 429 announced a pause.
type pauseOpener struct {
	recipient         string
	arrived, answered time.Time
	userAgent         string
}

func telegramPauseRequests(in []emulator.SentInPause) []pauseRequest {
	out := make([]pauseRequest, 0, len(in))
	for _, q := range in {
		p := pauseRequest{recipient: strconv.FormatInt(q.ChatID, 10), arrived: q.Arrived, left: q.PauseLeft, userAgent: q.UserAgent}
		for _, op := range q.Openers {
			p.openers = append(p.openers, pauseOpener{strconv.FormatInt(op.ChatID, 10), op.Arrived, op.Answered, op.UserAgent})
		}
		out = append(out, p)
	}
	return out
}

func maxPauseRequests(in []maxemu.SentInPause) []pauseRequest {
	out := make([]pauseRequest, 0, len(in))
	for _, q := range in {
		p := pauseRequest{recipient: q.Recipient, arrived: q.Arrived, left: q.PauseLeft, userAgent: q.UserAgent}
		for _, op := range q.Openers {
			p.openers = append(p.openers, pauseOpener{op.Recipient, op.Arrived, op.Answered, op.UserAgent})
		}
		out = append(out, p)
	}
	return out
}

func smsPauseRequests(in []smsemu.InPauseRequest) []pauseRequest {
	out := make([]pauseRequest, 0, len(in))
	for _, q := range in {
		op := q.Opener
		out = append(out, pauseRequest{
			recipient: phoneRecipient(q.To), arrived: q.Arrived, left: q.PauseLeft, userAgent: q.UserAgent,
			openers: []pauseOpener{{phoneRecipient(op.To), op.Arrived, op.Answered, op.UserAgent}},
		})
	}
	return out
}

// phoneRecipient is the sms worker's name of a phone number: what its log
// calls the recipient.
func phoneRecipient(phone string) string {
	if phone == "" {
		return ""
	}
	return "p" + notify.HashAddress(phone)
}

// recipientName describes a recipient in a problem line.
func recipientName(channel, recipient string) string {
	switch {
	case recipient == "":
		return "a request to no recipient"
	case channel == "telegram":
		return "chat " + recipient
	}
	return "recipient " + recipient
}

// pauseExplanation says why a request sent inside a pause is not a fault.
type pauseExplanation int

const (
	// deadSender: a pause was announced only to a worker killed before it
	// could read the 429.
	deadSender pauseExplanation = iota
	// crossedOnTheWire: the sender had admitted the request before it read
	// the 429 (and no pause in force was announced to a dead sender).
	crossedOnTheWire
)

// explainSentInPause reports whether every pause request q to channel's
// provider was sent in is explained: announced by a 429 written to a worker
// of the channel killed before it could read it, or read by the worker
// that sent q, which had q in flight with the answered request. It says
// how, and which kind of explanation held (deadSender when any pause needed
// it).
func explainSentInPause(channel string, q pauseRequest, kills []KillRecord, crossings []CrossingRecord) (string, pauseExplanation, bool) {
	if len(q.openers) == 0 {
		return "", 0, false
	}
	daemon := channelWorkerName(channel)
	sender, senderOK := useragent.Pid(q.userAgent, daemon)
	kind := crossedOnTheWire
	var why []string
	for _, op := range q.openers {
		pid, ok := useragent.Pid(op.userAgent, daemon)
		if !ok {
			return "", 0, false
		}
		if senderOK && sender == pid && q.recipient != "" && op.recipient != "" {
			if c, ok := crossedBy(crossings, pid, op.recipient, op.arrived, q.recipient); ok {
				why = append(why, fmt.Sprintf("%s (pid %d) had it in flight with the request the 429 to %s answered (written %s, logged %s with %d in flight)",
					c.Process, pid, recipientName(channel, op.recipient), op.answered.Format(time.TimeOnly+".000"), c.At.Format(time.TimeOnly+".000"), len(c.Crossed)))
				continue
			}
		}
		i := slices.IndexFunc(kills, func(k KillRecord) bool {
			return k.Pid == pid && workerOf(k.Process, channel) && !k.At.Before(op.arrived) && k.At.Before(op.answered.Add(senderReaction(channel)))
		})
		if i < 0 {
			return "", 0, false
		}
		kind = deadSender
		if d := op.answered.Sub(kills[i].At); d >= 0 {
			why = append(why, fmt.Sprintf("the 429 to %s was written %v after %s (pid %d) was killed",
				recipientName(channel, op.recipient), d.Round(100*time.Microsecond), kills[i].Process, pid))
		} else {
			why = append(why, fmt.Sprintf("%s (pid %d) was killed %v after the 429 to %s was written, within the %v a sender needs to react",
				kills[i].Process, pid, (-d).Round(100*time.Microsecond), recipientName(channel, op.recipient), senderReaction(channel)))
		}
	}
	return strings.Join(why, "; "), kind, true
}

// senderReaction is how long after a 429 was written channel's emulator
// counts a request as sent by a sender that could have known of the pause.
func senderReaction(channel string) time.Duration {
	switch channel {
	case "max":
		return maxemu.SenderReactionTime
	case "sms":
		return smsemu.SenderReactionTime
	}
	return emulator.SenderReactionTime
}

// openers describes the requests whose 429s announced pauses.
func openers(channel string, ops []pauseOpener) string {
	out := make([]string, 0, len(ops))
	for _, op := range ops {
		out = append(out, fmt.Sprintf("the 429 to %s from %q, arrived %s, written %s",
			recipientName(channel, op.recipient), op.userAgent, op.arrived.Format(time.TimeOnly+".000"), op.answered.Format(time.TimeOnly+".000")))
	}
	return strings.Join(out, "; ")
}
