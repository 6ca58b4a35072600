package bench

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// emulatorToken is the test token the benchmark's emulator accepts; it is
// not a secret and only ever reaches the emulator.
const emulatorToken = "123456789:BENCH-emulator-token"

// apiAnswer is a sendMessage answer other than 200, as the recorder saw it
// leave the emulator.
type apiAnswer struct {
	At         time.Time
	Status     int
	RetryAfter time.Duration
}

// emulatorServer is the Bot API emulator served over loopback HTTP from the
// benchmark process, behind a recorder that notes the time of every refused
// sendMessage (for the 429 storm's pause windows) and wakes waiters after
// every sendMessage.
type emulatorServer struct {
	emu *emulator.Emulator
	srv *http.Server
	url string

	mu      sync.Mutex
	refused []apiAnswer
	wake    chan struct{}
}

// startEmulator starts an emulator with the given limits, no latency and no
// faults.
func startEmulator(limits emulator.Limits) (*emulatorServer, error) {
	emu, err := emulator.New(emulator.Config{Token: emulatorToken, Limits: limits})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		emu.Close()
		return nil, fmt.Errorf("listening for the emulator: %w", err)
	}
	s := &emulatorServer{emu: emu, url: "http://" + ln.Addr().String(), wake: make(chan struct{}, 1)}
	s.srv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	// Serve returns ErrServerClosed at close. Any other end shows as
	// deliveries that never arrive, which the waits report.
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// ServeHTTP passes the request to the emulator, recording refused
// sendMessage answers.
func (s *emulatorServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !strings.HasSuffix(strings.ToLower(r.URL.Path), "/sendmessage") {
		s.emu.ServeHTTP(w, r)
		return
	}
	rw := &recordingWriter{ResponseWriter: w, status: http.StatusOK}
	s.emu.ServeHTTP(rw, r)
	if rw.status != http.StatusOK {
		a := apiAnswer{At: time.Now(), Status: rw.status}
		var env struct {
			Parameters struct {
				RetryAfter int64 `json:"retry_after"`
			} `json:"parameters"`
		}
		if json.Unmarshal(rw.body.Bytes(), &env) == nil {
			a.RetryAfter = time.Duration(env.Parameters.RetryAfter) * time.Second
		}
		s.mu.Lock()
		s.refused = append(s.refused, a)
		s.mu.Unlock()
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// refusals returns the refused sendMessage answers so far.
func (s *emulatorServer) refusals() []apiAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]apiAnswer(nil), s.refused...)
}

// close stops serving and releases held requests.
func (s *emulatorServer) close() {
	s.emu.Close()
	_ = s.srv.Close()
}

// recordingWriter notes the status of an answer and keeps the body of a
// refusal (it is small) to read its retry_after.
type recordingWriter struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (w *recordingWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *recordingWriter) Write(b []byte) (int, error) {
	if w.status != http.StatusOK && w.body.Len() < 4096 {
		w.body.Write(b)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
