package emulator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// controlRoutes returns the /emulator/ endpoints, shaped like the Bot API
// emulator's (users and chats in place of Telegram's chats). They are
// unauthenticated: the emulator is a test tool and listens on loopback by
// default.
//
//	GET    /emulator/healthz                      200 {"ok":true}
//	GET    /emulator/messages[?user_id=N|chat_id=N]  delivered messages, oldest first
//	GET    /emulator/stats                        counters (Stats)
//	POST   /emulator/reset                        back to the configured state
//	GET    /emulator/users/{id}                   {"recipient":"u42","state":"ok"}
//	POST   /emulator/users/{id}/state             body {"state":"blocked"}
//	POST   /emulator/users/{id}/block             same as state "blocked"
//	DELETE /emulator/users/{id}/block             same as state "ok"
//	(the same four under /emulator/chats/{id})
//	GET    /emulator/outage                       the running outage, or null
//	POST   /emulator/outage                       body Outage, e.g. {"mode":"5xx","duration":"30s"}
//	DELETE /emulator/outage                       ends the outage
//	POST   /emulator/ratelimit                    body PauseRequest, e.g. {"retry_after":5}
func (e *Emulator) controlRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /emulator/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, okBody{OK: true})
	})
	mux.HandleFunc("GET /emulator/messages", e.handleMessages)
	mux.HandleFunc("GET /emulator/stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.Stats())
	})
	mux.HandleFunc("POST /emulator/reset", func(w http.ResponseWriter, _ *http.Request) {
		e.Reset()
		e.log.Info("reset")
		writeJSON(w, http.StatusOK, okBody{OK: true})
	})
	for _, kind := range []string{"users", "chats"} {
		mux.HandleFunc("GET /emulator/"+kind+"/{id}", e.recipientHandler(kind, func(r Recipient, _ *http.Request) (any, error) {
			return stateBody{Recipient: r.String(), State: e.State(r)}, nil
		}))
		mux.HandleFunc("POST /emulator/"+kind+"/{id}/state", e.recipientHandler(kind, func(r Recipient, req *http.Request) (any, error) {
			var body stateBody
			if err := decodeBody(req, &body); err != nil {
				return nil, err
			}
			if err := e.SetState(r, body.State); err != nil {
				return nil, err
			}
			return stateBody{Recipient: r.String(), State: body.State}, nil
		}))
		mux.HandleFunc("POST /emulator/"+kind+"/{id}/block", e.recipientHandler(kind, func(r Recipient, _ *http.Request) (any, error) {
			return stateBody{Recipient: r.String(), State: StateBlocked}, e.Block(r)
		}))
		mux.HandleFunc("DELETE /emulator/"+kind+"/{id}/block", e.recipientHandler(kind, func(r Recipient, _ *http.Request) (any, error) {
			return stateBody{Recipient: r.String(), State: StateOK}, e.Unblock(r)
		}))
	}
	mux.HandleFunc("GET /emulator/outage", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.CurrentOutage())
	})
	mux.HandleFunc("POST /emulator/outage", func(w http.ResponseWriter, r *http.Request) {
		var o Outage
		if err := decodeBody(r, &o); err != nil {
			controlError(w, err)
			return
		}
		if err := e.StartOutage(o); err != nil {
			controlError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, e.CurrentOutage())
	})
	mux.HandleFunc("DELETE /emulator/outage", func(w http.ResponseWriter, _ *http.Request) {
		e.StopOutage()
		writeJSON(w, http.StatusOK, okBody{OK: true})
	})
	mux.HandleFunc("POST /emulator/ratelimit", func(w http.ResponseWriter, r *http.Request) {
		var p PauseRequest
		if err := decodeBody(r, &p); err != nil {
			controlError(w, err)
			return
		}
		if err := e.OpenPause(p); err != nil {
			controlError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, okBody{OK: true})
	})
	return mux
}

type okBody struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

type stateBody struct {
	Recipient string         `json:"recipient,omitempty"`
	State     RecipientState `json:"state"`
}

// handleMessages serves GET /emulator/messages, optionally filtered by
// ?user_id=N or ?chat_id=N, as {"count":N,"messages":[…]}.
func (e *Emulator) handleMessages(w http.ResponseWriter, r *http.Request) {
	var msgs []Message
	q := r.URL.Query()
	if q.Has("user_id") || q.Has("chat_id") {
		to, err := parseRecipient(r)
		if err != nil {
			controlError(w, err)
			return
		}
		msgs = e.RecipientMessages(to)
	} else {
		msgs = e.Messages()
	}
	writeJSON(w, http.StatusOK, struct {
		Count    int       `json:"count"`
		Messages []Message `json:"messages"`
	}{len(msgs), msgs})
}

// recipientHandler parses the {id} of a path under /emulator/users/ or
// /emulator/chats/ (kind) and runs fn.
func (e *Emulator) recipientHandler(kind string, fn func(r Recipient, req *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		id, err := strconv.ParseInt(req.PathValue("id"), 10, 64)
		to := Chat(id)
		if kind == "users" {
			to = User(id)
		}
		if err != nil || !to.valid() {
			controlError(w, errors.New("the id must be a positive user id or a non-zero chat id"))
			return
		}
		out, err := fn(to, req)
		if err != nil {
			controlError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// decodeBody decodes a JSON control body, rejecting unknown fields.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return errors.New("invalid JSON body: " + err.Error())
	}
	return nil
}

func controlError(w http.ResponseWriter, err error) {
	writeJSON(w, http.StatusBadRequest, okBody{Error: err.Error()})
}
