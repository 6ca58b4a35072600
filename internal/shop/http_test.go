package shop_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/tgnotify/tgnotify/internal/shop"
)

func newServer(t *testing.T) (*httptest.Server, *bundle) {
	t.Helper()
	b := setup(t)
	srv := httptest.NewServer(shop.NewHandler(b.svc, slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)
	return srv, b
}

func post(t *testing.T, url, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(url+"/orders", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("response to %.60q is not JSON: %v", body, err)
	}
	return resp.StatusCode, m
}

const a1 = `{"id":"A1","chat_id":100,"customer":"Ann","items":[{"name":"Tea","qty":1,"price_cents":350}]}`

func TestHTTPPlaceOrder(t *testing.T) {
	srv, b := newServer(t)
	code, m := post(t, srv.URL, a1)
	if code != http.StatusCreated || m["id"] != "A1" || m["total_cents"] != 350.0 || m["notification_key"] != "order:A1:accepted" {
		t.Fatalf("first POST = %d %v, want 201 with the order", code, m)
	}
	if code, m2 := post(t, srv.URL, a1); code != http.StatusOK || m2["created_at"] != m["created_at"] {
		t.Fatalf("repeated POST = %d %v, want 200 with the same order", code, m2)
	}
	if code, m := post(t, srv.URL, strings.Replace(a1, `"qty":1`, `"qty":2`, 1)); code != http.StatusConflict || m["field"] != "id" {
		t.Fatalf("conflicting POST = %d %v, want 409", code, m)
	}
	resp, err := http.Get(srv.URL + "/orders/A1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /orders/A1 = %d, want 200", resp.StatusCode)
	}
	resp, err = http.Get(srv.URL + "/orders/nope")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /orders/nope = %d, want 404", resp.StatusCode)
	}
	if o, n := b.count(t, "orders"), b.count(t, "outbox"); o != 1 || n != 1 {
		t.Fatalf("%d orders, %d outbox rows; want 1 and 1", o, n)
	}
}

func TestHTTPBadRequests(t *testing.T) {
	srv, b := newServer(t)
	cases := []struct {
		name, body string
		code       int
		mention    string
	}{
		{"malformed", `{"id":`, 400, "malformed JSON"},
		{"not an object", `[1]`, 400, "malformed JSON"},
		{"trailing data", a1 + `{}`, 400, "trailing data"},
		{"unknown field", `{"id":"A1","chat_id":1,"items":[],"coupon":"X"}`, 400, "coupon"},
		{"wrong type", `{"id":"A1","chat_id":"100","items":[]}`, 400, "chat_id"},
		{"missing id", `{"chat_id":100,"items":[{"name":"Tea","qty":1,"price_cents":1}]}`, 400, "id: required"},
		{"empty id", `{"id":"","chat_id":100,"items":[{"name":"Tea","qty":1,"price_cents":1}]}`, 400, "id: required"},
		{"chat zero", `{"id":"A1","chat_id":0,"items":[{"name":"Tea","qty":1,"price_cents":1}]}`, 400, "chat_id"},
		{"no items", `{"id":"A1","chat_id":100,"items":[]}`, 400, "items"},
		{"qty zero", `{"id":"A1","chat_id":100,"items":[{"name":"Tea","qty":0,"price_cents":1}]}`, 400, "items[0].qty"},
		{"qty negative", `{"id":"A1","chat_id":100,"items":[{"name":"Tea","qty":-3,"price_cents":1}]}`, 400, "items[0].qty"},
		{"too large", `{"id":"A1","customer":"` + strings.Repeat("x", shop.MaxBodyBytes) + `"}`, 413, "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, m := post(t, srv.URL, tc.body)
			msg, _ := m["error"].(string)
			if code != tc.code || !strings.Contains(msg, tc.mention) {
				t.Fatalf("POST = %d %v, want %d mentioning %q", code, m, tc.code, tc.mention)
			}
		})
	}
	if o, n := b.count(t, "orders"), b.count(t, "outbox"); o != 0 || n != 0 {
		t.Fatalf("bad requests wrote %d orders and %d outbox rows", o, n)
	}
}

// Sixteen identical requests at once: exactly one creates the order, the
// others see it; one outbox row; no SQLITE_BUSY reaches a client.
func TestHTTPConcurrentIdenticalRequests(t *testing.T) {
	srv, b := newServer(t)
	const n = 16
	codes := make(chan int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := http.Post(srv.URL+"/orders", "application/json", bytes.NewBufferString(a1))
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	close(start)
	wg.Wait()
	close(codes)
	got := map[int]int{}
	for c := range codes {
		got[c]++
	}
	if got[http.StatusCreated] != 1 || got[http.StatusOK] != n-1 || len(got) != 2 {
		t.Fatalf("status counts = %v, want one 201 and %d 200", got, n-1)
	}
	if o, r := b.count(t, "orders"), b.count(t, "outbox"); o != 1 || r != 1 {
		t.Fatalf("%d orders and %d outbox rows, want 1 and 1", o, r)
	}
}
