package main

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

func TestParseFlags(t *testing.T) {
	cfg, addr, _, err := parseFlags([]string{
		"-http", "127.0.0.1:0",
		"-blocked", "1, 2",
		"-deactivated", "3",
		"-not-found", "4",
		"-migrate", "-5=-1005000000005,-6=-1006000000006",
		"-limits=false",
		"-bot-rate", "10",
		"-latency", "5ms",
		"-fault", "5xx",
		"-fault-probability", "0.5",
		"-seed", "9",
	}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if addr != "127.0.0.1:0" || cfg.Token != defaultToken || len(cfg.Blocked) != 2 || cfg.Deactivated[0] != 3 || cfg.NotFound[0] != 4 ||
		cfg.Migrate[-6] != -1006000000006 || cfg.Limits.Enabled || cfg.Limits.BotRate != 10 || cfg.Latency != 5*time.Millisecond ||
		cfg.Outage == nil || cfg.Outage.Mode != emulator.Fault5xx || cfg.Outage.Probability != 0.5 || cfg.Seed != 9 {
		t.Errorf("parsed %+v (outage %+v) addr %q", cfg, cfg.Outage, addr)
	}
}

func TestParseFlagsEnvironment(t *testing.T) {
	t.Setenv("EMULATOR_TOKEN", "42:from-env")
	t.Setenv("EMULATOR_CHAT_RATE", "2")
	cfg, _, _, err := parseFlags([]string{"-chat-rate", "3"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Token != "42:from-env" {
		t.Errorf("Token = %q, want it from EMULATOR_TOKEN", cfg.Token)
	}
	if cfg.Limits.ChatRate != 3 {
		t.Errorf("ChatRate = %v, want 3: a flag wins over the environment", cfg.Limits.ChatRate)
	}
}

func TestBadFlagsNameTheFlag(t *testing.T) {
	for _, tt := range []struct {
		args []string
		flag string
	}{
		{[]string{"-blocked", "1,x"}, "-blocked"},
		{[]string{"-migrate", "-5"}, "-migrate"},
		{[]string{"-bot-rate", "0"}, "-bot-rate"},
		{[]string{"-chat-burst", "-1"}, "-chat-burst"},
		{[]string{"-latency", "fast"}, "-latency"},
		{[]string{"-fault", "meteor"}, "-fault"},
		{[]string{"-fault-probability", "2"}, "-fault-probability"},
		{[]string{"-fault-status", "404"}, "-fault-status"},
		{[]string{"-token", "not a token"}, "-token"},
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
		})
	}
}

func TestBadEnvironmentNamesTheVariable(t *testing.T) {
	t.Setenv("EMULATOR_BOT_BURST", "many")
	var stderr strings.Builder
	if code := realMain(context.Background(), nil, io.Discard, &stderr); code != exitUsage {
		t.Errorf("exit status %d, want %d", code, exitUsage)
	}
	if !strings.Contains(stderr.String(), "EMULATOR_BOT_BURST") {
		t.Errorf("stderr %q does not name EMULATOR_BOT_BURST", stderr.String())
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

// TestServe starts the emulator, uses it over HTTP and stops it.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- realMain(ctx, []string{"-http", "127.0.0.1:0", "-blocked", "7"}, &syncWriter{w: pw}, io.Discard)
		pw.Close()
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the address: %v", err)
	}
	base, ok := strings.CutPrefix(strings.TrimSpace(line), "botapi-emulator listening on ")
	if !ok {
		t.Fatalf("first line %q, want the listening address", line)
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()

	resp, err := http.Post(base+"/bot"+defaultToken+"/sendMessage?chat_id=7&text=hi", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("blocked chat: HTTP %d, want 403", resp.StatusCode)
	}
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
