package emulator_test

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// TestRealClockRate measures the bot limit over real HTTP on the real clock.
// Four senders keep the emulator saturated for about 2s, all pausing on
// every 429 for its retry_after. The emulator's own record then gives the
// admitted rate: after the first burst of B, a saturated GCRA bucket admits
// one message per 1/rate, so (N - B + 1) / (last - first) estimates the rate
// from the N recorded messages and their nanosecond timestamps. The burst
// holds three seconds of traffic so that no pause (a request in flight when
// the first 429 is announced doubles it) lets the bucket fill up and waste
// capacity, which would bias the estimate.
func TestRealClockRate(t *testing.T) {
	t.Parallel()
	const (
		rate  = 200.0
		burst = 600
	)
	l := emulator.DefaultLimits()
	l.BotRate, l.BotBurst = rate, burst
	emu, err := emulator.New(emulator.Config{Token: token, Limits: l})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(emu)
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(client.CloseIdleConnections)

	var (
		mu          sync.Mutex
		pausedUntil time.Time
		chat        atomic.Int64
		stop        atomic.Bool
		start       = time.Now()
		ctx, cancel = context.WithTimeout(t.Context(), 20*time.Second)
		wg          sync.WaitGroup
	)
	defer cancel()
	for range 4 {
		wg.Go(func() {
			for !stop.Load() && ctx.Err() == nil {
				mu.Lock()
				wait := time.Until(pausedUntil)
				mu.Unlock()
				if wait > 0 {
					timer := time.NewTimer(wait) // honouring retry_after is the sender's job
					select {
					case <-timer.C:
					case <-ctx.Done():
						timer.Stop()
						return
					}
					continue
				}
				body, _ := json.Marshal(map[string]any{"chat_id": chat.Add(1), "text": "x"})
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/bot"+token+"/sendMessage", bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					return
				}
				var a answer
				err = json.NewDecoder(resp.Body).Decode(&a)
				resp.Body.Close()
				if err != nil || a.OK {
					continue
				}
				now := time.Now()
				mu.Lock()
				if until := now.Add(time.Duration(a.retryAfter()) * time.Second); until.After(pausedUntil) {
					pausedUntil = until
				}
				mu.Unlock()
				// Stop at a 429 after 1.5s: the bucket is saturated then.
				if now.Sub(start) > 1500*time.Millisecond {
					stop.Store(true)
				}
			}
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		t.Fatal("the measurement did not finish in time")
	}

	msgs := emu.Messages()
	n := len(msgs)
	if n < burst+int(rate) {
		t.Fatalf("only %d messages admitted", n)
	}
	elapsed := msgs[n-1].Time.Sub(msgs[0].Time).Seconds()
	measured := float64(n-burst+1) / elapsed
	t.Logf("admitted %d messages in %.3fs: %.2f/s (configured %.0f/s)", n, elapsed, measured, rate)
	if math.Abs(measured-rate)/rate > 0.03 {
		t.Errorf("measured %.2f/s, want %.0f/s ±3%%", measured, rate)
	}
	if s := emu.Stats(); s.RateLimited == 0 {
		t.Errorf("no 429 was returned; the bucket was never saturated")
	}
}
