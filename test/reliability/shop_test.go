package reliability_test

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/procs"
)

// TestShopBoundsItsHTTPInputs runs bin/shop and plays the clients a public
// order API meets: an oversized body, oversized headers, headers that never
// end (slowloris), a body that stops half way. Each must be cut off within
// its bound, and the shop must go on serving. (Malformed and invalid orders
// are the handler's tests, internal/shop.TestHTTPBadRequests; here the
// server's own limits are checked, which only the binary sets.)
func TestShopBoundsItsHTTPInputs(t *testing.T) {
	sup := supervisor(t)
	addr := freeAddr(t)
	const readTimeout = 2 * time.Second
	start(t, sup, procs.Spec{Name: "shop", Path: bin(t, "shop"), Args: []string{
		"-db", filepath.Join(t.TempDir(), "shop.db"), "-http", addr, "-read-timeout", readTimeout.String(),
	}}, "http://"+addr+"/healthz")
	url := "http://" + addr + "/orders"

	t.Run("body over 1 MiB", func(t *testing.T) {
		body := `{"id":"A1","chat_id":100,"customer":"` + strings.Repeat("x", 2<<20) + `","items":[]}`
		resp, err := http.Post(url, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusRequestEntityTooLarge {
			b, _ := io.ReadAll(resp.Body)
			t.Fatalf("status %d %s, want 413", resp.StatusCode, b)
		}
	})

	t.Run("headers over 64 KiB", func(t *testing.T) {
		req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Padding", strings.Repeat("p", 200<<10))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
			t.Fatalf("status %d, want 431", resp.StatusCode)
		}
	})

	t.Run("headers that never end", func(t *testing.T) {
		// The shop's ReadHeaderTimeout is 5s.
		took := stall(t, addr, "POST /orders HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\n")
		if took > 8*time.Second {
			t.Fatalf("the connection stayed open %v with unfinished headers, want about 5s", took)
		}
	})

	t.Run("a body that stops half way", func(t *testing.T) {
		took := stall(t, addr, "POST /orders HTTP/1.1\r\nHost: shop\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"id\":\"A")
		if took > readTimeout+3*time.Second {
			t.Fatalf("the request was held %v with an unfinished body, want about -read-timeout %v", took, readTimeout)
		}
	})

	if code, body := get("http://" + addr + "/healthz"); code != http.StatusOK {
		t.Fatalf("after the abuse /healthz = %d %s", code, body)
	}
	ok := `{"id":"B1","chat_id":100,"customer":"Ann","items":[{"name":"Tea","qty":1,"price_cents":350}]}`
	resp, err := http.Post(url, "application/json", strings.NewReader(ok))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("a good order after the abuse: status %d, want 201", resp.StatusCode)
	}
}

// stall writes an unfinished request and returns how long the server takes
// to end the connection (with or without an answer).
func stall(t *testing.T, addr, partial string) time.Duration {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	begin := time.Now()
	if _, err := io.WriteString(conn, partial); err != nil {
		t.Fatal(err)
	}
	// A deadline far beyond every bound: reading returns when the server
	// answers and closes, or closes.
	if err := conn.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	_, err = io.Copy(&got, bufio.NewReader(conn))
	took := time.Since(begin)
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the server kept the connection open for 30s; answered %q", got.String())
	}
	return took
}
