package emulator

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
)

// controlRoutes returns the /emulator/ endpoints, kept close to the Bot API
// emulator's. They are unauthenticated: the emulator is a test tool and
// listens on loopback by default.
//
//	GET    /emulator/healthz                  200 {"ok":true}
//	GET    /emulator/messages[?to=+1...]      created messages, oldest first
//	GET    /emulator/stats                    counters (Stats)
//	POST   /emulator/reset                    back to the configured state
//	GET    /emulator/numbers/{number}         {"number":"+1...","state":"ok"}
//	POST   /emulator/numbers/{number}/state   body {"state":"unsubscribed"}
//	GET    /emulator/account                  {"status":"active"}
//	POST   /emulator/account                  body {"status":"suspended"}
//	GET    /emulator/outage                   the running outage, or null
//	POST   /emulator/outage                   body Outage, e.g. {"mode":"5xx","duration":"30s"}
//	DELETE /emulator/outage                   ends the outage
//	POST   /emulator/ratelimit                body {"retry_after":5}: the next request gets 429
//
// A number in a path may be written with or without its leading '+'.
func (e *Emulator) controlRoutes() *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /emulator/healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, okBody{OK: true})
	})
	mux.HandleFunc("GET /emulator/messages", func(w http.ResponseWriter, r *http.Request) {
		var msgs []Message
		if to := r.URL.Query().Get("to"); to != "" {
			msgs = e.MessagesTo(plusNumber(to))
		} else {
			msgs = e.Messages()
		}
		writeJSON(w, http.StatusOK, struct {
			Count    int       `json:"count"`
			Messages []Message `json:"messages"`
		}{len(msgs), msgs})
	})
	mux.HandleFunc("GET /emulator/stats", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, e.Stats())
	})
	mux.HandleFunc("POST /emulator/reset", func(w http.ResponseWriter, _ *http.Request) {
		e.Reset()
		e.log.Info("reset")
		writeJSON(w, http.StatusOK, okBody{OK: true})
	})
	mux.HandleFunc("GET /emulator/numbers/{number}", func(w http.ResponseWriter, r *http.Request) {
		n := plusNumber(r.PathValue("number"))
		writeJSON(w, http.StatusOK, numberBody{Number: n, State: e.NumberState(n)})
	})
	mux.HandleFunc("POST /emulator/numbers/{number}/state", func(w http.ResponseWriter, r *http.Request) {
		n := plusNumber(r.PathValue("number"))
		var body numberBody
		if err := decodeBody(r, &body); err != nil {
			controlError(w, err)
			return
		}
		if err := e.SetNumberState(n, body.State); err != nil {
			controlError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, numberBody{Number: n, State: body.State})
	})
	mux.HandleFunc("GET /emulator/account", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, accountBody{Status: e.AccountStatus()})
	})
	mux.HandleFunc("POST /emulator/account", func(w http.ResponseWriter, r *http.Request) {
		var body accountBody
		if err := decodeBody(r, &body); err != nil {
			controlError(w, err)
			return
		}
		if err := e.SetAccountStatus(body.Status); err != nil {
			controlError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, body)
	})
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
		var body struct {
			RetryAfter int64 `json:"retry_after"`
		}
		if err := decodeBody(r, &body); err != nil {
			controlError(w, err)
			return
		}
		if body.RetryAfter < 1 || body.RetryAfter > 86400 {
			controlError(w, errors.New("retry_after must be 1..86400 seconds"))
			return
		}
		if err := e.OpenPause(time.Duration(body.RetryAfter) * time.Second); err != nil {
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

type numberBody struct {
	Number string      `json:"number,omitempty"`
	State  NumberState `json:"state"`
}

type accountBody struct {
	Status AccountStatus `json:"status"`
}

// plusNumber restores the '+' of a number written without it (a '+' in a
// query string reads as a space).
func plusNumber(n string) string {
	n = strings.TrimSpace(n)
	if n != "" && n[0] != '+' {
		return "+" + n
	}
	return n
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
