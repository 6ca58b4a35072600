package operator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/jetstream"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Report summarises the dead letters that died since the previous report:
// how many, by channel and reason, and a few of them to look at first. The
// operator's scheduled review (tgnotify dlq report, run by a systemd timer)
// posts it to an admin chat through the pipeline itself.
type Report struct {
	// From and To are the NOTIFY_DEAD sequences it covers, inclusive; To
	// is From-1 when there was nothing new.
	From, To uint64
	// First and Last are when the first and the last of them died.
	First, Last time.Time
	// Total counts them; ByCause by "channel reason"; Recipients counts
	// the distinct recipients.
	Total      int
	ByCause    map[Cause]int
	Recipients int
	// Examples are the first few, one per cause.
	Examples []DeadLetter
}

// Cause is a channel and a reason of dead letters.
type Cause struct{ Channel, Reason string }

// maxExamples bounds the dead letters a report names, maxCauses the causes
// it lists: the text stays well within a Telegram message (4096
// characters).
const (
	maxExamples = 5
	maxCauses   = 30
)

// Summarize reads the dead letters from sequence from on (headers only, the
// ones that exist when it starts) and summarises them. from 0 means from
// the first dead letter at or after since.
func Summarize(ctx context.Context, js natsjs.JetStream, n jetstream.Names, from uint64, since time.Time) (Report, error) {
	r := Report{From: from, ByCause: map[Cause]int{}}
	cfg := natsjs.OrderedConsumerConfig{FilterSubjects: []string{n.DeadSubjects}, HeadersOnly: true}
	switch {
	case from > 0:
		cfg.DeliverPolicy, cfg.OptStartSeq = natsjs.DeliverByStartSequencePolicy, from
	case !since.IsZero():
		cfg.DeliverPolicy, cfg.OptStartTime = natsjs.DeliverByStartTimePolicy, &since
	}
	recipients := map[string]bool{}
	err := scanRange(ctx, js, n.DeadStream, cfg, func(m natsjs.Msg) error {
		d, err := deadLetterOf(n, m)
		if err != nil {
			return err
		}
		if r.Total == 0 {
			r.From, r.First = d.Seq, d.Stored
		}
		r.To, r.Last = d.Seq, d.Stored
		r.Total++
		c := Cause{Channel: cmp.Or(d.Channel, "?"), Reason: cmp.Or(d.Reason, "?")}
		if r.ByCause[c] == 0 && len(r.Examples) < maxExamples {
			d.Header = nil
			r.Examples = append(r.Examples, d)
		}
		r.ByCause[c]++
		recipients[c.Channel+"/"+d.Recipient] = true
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	if r.Total == 0 {
		if r.From == 0 {
			r.From = 1
		}
		r.To = r.From - 1
	}
	r.Recipients = len(recipients)
	return r, nil
}

// Causes returns the report's causes, the most frequent first.
func (r Report) Causes() []Cause {
	cs := slices.Collect(maps.Keys(r.ByCause))
	slices.SortFunc(cs, func(a, b Cause) int {
		if n := cmp.Compare(r.ByCause[b], r.ByCause[a]); n != 0 {
			return n
		}
		return cmp.Or(cmp.Compare(a.Channel, b.Channel), cmp.Compare(a.Reason, b.Reason))
	})
	return cs
}

// Text is the report as plain text, for the terminal and for the admin
// chat: what died, and the commands that show and replay it.
func (r Report) Text(env string) string {
	var b strings.Builder
	title := "tgnotify dead letters"
	if env != "" {
		title += " (" + env + ")"
	}
	if r.Total == 0 {
		fmt.Fprintf(&b, "%s: none new since #%d.\n", title, r.From)
		return b.String()
	}
	fmt.Fprintf(&b, "%s: %d new, #%d–#%d, %s – %s UTC, %d recipients.\n", title, r.Total, r.From, r.To,
		r.First.UTC().Format("2006-01-02 15:04"), r.Last.UTC().Format("2006-01-02 15:04"), r.Recipients)
	causes := r.Causes()
	for i, c := range causes {
		if i == maxCauses {
			fmt.Fprintf(&b, "  ... and %d more causes\n", len(causes)-maxCauses)
			break
		}
		fmt.Fprintf(&b, "  %6d  %s %s\n", r.ByCause[c], c.Channel, c.Reason)
	}
	if len(r.Examples) > 0 {
		b.WriteString("First of each:\n")
		for _, d := range r.Examples {
			desc := strings.ReplaceAll(strings.TrimSpace(d.Code+" "+d.Description), "\n", " ")
			if len(desc) > 80 {
				desc = desc[:77] + "..."
			}
			fmt.Fprintf(&b, "  #%d %s %s %s: %s\n", d.Seq, d.Channel, d.Reason, cmp.Or(d.Key, "(no key)"), desc)
		}
	}
	fmt.Fprintf(&b, "Look: tgnotify dlq list -since %s\nReplay after a fix: tgnotify dlq replay -reason REASON -since %s\n",
		r.First.UTC().Format(time.RFC3339), r.First.UTC().Format(time.RFC3339))
	return b.String()
}

// Key is the idempotency key of the report's notification: posting the
// same report twice (a crash before the cursor was saved) stores it once.
func (r Report) Key() string { return fmt.Sprintf("dlq-report:%d-%d", r.From, r.To) }

// Post publishes the report as a notification to the admin's Telegram chat,
// through the pipeline (NOTIFY, then the telegram worker), and waits for
// the stream to store it.
func Post(ctx context.Context, js natsjs.JetStream, names jetstream.Names, r Report, chat int64, env string, now time.Time) error {
	n := notify.Notification{Key: r.Key(), ChatID: chat, Text: r.Text(env), CreatedAt: now, Priority: notify.PriorityTransactional}
	payload, err := n.MarshalPayload()
	if err != nil {
		return fmt.Errorf("the report's notification: %w", err)
	}
	if _, err := js.PublishMsg(ctx, jetstream.Msg(names.TelegramSubject(chat), n.Key, now, notify.PayloadContentType, payload)); err != nil {
		return fmt.Errorf("posting the report to chat %d: %w", chat, err)
	}
	return nil
}

// ReportCursor is what the review remembers between runs: the first
// NOTIFY_DEAD sequence the next report covers.
type ReportCursor struct {
	Next       uint64    `json:"next"`
	ReportedAt time.Time `json:"reported_at"`
}

// LoadCursor reads the cursor file; a missing file is the zero cursor.
func LoadCursor(path string) (ReportCursor, error) {
	var c ReportCursor
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%s: not a report cursor (%v); delete it to start from -since", path, err)
	}
	return c, nil
}

// SaveCursor writes the cursor file atomically (a temporary file renamed
// over it), so that a crash leaves the old cursor or the new one.
func SaveCursor(path string, c ReportCursor) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dlq-report-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
