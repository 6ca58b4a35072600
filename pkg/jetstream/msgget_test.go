package jetstream_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/tgnotify/tgnotify/internal/natstest"
	"github.com/tgnotify/tgnotify/internal/system"
	"github.com/tgnotify/tgnotify/pkg/jetstream"
)

// TestNextMsgIsNotAnsweredByAReplicaThatIsBehind cuts off a follower of a
// three-replica stream that was its leader before (so it answers direct
// gets, as a node back from a partition does while it catches up), stores
// a message meanwhile, and reads from a client of the cut node. A direct
// get answers there without the message; NextMsg and LastMsg must not:
// they fail until the leader can be asked, then find the message. Found by the long
// cluster chaos run: a takeover's direct get missed the message a dead
// worker held, and the recipient's next notification went out first.
func TestNextMsgIsNotAnsweredByAReplicaThatIsBehind(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster of nats-server processes")
	}
	c, admin := system.StartTestCluster(t, "../../configs/nats-cluster")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	js, err := natsjs.New(admin)
	if err != nil {
		t.Fatal(err)
	}
	const stream, subject = "READS", "reads.a"
	natstest.WaitFor(t, time.Minute, func() bool {
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_, err := js.CreateOrUpdateStream(sctx, natsjs.StreamConfig{Name: stream, Subjects: []string{"reads.>"},
			Storage: natsjs.FileStorage, Replicas: 3, AllowDirect: true})
		return err == nil
	}, "the stream created with three replicas")
	first, err := system.WaitLeader(ctx, admin, stream, "")
	if err != nil {
		t.Fatal(err)
	}
	// The node to cut off leads the stream once, then hands over: a leader
	// answers direct gets, and keeps answering them as a follower.
	cut := ""
	for _, n := range c.Names() {
		if n != first {
			cut = n
			break
		}
	}
	grp := jetstream.LeaderGroup{Stream: stream}
	for _, to := range []string{cut, first} {
		natstest.WaitFor(t, time.Minute, func() bool {
			if leaderOf(admin, grp) == to {
				return true
			}
			_ = stepDownTo(admin, grp, to)
			return leaderOf(admin, grp) == to
		}, "the stream's leader moved to "+to)
	}
	if err := system.WaitCurrent(ctx, admin, stream); err != nil {
		t.Fatal(err)
	}
	before, err := js.Publish(ctx, subject, []byte("before"))
	if err != nil {
		t.Fatal(err)
	}
	// Every replica has the first message before the cut.
	if err := system.WaitCurrent(ctx, admin, stream); err != nil {
		t.Fatal(err)
	}

	onCut, err := nats.Connect(c.URL(cut), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(onCut.Close)
	if err := c.Partition(cut, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Heal(cut) })
	var others []string
	for _, n := range c.Names() {
		if n != cut {
			others = append(others, c.URL(n))
		}
	}
	elsewhere, err := nats.Connect(others[0]+","+others[1], nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(elsewhere.Close)
	ejs, err := natsjs.New(elsewhere)
	if err != nil {
		t.Fatal(err)
	}
	var during *natsjs.PubAck
	natstest.WaitFor(t, time.Minute, func() bool {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		m := nats.NewMsg(subject)
		m.Data = []byte("during")
		m.Header.Set("Test-Header", "kept")
		during, err = ejs.PublishMsg(pctx, m, natsjs.WithMsgID("during"))
		return err == nil
	}, "a message stored by the two nodes that were not cut off")

	// The premise: a direct get from a client of the cut node, when it is
	// answered at all (a request routed to another node is lost in the
	// partition), is answered by the cut replica without the message.
	natstest.WaitFor(t, time.Minute, func() bool {
		req, _ := json.Marshal(map[string]any{"seq": before.Sequence + 1, "next_by_subj": subject})
		m, err := onCut.Request("$JS.API.DIRECT.GET."+stream, req, 2*time.Second)
		if err != nil {
			return false
		}
		if got := m.Header.Get("Status"); got != "404" {
			t.Fatalf("direct get on the cut node: status %q, message %q: want the 404 of a replica that is behind", got, m.Data)
		}
		return true
	}, "a direct get answered on the cut node")

	// NextMsg and LastMsg ask the leader, which the cut node cannot reach:
	// they fail, and never answer with what the replica has.
	for range 3 {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		m, err := jetstream.NextMsg(rctx, onCut, "", stream, subject, before.Sequence+1)
		cancel()
		if err == nil {
			t.Fatalf("NextMsg from the cut node = %+v, nil: want an error while the leader cannot be reached", m)
		}
		rctx, cancel = context.WithTimeout(ctx, 2*time.Second)
		m, err = jetstream.LastMsg(rctx, onCut, "", stream, subject)
		cancel()
		if err == nil {
			t.Fatalf("LastMsg from the cut node = %+v, nil: want an error while the leader cannot be reached", m)
		}
	}
	// Elsewhere it finds the message, headers and all.
	m, err := jetstream.NextMsg(ctx, elsewhere, "", stream, subject, before.Sequence+1)
	if err != nil {
		t.Fatal(err)
	}
	if m == nil || m.Seq != during.Sequence || string(m.Data) != "during" || m.Subject != subject || m.Header.Get("Test-Header") != "kept" {
		t.Fatalf("NextMsg = %+v, want seq %d on %s with data %q and its header", m, during.Sequence, subject, "during")
	}
	if m, err := jetstream.NextMsg(ctx, elsewhere, "", stream, subject, during.Sequence+1); err != nil || m != nil {
		t.Fatalf("NextMsg past the last message = %+v, %v; want nil, nil", m, err)
	}
	if m, err := jetstream.NextMsg(ctx, elsewhere, "", stream, "reads.b", 1); err != nil || m != nil {
		t.Fatalf("NextMsg of a subject without messages = %+v, %v; want nil, nil", m, err)
	}
	if m, err := jetstream.LastMsg(ctx, elsewhere, "", stream, subject); err != nil || m == nil || m.Seq != during.Sequence || m.Header.Get("Test-Header") != "kept" {
		t.Fatalf("LastMsg = %+v, %v; want seq %d with its header", m, err, during.Sequence)
	}
	if m, err := jetstream.LastMsg(ctx, elsewhere, "", stream, "reads.b"); err != nil || m != nil {
		t.Fatalf("LastMsg of a subject without messages = %+v, %v; want nil, nil", m, err)
	}
	var apiErr *jetstream.APIError
	if _, err := jetstream.NextMsg(ctx, elsewhere, "", "NO_SUCH_STREAM", subject, 1); !errors.As(err, &apiErr) || apiErr.Code == 0 {
		t.Fatalf("NextMsg of a stream that does not exist: %v, want the server's refusal as an *APIError", err)
	}

	// Healed, the cut node's client finds it too.
	if err := c.Heal(cut); err != nil {
		t.Fatal(err)
	}
	natstest.WaitFor(t, time.Minute, func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		m, err := jetstream.NextMsg(rctx, onCut, "", stream, subject, before.Sequence+1)
		if err != nil || m == nil || m.Seq != during.Sequence {
			return false
		}
		m, err = jetstream.LastMsg(rctx, onCut, "", stream, subject)
		return err == nil && m != nil && m.Seq == during.Sequence
	}, "NextMsg and LastMsg from the healed node's client to find the message")
}

