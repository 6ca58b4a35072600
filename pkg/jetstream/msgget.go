package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
)

// StoredMsg is a message as its stream stores it.
type StoredMsg struct {
	Subject string
	Seq     uint64
	Header  nats.Header
	Data    []byte
}

// codeNoMessageFound is the server's err_code for a get that found no
// message (JSNoMessageFoundErr).
const codeNoMessageFound = 10037

// NextMsg returns the first message of stream on subject at sequence from
// or after, as the stream's leader has it, or nil when there is none.
// apiPrefix is the JetStream API prefix ("" for $JS.API.).
//
// It asks the leader ($JS.API.STREAM.MSG.GET), one message per request,
// because a direct get (the batched $JS.API.DIRECT.GET) is answered by any
// replica of a stream that allows them, a replica that is behind too: a
// node back from a partition or a restart keeps its direct-get
// subscription while it catches up, and the server routes each request to
// a random member of the group. Such an answer silently lacks what was
// stored meanwhile; found by the long cluster chaos run, where a takeover's
// read missed the message a dead worker held and a recipient's next
// notification went out first. The leader has every stored message; while
// there is none (an election), or it cannot be reached, the request fails.
// A request left unanswered is sent again every HedgeEvery (Hedge), so a
// read that falls into an election is answered as soon as it ends.
func NextMsg(ctx context.Context, nc Requester, apiPrefix, stream, subject string, from uint64) (*StoredMsg, error) {
	return getMsg(ctx, nc, apiPrefix, stream, struct {
		Seq     uint64 `json:"seq"`
		NextFor string `json:"next_by_subj"`
	}{from, subject})
}

// LastMsg returns the last message of stream on subject, as the stream's
// leader has it, or nil when there is none. Like NextMsg it never takes the
// answer of a replica that is behind: a KV read that must see every write
// acknowledged so far (a delivery record before a give-up hands the
// notification on) asks here, not with a direct get.
func LastMsg(ctx context.Context, nc Requester, apiPrefix, stream, subject string) (*StoredMsg, error) {
	return getMsg(ctx, nc, apiPrefix, stream, struct {
		LastFor string `json:"last_by_subj"`
	}{subject})
}

// getMsg sends req to the leader of stream ($JS.API.STREAM.MSG.GET),
// hedged, and decodes the message it answers with, nil when there is none.
func getMsg(ctx context.Context, nc Requester, apiPrefix, stream string, req any) (*StoredMsg, error) {
	if apiPrefix == "" {
		apiPrefix = natsjs.DefaultAPIPrefix
	}
	data, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	return Hedge(ctx, HedgeEvery, func(ctx context.Context) (*StoredMsg, error) {
		return getMsgOnce(ctx, nc, apiPrefix+"STREAM.MSG.GET."+stream, stream, data)
	})
}

// getMsgOnce sends one request for a stored message and decodes the
// answer.
func getMsgOnce(ctx context.Context, nc Requester, subject, stream string, data []byte) (*StoredMsg, error) {
	var resp struct {
		Message struct {
			Subject string `json:"subject"`
			Seq     uint64 `json:"seq"`
			Header  []byte `json:"hdrs"`
			Data    []byte `json:"data"`
		} `json:"message"`
	}
	err := APIRequest(ctx, nc, subject, data, &resp)
	if apiErr := (*APIError)(nil); errors.As(err, &apiErr) && apiErr.Code == codeNoMessageFound {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m := &StoredMsg{Subject: resp.Message.Subject, Seq: resp.Message.Seq, Data: resp.Message.Data}
	if m.Seq == 0 {
		return nil, fmt.Errorf("reading %s from its leader: an answer without a message", stream)
	}
	if len(resp.Message.Header) > 0 {
		if m.Header, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return nil, fmt.Errorf("reading %s from its leader: the headers of message %d: %w", stream, m.Seq, err)
		}
	}
	return m, nil
}
