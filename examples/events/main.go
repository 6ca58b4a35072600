// Command events is a small example of an application following what became
// of its notifications: it reads tgnotify's events (notify.events.> in the
// NOTIFY stream) with a durable consumer of its own and prints one line per
// event.
//
//	go run ./examples/events -nats nats://127.0.0.1:4222 [-durable my-app-events]
//
// notify.events.delivered, .fallback and .dead carry a delivery.Event: the
// notification's key, the channel, and the provider's message id or why the
// channel gave up. notify.events.recipient_dead, .recipient_revived and
// .recipient_redirected carry a delivery.RecipientEvent: a recipient that
// cannot be reached on a channel any more (stop offering it), that can
// again (offer it again), or that moved. Every event has the
// key in its Notify-Key header too. The durable consumer remembers what was
// acknowledged, so a restart goes on where it stopped; an application acks
// an event once it has recorded it. docs/INTEGRATING.md explains the events.
//
// A deployment with another subject prefix (-subject-prefix staging in its
// JetStream declaration) has its events on staging.events.> in the stream
// STAGING: give the same -subject-prefix here.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/pkg/delivery"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Getenv); err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "events:", err)
		os.Exit(1)
	}
}

// run follows the events until ctx ends, writing one line per event to out.
func run(ctx context.Context, args []string, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("events", flag.ContinueOnError)
	url := fs.String("nats", nats.DefaultURL, "NATS server `URLs` (default $NATS_URL, else "+nats.DefaultURL+")")
	durable := fs.String("durable", "my-app-events", "the application's durable consumer `name`")
	prefix := fs.String("subject-prefix", "notify", "the deployment's subject `prefix`: events on <prefix>.events.> in the stream <PREFIX>")
	if v := getenv("NATS_URL"); v != "" {
		*url = v
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	nc, err := nats.Connect(*url, nats.Name("events example"))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	c, err := js.CreateOrUpdateConsumer(ctx, strings.ToUpper(*prefix), jetstream.ConsumerConfig{
		Durable:       *durable,
		FilterSubject: *prefix + ".events.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
	})
	if err != nil {
		return fmt.Errorf("creating consumer %s: %w", *durable, err)
	}
	cc, err := c.Consume(func(m jetstream.Msg) {
		fmt.Fprintln(out, describe(*prefix, m.Subject(), m.Data()))
		_ = m.Ack() // after the application has recorded the event
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	cc.Drain()
	<-cc.Closed()
	return nil
}

// describe writes one event of the deployment with prefix as a line.
func describe(prefix, subject string, data []byte) string {
	switch strings.TrimPrefix(subject, prefix+".events.") {
	case "delivered", "fallback", "dead":
		var ev delivery.Event
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Sprintf("%s: not JSON: %v", subject, err)
		}
		switch ev.Event {
		case delivery.EventDelivered:
			return fmt.Sprintf("%s delivered by %s to %s (message %s)", ev.Key, ev.Channel, ev.Recipient, ev.ProviderID)
		case delivery.EventFallback:
			return fmt.Sprintf("%s moved from %s to %s: %s", ev.Key, ev.Channel, ev.Next, ev.Reason)
		}
		return fmt.Sprintf("%s dead: %s gave up (%s %d %s)", ev.Key, ev.Channel, ev.Reason, ev.Code, ev.Description)
	case "recipient_dead", "recipient_redirected", "recipient_revived":
		var ev delivery.RecipientEvent
		if err := json.Unmarshal(data, &ev); err != nil {
			return fmt.Sprintf("%s: not JSON: %v", subject, err)
		}
		if subject == prefix+".events.recipient_revived" {
			return fmt.Sprintf("%s recipient %s reachable again: %s", ev.Channel, ev.Recipient, ev.Reason)
		}
		if ev.RedirectTo != "" {
			return fmt.Sprintf("%s recipient %s moved to %s", ev.Channel, ev.Recipient, ev.RedirectTo)
		}
		return fmt.Sprintf("%s recipient %s unreachable: %s", ev.Channel, ev.Recipient, ev.Reason)
	}
	return subject + ": " + string(data)
}
