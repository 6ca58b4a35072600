package email_test

import (
	"bufio"
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// Mailpit answers after the data only with success or a size limit; the
// failures around the final dot — the reply the MaybeDelivered flag is
// about — come from this scripted server instead.

// script says how a scriptedServer behaves.
type script struct {
	// greeting is the first line; default "220 scripted ESMTP".
	greeting string
	// afterDot is the reply to the final dot; "close" drops the
	// connection instead, "hang" says nothing until the client goes.
	afterDot string
}

// scriptedServer is an SMTP server that accepts every command and then does
// what its script says after the message's final dot.
type scriptedServer struct {
	addr string
	// dots counts the messages whose final dot arrived.
	dots atomic.Int32
}

func startScripted(t *testing.T, s script) *scriptedServer {
	t.Helper()
	if s.greeting == "" {
		s.greeting = "220 scripted ESMTP"
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &scriptedServer{addr: ln.Addr().String()}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { srv.serve(c, s) })
		}
	})
	return srv
}

func (srv *scriptedServer) serve(c net.Conn, s script) {
	defer c.Close()
	r := bufio.NewReader(c)
	say := func(lines ...string) bool {
		_, err := c.Write([]byte(strings.Join(lines, "\r\n") + "\r\n"))
		return err == nil
	}
	if !say(s.greeting) || !strings.HasPrefix(s.greeting, "2") {
		return
	}
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return
		}
		verb := strings.ToUpper(strings.Fields(line + " x")[0])
		switch verb {
		case "EHLO":
			say("250-scripted", "250-ENHANCEDSTATUSCODES", "250 8BITMIME")
		case "QUIT":
			say("221 2.0.0 bye")
			return
		case "DATA":
			say("354 go ahead")
			for {
				l, err := r.ReadString('\n')
				if err != nil {
					return
				}
				if l == ".\r\n" {
					break
				}
			}
			srv.dots.Add(1)
			switch s.afterDot {
			case "close":
				return
			case "hang":
				_, _ = r.ReadString('\n') // until the client closes
				return
			}
			say(s.afterDot)
		default:
			say("250 2.0.0 OK")
		}
	}
}

func scriptedChannel(t *testing.T, srv *scriptedServer, timeout time.Duration) *email.Channel {
	t.Helper()
	ch, err := email.New(email.Config{Addr: srv.addr, TLS: email.TLSNone, From: from, Timeout: timeout}, email.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func TestRepliesAfterTheData(t *testing.T) {
	tests := []struct {
		name     string
		afterDot string
		kind     delivery.OutcomeKind
		reason   string
		code     int
		maybe    bool
	}{
		{"accepted", "250 2.0.0 queued as 1", delivery.Delivered, "", 0, false},
		{"connection dropped", "close", delivery.Transient, email.ReasonNetwork, 0, true},
		{"temporary", "451 4.3.0 try again later", delivery.Transient, email.ReasonTemporary, 451, false},
		{"spam", "554 5.7.1 message refused as spam", delivery.Rejected, email.ReasonPolicy, 554, false},
		{"too big", "552 5.3.4 message too big", delivery.Rejected, email.ReasonTooBig, 552, false},
		{"user unknown after data", "550 5.1.1 <ANN@example.com>: user unknown; cc bob@other.test", delivery.RecipientDead, email.ReasonHardBounce, 550, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := startScripted(t, script{afterDot: tt.afterDot})
			ch := scriptedChannel(t, srv, 15*time.Second)
			o := send(t, ch, notification("order:S1:accepted", ann), nil)
			if o.Kind != tt.kind || o.Reason != tt.reason || o.Code != tt.code || o.MaybeDelivered != tt.maybe {
				t.Errorf("got %s/%s %d maybe=%v (%s), want %s/%s %d maybe=%v",
					o.Kind, o.Reason, o.Code, o.MaybeDelivered, o.Description, tt.kind, tt.reason, tt.code, tt.maybe)
			}
			noAddress(t, "the description", o.Description)
		})
	}
}

func TestDescriptionNamesTheRecipientByToken(t *testing.T) {
	srv := startScripted(t, script{afterDot: "550 5.1.1 <ANN@Example.com>: user unknown, from noreply@shop.test"})
	ch := scriptedChannel(t, srv, 15*time.Second)
	n := notification("order:S2:accepted", ann)
	token, _ := ch.Recipient(n)
	o := send(t, ch, n, nil)
	want := "smtp data_end: 550 5.1.1 <" + token + ">: user unknown, from noreply@shop.test"
	if o.Description != want {
		t.Errorf("got description %q, want %q", o.Description, want)
	}
}

func TestNoReplyToTheFinalDotMayHaveDelivered(t *testing.T) {
	srv := startScripted(t, script{afterDot: "hang"})
	ch := scriptedChannel(t, srv, time.Second)
	o := send(t, ch, notification("order:S3:accepted", ann), nil)
	if o.Kind != delivery.Transient || o.Reason != email.ReasonTimeout || !o.MaybeDelivered || !strings.Contains(o.Description, "no answer within 1s") {
		t.Errorf("got %s/%s maybe=%v (%s), want transient/timeout, maybe delivered, no answer within 1s", o.Kind, o.Reason, o.MaybeDelivered, o.Description)
	}
}

func TestCanceledWhileWaitingForTheFinalReply(t *testing.T) {
	srv := startScripted(t, script{afterDot: "hang"})
	ch := scriptedChannel(t, srv, time.Minute)
	n := notification("order:S4:accepted", ann)
	token, _ := ch.Recipient(n)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan delivery.Outcome, 1)
	go func() { done <- ch.Send(ctx, delivery.NewAttempt(n, token, nil)) }()
	natstest.WaitFor(t, 20*time.Second, func() bool { return srv.dots.Load() == 1 }, "the final dot at the server")
	cancel()
	select {
	case o := <-done:
		if o.Kind != delivery.Canceled || !o.MaybeDelivered {
			t.Errorf("got %s maybe=%v (%s), want canceled, maybe delivered", o.Kind, o.MaybeDelivered, o.Description)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Send did not return after its context was canceled")
	}
}

func TestRefusedGreetingHalts(t *testing.T) {
	srv := startScripted(t, script{greeting: "554 5.7.1 no SMTP service for you"})
	ch := scriptedChannel(t, srv, 15*time.Second)
	o := send(t, ch, notification("order:S5:accepted", ann), nil)
	if o.Kind != delivery.Halt || o.Reason != email.ReasonRefused || o.Code != 554 {
		t.Errorf("got %s/%s %d (%s), want halt/refused 554", o.Kind, o.Reason, o.Code, o.Description)
	}
}
