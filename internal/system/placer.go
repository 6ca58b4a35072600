package system

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tgnotify/tgnotify/internal/shop"
)

// Placement is what the shop answered for one order id, over every POST of
// it.
type Placement struct {
	// Created counts 201 answers: an order must be created exactly once.
	Created int
	// Repeated counts 200 answers (a repeated request).
	Repeated int
	// CreatedAt is the order's creation time from the answers.
	CreatedAt time.Time
	// Mismatch is set when two answers disagree on CreatedAt.
	Mismatch bool
	// Errors are the requests that failed for good.
	Errors []string
}

// Placer posts orders to the shop's POST /orders and records the answers.
// Its methods are safe for concurrent use.
type Placer struct {
	url    string
	client *http.Client

	mu      sync.Mutex
	results map[string]*Placement

	// Sent counts requests answered 200 or 201, Created the 201 answers,
	// Failures the requests that failed for good.
	Sent, Created, Failures atomic.Int64
}

// NewPlacer returns a placer for the shop at shopURL.
func NewPlacer(shopURL string) *Placer {
	return &Placer{
		url:     shopURL + "/orders",
		client:  &http.Client{Timeout: 15 * time.Second},
		results: map[string]*Placement{},
	}
}

// maxPostAttempts bounds the retries of one POST after a network error or a
// 5xx; each retry is itself a repeated request the shop must absorb.
const maxPostAttempts = 3

// Post places o, retrying a network error or a 5xx twice, and records the
// answer under o.ID.
func (p *Placer) Post(ctx context.Context, o shop.Order) {
	body, err := json.Marshal(o)
	if err != nil {
		p.record(o.ID, 0, shop.PlacedOrder{}, fmt.Errorf("encoding: %w", err))
		return
	}
	var lastErr error
	for attempt := 1; attempt <= maxPostAttempts && ctx.Err() == nil; attempt++ {
		code, placed, err := p.postOnce(ctx, body)
		if err == nil && code < 500 {
			p.record(o.ID, code, placed, nil)
			return
		}
		if err == nil {
			err = fmt.Errorf("HTTP %d", code)
		}
		lastErr = err
		t := time.NewTimer(time.Duration(attempt) * 100 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	if lastErr == nil {
		lastErr = ctx.Err()
	}
	p.record(o.ID, 0, shop.PlacedOrder{}, lastErr)
}

func (p *Placer) postOnce(ctx context.Context, body []byte) (int, shop.PlacedOrder, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.url, bytes.NewReader(body))
	if err != nil {
		return 0, shop.PlacedOrder{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, shop.PlacedOrder{}, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, shop.PlacedOrder{}, err
	}
	var placed shop.PlacedOrder
	if resp.StatusCode == http.StatusOK || resp.StatusCode == http.StatusCreated {
		if err := json.Unmarshal(b, &placed); err != nil {
			return 0, placed, fmt.Errorf("decoding the answer: %w", err)
		}
		return resp.StatusCode, placed, nil
	}
	if resp.StatusCode >= 500 {
		return resp.StatusCode, placed, nil
	}
	return resp.StatusCode, placed, fmt.Errorf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
}

func (p *Placer) record(id string, code int, placed shop.PlacedOrder, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.results[id]
	if r == nil {
		r = &Placement{}
		p.results[id] = r
	}
	switch {
	case err != nil:
		r.Errors = append(r.Errors, err.Error())
		p.Failures.Add(1)
		return
	case code == http.StatusCreated:
		r.Created++
		p.Created.Add(1)
		if !r.CreatedAt.IsZero() && !r.CreatedAt.Equal(placed.CreatedAt) {
			r.Mismatch = true
		}
		r.CreatedAt = placed.CreatedAt
	case code == http.StatusOK:
		r.Repeated++
		if r.CreatedAt.IsZero() {
			r.CreatedAt = placed.CreatedAt // the 201 may still be on its way
		} else if !r.CreatedAt.Equal(placed.CreatedAt) {
			r.Mismatch = true
		}
	default:
		r.Errors = append(r.Errors, "unexpected HTTP "+strconv.Itoa(code))
		p.Failures.Add(1)
		return
	}
	p.Sent.Add(1)
}

// Snapshot returns a copy of the answers by order id.
func (p *Placer) Snapshot() map[string]Placement {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]Placement, len(p.results))
	for id, r := range p.results {
		c := *r
		c.Errors = append([]string(nil), r.Errors...)
		out[id] = c
	}
	return out
}
