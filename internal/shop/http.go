package shop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
)

// MaxBodyBytes bounds a request body.
const MaxBodyBytes = 1 << 20

// Handler is the shop's HTTP API:
//
//	POST /orders               place an order: 201 created, 200 repeated, 409 conflict, 400 invalid, 413 too large
//	GET  /orders/{id}          read an order: 200 or 404
//	POST /orders/{id}/ship     mark it shipped, telling the customer: 200 (a repeat too), 404, 409 if delivered
//	POST /orders/{id}/deliver  mark it delivered, telling the customer: 200 (a repeat too), 404, 409 if not shipped
//	GET  /healthz              liveness
type Handler struct {
	svc *Service
	log *slog.Logger
	mux *http.ServeMux
}

// NewHandler returns the HTTP API over svc.
func NewHandler(svc *Service, log *slog.Logger) *Handler {
	h := &Handler{svc: svc, log: log, mux: http.NewServeMux()}
	h.mux.HandleFunc("POST /orders", h.placeOrder)
	h.mux.HandleFunc("GET /orders/{id}", h.getOrder)
	h.mux.HandleFunc("POST /orders/{id}/ship", h.advance(svc.Ship))
	h.mux.HandleFunc("POST /orders/{id}/deliver", h.advance(svc.Deliver))
	h.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	return h
}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.mux.ServeHTTP(w, r) }

type errorBody struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
}

func (h *Handler) placeOrder(w http.ResponseWriter, r *http.Request) {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	dec.DisallowUnknownFields()
	var o Order
	if err := dec.Decode(&o); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeJSON(w, http.StatusRequestEntityTooLarge, errorBody{Error: fmt.Sprintf("request body is larger than %d bytes", MaxBodyBytes)})
			return
		}
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "malformed JSON: " + err.Error()})
		return
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeJSON(w, http.StatusBadRequest, errorBody{Error: "malformed JSON: trailing data after the order object"})
		return
	}
	placed, created, err := h.svc.PlaceOrder(r.Context(), o)
	var inv *InvalidOrderError
	switch {
	case errors.As(err, &inv):
		writeJSON(w, http.StatusBadRequest, errorBody{Error: inv.Error(), Field: inv.Field})
	case errors.Is(err, ErrConflict):
		writeJSON(w, http.StatusConflict, errorBody{Error: err.Error(), Field: "id"})
	case err != nil:
		h.log.ErrorContext(r.Context(), "placing order failed", "order_id", o.ID, "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error"})
	case created:
		writeJSON(w, http.StatusCreated, placed)
	default:
		writeJSON(w, http.StatusOK, placed)
	}
}

func (h *Handler) getOrder(w http.ResponseWriter, r *http.Request) {
	p, err := h.svc.Order(r.Context(), r.PathValue("id"))
	switch {
	case errors.Is(err, ErrNotFound):
		writeJSON(w, http.StatusNotFound, errorBody{Error: err.Error()})
	case err != nil:
		h.log.ErrorContext(r.Context(), "reading order failed", "order_id", r.PathValue("id"), "err", err)
		writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error"})
	default:
		writeJSON(w, http.StatusOK, p)
	}
}

// advance serves a status change (Ship, Deliver).
func (h *Handler) advance(change func(ctx context.Context, id string) (PlacedOrder, bool, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		p, _, err := change(r.Context(), id)
		var inv *InvalidOrderError
		switch {
		case errors.Is(err, ErrNotFound):
			writeJSON(w, http.StatusNotFound, errorBody{Error: err.Error()})
		case errors.Is(err, ErrTransition):
			writeJSON(w, http.StatusConflict, errorBody{Error: err.Error(), Field: "status"})
		case errors.As(err, &inv):
			writeJSON(w, http.StatusBadRequest, errorBody{Error: inv.Error(), Field: inv.Field})
		case err != nil:
			h.log.ErrorContext(r.Context(), "changing an order's status failed", "order_id", id, "path", r.URL.Path, "err", err)
			writeJSON(w, http.StatusInternalServerError, errorBody{Error: "internal error"})
		default:
			writeJSON(w, http.StatusOK, p)
		}
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
