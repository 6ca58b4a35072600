package emulator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
)

// controlRoutes returns the /emulator/ endpoints. They are unauthenticated:
// the emulator is a test tool and listens on loopback by default.
//
//	GET    /emulator/healthz                 200 {"ok":true}
//	GET    /emulator/messages[?chat_id=N]    delivered messages, oldest first
//	GET    /emulator/stats                   counters (Stats)
//	POST   /emulator/reset                   back to the configured state
//	GET    /emulator/chats/{id}              {"chat_id":N,"state":"ok"}
//	POST   /emulator/chats/{id}/state        body {"state":"blocked"}
//	POST   /emulator/chats/{id}/block        same as state "blocked"
//	DELETE /emulator/chats/{id}/block        same as state "ok"
//	POST   /emulator/chats/{id}/migrate      body {"to_chat_id":-100…}
//	DELETE /emulator/chats/{id}/migrate      removes the migration
//	GET    /emulator/outage                  the running outage, or null
//	POST   /emulator/outage                  body Outage, e.g. {"mode":"5xx","duration":"30s"}
//	DELETE /emulator/outage                  ends the outage
//	POST   /emulator/ratelimit               body PauseRequest, e.g. {"scope":"bot","retry_after":5}
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
	mux.HandleFunc("GET /emulator/chats/{id}", e.chatHandler(func(id int64, _ *http.Request) (any, error) {
		return chatStateBody{ChatID: id, State: e.ChatState(id)}, nil
	}))
	mux.HandleFunc("POST /emulator/chats/{id}/state", e.chatHandler(func(id int64, r *http.Request) (any, error) {
		var body chatStateBody
		if err := decodeBody(r, &body); err != nil {
			return nil, err
		}
		if err := e.SetChatState(id, body.State); err != nil {
			return nil, err
		}
		return chatStateBody{ChatID: id, State: body.State}, nil
	}))
	mux.HandleFunc("POST /emulator/chats/{id}/block", e.chatHandler(func(id int64, _ *http.Request) (any, error) {
		e.Block(id)
		return chatStateBody{ChatID: id, State: ChatBlocked}, nil
	}))
	mux.HandleFunc("DELETE /emulator/chats/{id}/block", e.chatHandler(func(id int64, _ *http.Request) (any, error) {
		e.Unblock(id)
		return chatStateBody{ChatID: id, State: ChatOK}, nil
	}))
	mux.HandleFunc("POST /emulator/chats/{id}/migrate", e.chatHandler(func(id int64, r *http.Request) (any, error) {
		var body struct {
			ToChatID int64 `json:"to_chat_id"`
		}
		if err := decodeBody(r, &body); err != nil {
			return nil, err
		}
		if body.ToChatID == 0 {
			return nil, errors.New("to_chat_id is required")
		}
		if err := e.Migrate(id, body.ToChatID); err != nil {
			return nil, err
		}
		return okBody{OK: true}, nil
	}))
	mux.HandleFunc("DELETE /emulator/chats/{id}/migrate", e.chatHandler(func(id int64, _ *http.Request) (any, error) {
		if err := e.Migrate(id, 0); err != nil {
			return nil, err
		}
		return okBody{OK: true}, nil
	}))
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

type chatStateBody struct {
	ChatID int64     `json:"chat_id"`
	State  ChatState `json:"state"`
}

// handleMessages serves GET /emulator/messages, optionally filtered by
// ?chat_id=N, as {"count":N,"messages":[…]}.
func (e *Emulator) handleMessages(w http.ResponseWriter, r *http.Request) {
	var msgs []Message
	if v := r.URL.Query().Get("chat_id"); v != "" {
		id, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			controlError(w, errors.New("chat_id must be an integer"))
			return
		}
		msgs = e.ChatMessages(id)
	} else {
		msgs = e.Messages()
	}
	writeJSON(w, http.StatusOK, struct {
		Count    int       `json:"count"`
		Messages []Message `json:"messages"`
	}{len(msgs), msgs})
}

// chatHandler parses {id} and runs fn.
func (e *Emulator) chatHandler(fn func(id int64, r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
		if err != nil || id == 0 {
			controlError(w, errors.New("chat id must be a non-zero integer"))
			return
		}
		out, err := fn(id, r)
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