// electionRequester answers STREAM.MSG.GET as a stream that elects a
// leader until electionEnds would: a request sent before then is never
// answered, one sent after is, with the message.
type electionRequester struct {
	electionEnds time.Time
	calls        atomic.Int32
}

func (r *electionRequester) RequestWithContext(ctx context.Context, subject string, data []byte) (*nats.Msg, error) {
	r.calls.Add(1)
	if time.Now().Before(r.electionEnds) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	time.Sleep(5 * time.Millisecond) // the round trip
	return &nats.Msg{Subject: subject, Data: []byte(`{"message":{"subject":"notify.telegram.42","seq":7,"data":"aGk="}}`)}, nil
}

// TestNextMsgIsAnsweredSoonAfterAnElection sends NextMsg and LastMsg into
// an election of 1.2 s with a 5 s bound. A request lost in the election is
// never answered; the copy sent after it is, so the read returns within
// HedgeEvery of the election's end instead of failing at the bound (the
// long cluster chaos run: takeover checks that waited out 5 s, sixteen at
// a time).
func TestNextMsgIsAnsweredSoonAfterAnElection(t *testing.T) {
	for name, read := range map[string]func(context.Context, jetstream.Requester) (*jetstream.StoredMsg, error){
		"NextMsg": func(ctx context.Context, nc jetstream.Requester) (*jetstream.StoredMsg, error) {
			return jetstream.NextMsg(ctx, nc, "", "NOTIFY", "notify.telegram.42", 1)
		},
		"LastMsg": func(ctx context.Context, nc jetstream.Requester) (*jetstream.StoredMsg, error) {
			return jetstream.LastMsg(ctx, nc, "", "NOTIFY", "notify.telegram.42")
		},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				start := time.Now()
				nc := &electionRequester{electionEnds: start.Add(1200 * time.Millisecond)}
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				defer cancel()
				m, err := read(ctx, nc)
				if err != nil || m == nil || m.Seq != 7 || string(m.Data) != "hi" {
					t.Fatalf("%s = %+v, %v; want message 7 once the election is over", name, m, err)
				}
				if took := time.Since(start); took != 3*jetstream.HedgeEvery+5*time.Millisecond {
					t.Errorf("answered after %v, want %v: the first copy sent after the election, and its round trip", took, 3*jetstream.HedgeEvery+5*time.Millisecond)
				}
				if n := nc.calls.Load(); n != 4 {
					t.Errorf("%d requests sent, want 4 (at 0, 0.5, 1 and 1.5 s)", n)
				}
			})
		})
	}
}
