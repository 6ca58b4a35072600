package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

func TestParseFlags(t *testing.T) {
	s, err := parseFlags([]string{
		"-http", "127.0.0.1:0",
		"-blocked", "u1, c-2",
		"-denied", "c-3",
		"-not-found", "u4",
		"-forbidden", "u5",
		"-limits=false",
		"-rate", "10",
		"-burst", "3",
		"-retry-after-header=false",
		"-latency", "5ms",
		"-fault", "json5xx",
		"-fault-status", "503",
		"-fault-probability", "0.5",
		"-seed", "9",
		"-bot-id", "77",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	c := s.cfg
	if s.addr != "127.0.0.1:0" || c.Token != defaultToken || c.Limits.Enabled || c.Limits.Rate != 10 || c.Limits.Burst != 3 ||
		!c.OmitRetryAfter || c.Latency != 5*time.Millisecond || c.Seed != 9 || c.BotID != 77 ||
		c.Outage == nil || c.Outage.Mode != emulator.FaultJSON5xx || c.Outage.Status != 503 || c.Outage.Probability != 0.5 {
		t.Errorf("parsed %+v (outage %+v) addr %q", c, c.Outage, s.addr)
	}
	want := map[emulator.Recipient]emulator.RecipientState{
		emulator.User(1): emulator.StateBlocked, emulator.Chat(-2): emulator.StateBlocked, emulator.Chat(-3): emulator.StateDenied,
		emulator.User(4): emulator.StateNotFound, emulator.User(5): emulator.StateForbidden,
	}
	if len(c.States) != len(want) {
		t.Errorf("states %v, want %v", c.States, want)
	}
	for r, st := range want {
		if c.States[r] != st {
			t.Errorf("state of %s = %q, want %q", r, c.States[r], st)
		}
	}
}

func TestParseFlagsEnvironment(t *testing.T) {
	t.Setenv("MAX_EMULATOR_TOKEN", "from-env-token")
	t.Setenv("MAX_EMULATOR_RATE", "2")
	t.Setenv("MAX_EMULATOR_BLOCKED", "u9")
	s, err := parseFlags([]string{"-rate", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if s.cfg.Token != "from-env-token" {
		t.Errorf("Token = %q, want it from MAX_EMULATOR_TOKEN", s.cfg.Token)
	}
	if s.cfg.Limits.Rate != 3 {
		t.Errorf("Rate = %v, want 3: a flag wins over the environment", s.cfg.Limits.Rate)
	}
	if s.cfg.States[emulator.User(9)] != emulator.StateBlocked {
		t.Errorf("states %v, want u9 blocked from MAX_EMULATOR_BLOCKED", s.cfg.States)
	}
}

func TestBadFlagsNameTheFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"-blocked", "u1,42"}, "-blocked"},
		{[]string{"-not-found", "c0"}, "-not-found"},
		{[]string{"-rate", "0"}, "-rate"},
		{[]string{"-burst", "-1"}, "-burst"},
		{[]string{"-latency", "fast"}, "-latency"},
		{[]string{"-fault", "meteor"}, "-fault"},
		{[]string{"-fault-probability", "2"}, "-fault-probability"},
		{[]string{"-fault-status", "404"}, "-fault-status"},
		{[]string{"-token", "has space"}, "-token"},
		{[]string{"-bot-id", "0"}, "-bot-id"},
		{[]string{"-tls-cert", "cert.pem"}, "-tls-key"},
		{[]string{"-log-level", "loud"}, "-log-level"},
		{[]string{"-nope"}, "-nope"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var stderr strings.Builder
			code := realMain(context.Background(), tt.args, io.Discard, &stderr)
			if code != exitUsage {
				t.Errorf("exit status %d, want %d", code, exitUsage)
			}
			if !strings.Contains(stderr.String(), tt.flag) {
				t.Errorf("stderr %q does not name %s", stderr.String(), tt.flag)
			}
			if strings.Contains(stderr.String(), "has space") {
				t.Errorf("stderr %q shows the token", stderr.String())
			}
		})
	}
}

func TestBadEnvironmentNamesTheVariable(t *testing.T) {
	t.Setenv("MAX_EMULATOR_BURST", "many")
	var stderr strings.Builder
	if code := realMain(context.Background(), nil, io.Discard, &stderr); code != exitUsage {
		t.Errorf("exit status %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "MAX_EMULATOR_BURST") {
		t.Errorf("stderr %q does not name MAX_EMULATOR_BURST", stderr.String())
	}
}

// syncWriter lets the test read what the server prints while it runs.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// start runs the emulator with args and returns its base URL and a stop
// function that checks the exit status.
func start(t *testing.T, args ...string) (string, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- realMain(ctx, append([]string{"-http", "127.0.0.1:0"}, args...), &syncWriter{w: pw}, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		cancel()
		t.Fatalf("reading the address: %v", err)
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "max-emulator listening on ")
	if !ok {
		cancel()
		t.Fatalf("first line %q, want the listening address", line)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	return base, func() {
		cancel()
		select {
		case code := <-done:
			if code != 0 {
				t.Errorf("exit status %d, want 0", code)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the emulator did not stop")
		}
	}
}

func post(t *testing.T, c *http.Client, url string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(`{"text":"hi"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", defaultToken)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestServe starts the emulator, uses it over HTTP and stops it.
func TestServe(t *testing.T) {
	base, stop := start(t, "-blocked", "u7")
	defer stop()
	if code := post(t, http.DefaultClient, base+"/messages?user_id=7"); code != http.StatusForbidden {
		t.Errorf("blocked user: HTTP %d, want 403", code)
	}
	if code := post(t, http.DefaultClient, base+"/messages?user_id=8"); code != http.StatusOK {
		t.Errorf("other user: HTTP %d, want 200", code)
	}
}

// TestServeTLS serves HTTPS with a certificate of a CA of the test's own,
// as platform-api2.max.ru uses a certificate of a CA that is not in every
// system's roots.
func TestServeTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM := writeCertificate(t, dir)
	base, stop := start(t, "-tls-cert", filepath.Join(dir, "cert.pem"), "-tls-key", filepath.Join(dir, "key.pem"))
	defer stop()
	if !strings.HasPrefix(base, "https://") {
		t.Fatalf("address %q, want https", base)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	c := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}}}
	defer c.CloseIdleConnections()
	if code := post(t, c, base+"/messages?user_id=1"); code != http.StatusOK {
		t.Errorf("over HTTPS: HTTP %d, want 200", code)
	}
}

// writeCertificate writes cert.pem and key.pem for 127.0.0.1, signed by a
// new CA, into dir and returns the CA's certificate in PEM.
func writeCertificate(t *testing.T, dir string) []byte {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test root CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("cert.pem", "CERTIFICATE", leafDER)
	write("key.pem", "EC PRIVATE KEY", keyDER)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
}
