// Package mailpittest runs the real Mailpit binary (bin/mailpit, built by
// `make build`) as the SMTP server of a test, and reads what arrived through
// its REST API. A test gets its own Mailpit on free loopback ports with a
// database in its temporary directory; it is stopped when the test ends.
//
// Mailpit can stand in for a provider's misbehaviour too: recipients outside
// [Options.AllowedRecipients] are refused with 550 5.1.0 (a hard bounce),
// [Server.SetChaos] makes MAIL FROM, RCPT TO or AUTH fail with any 4xx or
// 5xx code, and [Server.Stop] takes the server away.
//
// Tests that use it skip when TGNOTIFY_BIN is not set (internal/builtbin).
package mailpittest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tgnotify/tgnotify/internal/builtbin"
	"github.com/tgnotify/tgnotify/internal/procs"
)

// Binary is the name of Mailpit's executable in the TGNOTIFY_BIN directory.
const Binary = "mailpit"

// startTimeout bounds how long Start waits for Mailpit to serve HTTP and
// SMTP; generous, for a loaded machine.
const startTimeout = 30 * time.Second

// TLSMode is how Mailpit's SMTP port speaks TLS.
type TLSMode string

// The TLS modes of [Options.TLS].
const (
	// TLSNone serves plain SMTP without STARTTLS.
	TLSNone TLSMode = ""
	// TLSStartTLS offers STARTTLS and requires it before MAIL FROM.
	TLSStartTLS TLSMode = "starttls"
	// TLSImplicit speaks TLS from the first byte (SMTPS, as on port 465).
	TLSImplicit TLSMode = "tls"
)

// Options configure the Mailpit a test starts. The zero value is a plain
// SMTP server that accepts every message.
type Options struct {
	// TLS selects plain SMTP, STARTTLS or implicit TLS. With TLS, Start
	// makes a self-signed certificate for 127.0.0.1 and localhost; clients
	// trust it through [Server.CertPool].
	TLS TLSMode
	// Credentials, when set, are the only username/password pairs the
	// server accepts (SMTP AUTH required).
	Credentials map[string]string
	// AuthAcceptAny offers SMTP AUTH and accepts any credentials.
	AuthAcceptAny bool
	// AllowedRecipients is a regular expression; a recipient that does not
	// match is refused at RCPT TO with 550 5.1.0 (a hard bounce).
	AllowedRecipients string
	// Chaos enables [Server.SetChaos].
	Chaos bool
	// Args are further command-line flags.
	Args []string
}

// Server is a running Mailpit.
type Server struct {
	// SMTPAddr is the SMTP listener, 127.0.0.1:<port>.
	SMTPAddr string
	// APIURL is the base URL of the web UI and REST API, without a
	// trailing slash.
	APIURL string
	// CertPool trusts the server's certificate (nil without TLS).
	CertPool *x509.CertPool

	t    testing.TB
	proc *procs.Process
	http *http.Client
}

// Start starts Mailpit as o describes and waits until both its API and its
// SMTP port answer. It skips the test when TGNOTIFY_BIN is not set. The
// server is stopped at the end of the test.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	bin := filepath.Join(builtbin.Dir(t, Binary), Binary)
	dir := t.TempDir()
	var pool *x509.CertPool
	var tlsArgs []string
	if o.TLS != TLSNone {
		certFile, keyFile, p, err := selfSigned(dir)
		if err != nil {
			t.Fatalf("making a certificate for Mailpit: %v", err)
		}
		pool = p
		tlsArgs = []string{"--smtp-tls-cert", certFile, "--smtp-tls-key", keyFile}
		switch o.TLS {
		case TLSStartTLS:
			tlsArgs = append(tlsArgs, "--smtp-require-starttls")
		case TLSImplicit:
			tlsArgs = append(tlsArgs, "--smtp-require-tls")
		default:
			t.Fatalf("mailpittest: unknown TLS mode %q", o.TLS)
		}
	}
	var authArgs []string
	switch {
	case len(o.Credentials) > 0:
		var b strings.Builder
		for user, pass := range o.Credentials {
			fmt.Fprintf(&b, "%s:%s\n", user, pass)
		}
		file := filepath.Join(dir, "smtp-auth")
		if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		authArgs = []string{"--smtp-auth-file", file}
	case o.AuthAcceptAny:
		authArgs = []string{"--smtp-auth-accept-any"}
	}
	if len(authArgs) > 0 && o.TLS == TLSNone {
		authArgs = append(authArgs, "--smtp-auth-allow-insecure")
	}

	sup, err := procs.New(filepath.Join(dir, "logs"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Close)
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	var smtpAddr, apiURL string
	proc, err := sup.Launch(ctx, procs.Launch{
		Ports:        2,
		ReadyTimeout: startTimeout,
		Build: func(ports []int) (procs.Spec, string, error) {
			smtpAddr, apiURL = procs.Addr(ports[0]), "http://"+procs.Addr(ports[1])
			args := []string{
				"--smtp", smtpAddr,
				"--listen", procs.Addr(ports[1]),
				"--database", filepath.Join(dir, "mailpit-"+strconv.Itoa(ports[0])+".db"),
				"--disable-version-check",
				"--smtp-disable-rdns",
			}
			args = append(args, tlsArgs...)
			args = append(args, authArgs...)
			if o.AllowedRecipients != "" {
				args = append(args, "--smtp-allowed-recipients", o.AllowedRecipients)
			}
			if o.Chaos {
				args = append(args, "--enable-chaos")
			}
			args = append(args, o.Args...)
			return procs.Spec{Name: "mailpit", Path: bin, Args: args, StopTimeout: 10 * time.Second}, apiURL + "/readyz", nil
		},
	})
	if err != nil {
		t.Fatalf("starting Mailpit: %v", err)
	}
	s := &Server{
		SMTPAddr: smtpAddr,
		APIURL:   apiURL,
		CertPool: pool,
		t:        t,
		proc:     proc,
		http:     &http.Client{Timeout: 10 * time.Second},
	}
	t.Cleanup(func() { _ = proc.Stop() })
	if err := s.waitSMTP(ctx, o.TLS == TLSImplicit); err != nil {
		t.Fatalf("Mailpit's SMTP port %s does not answer: %v; its log:\n%s", smtpAddr, err, proc.Tail(20))
	}
	return s
}

// waitSMTP dials the SMTP port until it greets with 220 or ctx ends: the
// API may be up a moment before the SMTP listener.
func (s *Server) waitSMTP(ctx context.Context, implicitTLS bool) error {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		err := s.greets(ctx, implicitTLS)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-s.proc.Done():
			return fmt.Errorf("mailpit exited: %v", s.proc.Err())
		case <-tick.C:
		}
	}
}

// greets connects once and reads the greeting.
func (s *Server) greets(ctx context.Context, implicitTLS bool) error {
	var d net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := d.DialContext(dctx, "tcp", s.SMTPAddr)
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := dctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if implicitTLS {
		tc := tls.Client(c, &tls.Config{RootCAs: s.CertPool, ServerName: "127.0.0.1"})
		if err := tc.HandshakeContext(dctx); err != nil {
			return err
		}
		c = tc
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, "220") {
		return fmt.Errorf("greeting %q", strings.TrimSpace(line))
	}
	_, _ = io.WriteString(c, "QUIT\r\n")
	return nil
}

// Host returns the SMTP listener's host, 127.0.0.1.
func (s *Server) Host() string {
	h, _, _ := net.SplitHostPort(s.SMTPAddr)
	return h
}

// Stop stops Mailpit now (SIGTERM): later connections are refused. The
// cleanup at the end of the test does nothing more.
func (s *Server) Stop() {
	s.t.Helper()
	if err := s.proc.Stop(); err != nil {
		s.t.Logf("stopping Mailpit: %v", err)
	}
}

// Address is a name and an address, as Mailpit reports them.
type Address struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

// Summary is one message in the list of GET /api/v1/messages.
type Summary struct {
	// ID is Mailpit's id of the message, for [Server.Message].
	ID string `json:"ID"`
	// MessageID is the Message-ID header without angle brackets.
	MessageID string    `json:"MessageID"`
	From      Address   `json:"From"`
	To        []Address `json:"To"`
	Bcc       []Address `json:"Bcc"`
	Subject   string    `json:"Subject"`
	Snippet   string    `json:"Snippet"`
}

// Message is one message in full (GET /api/v1/message/{ID}).
type Message struct {
	ID        string    `json:"ID"`
	MessageID string    `json:"MessageID"`
	From      Address   `json:"From"`
	To        []Address `json:"To"`
	// ReturnPath is the envelope sender (MAIL FROM).
	ReturnPath string `json:"ReturnPath"`
	Subject    string `json:"Subject"`
	// Text and HTML are the decoded text/plain and text/html parts.
	Text string `json:"Text"`
	HTML string `json:"HTML"`
	// Headers are filled by [Server.Message] from
	// GET /api/v1/message/{ID}/headers.
	Headers map[string][]string `json:"-"`
	// Raw is the message as received (GET /api/v1/message/{ID}/raw).
	Raw string `json:"-"`
}

// Messages returns every message Mailpit holds, newest first.
func (s *Server) Messages() []Summary {
	s.t.Helper()
	var list struct {
		Total    int       `json:"total"`
		Messages []Summary `json:"messages"`
	}
	s.getJSON("/api/v1/messages?limit=1000", &list)
	return list.Messages
}

// Message returns the message with Mailpit's id, with its headers and raw
// source.
func (s *Server) Message(id string) Message {
	s.t.Helper()
	var m Message
	s.getJSON("/api/v1/message/"+id, &m)
	s.getJSON("/api/v1/message/"+id+"/headers", &m.Headers)
	m.Raw = string(s.get("/api/v1/message/" + id + "/raw"))
	return m
}

// WaitForMessages waits until Mailpit holds at least n messages and returns
// them; it fails the test after timeout.
func (s *Server) WaitForMessages(n int, timeout time.Duration) []Summary {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		msgs := s.Messages()
		if len(msgs) >= n {
			return msgs
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("timed out after %v waiting for %d messages in Mailpit: it has %d", timeout, n, len(msgs))
		}
		<-tick.C
	}
}

// DeleteAll deletes every message.
func (s *Server) DeleteAll() {
	s.t.Helper()
	s.do(http.MethodDelete, "/api/v1/messages", nil, nil)
}

// Trigger makes one SMTP command fail: with ErrorCode (400..599) in
// Probability percent of the commands (0..100).
type Trigger struct {
	ErrorCode   int `json:"ErrorCode"`
	Probability int `json:"Probability"`
}

// Chaos are Mailpit's fault triggers: Sender fails MAIL FROM, Recipient
// fails RCPT TO, Authentication fails AUTH. A zero trigger is off.
type Chaos struct {
	Sender         Trigger `json:"Sender"`
	Recipient      Trigger `json:"Recipient"`
	Authentication Trigger `json:"Authentication"`
}

// SetChaos replaces the fault triggers (PUT /api/v1/chaos); Chaos{} turns
// them all off. It needs [Options.Chaos].
func (s *Server) SetChaos(c Chaos) {
	s.t.Helper()
	body, err := json.Marshal(c)
	if err != nil {
		s.t.Fatal(err)
	}
	s.do(http.MethodPut, "/api/v1/chaos", body, nil)
}

func (s *Server) getJSON(path string, v any) {
	s.t.Helper()
	if err := json.Unmarshal(s.get(path), v); err != nil {
		s.t.Fatalf("decoding Mailpit's answer to GET %s: %v", path, err)
	}
}

func (s *Server) get(path string) []byte {
	s.t.Helper()
	var out []byte
	s.do(http.MethodGet, path, nil, &out)
	return out
}

// do makes one API request and fails the test unless it answers 2xx.
func (s *Server) do(method, path string, body []byte, out *[]byte) {
	s.t.Helper()
	req, err := http.NewRequest(method, s.APIURL+path, bytes.NewReader(body))
	if err != nil {
		s.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := s.http.Do(req)
	if err != nil {
		s.t.Fatalf("Mailpit %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("Mailpit %s %s: reading the answer: %v", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		s.t.Fatalf("Mailpit %s %s: %s: %s", method, path, resp.Status, bytes.TrimSpace(b))
	}
	if out != nil {
		*out = b
	}
}

// selfSigned writes a self-signed certificate for 127.0.0.1 and localhost,
// valid for a day, and its key into dir, and returns a pool that trusts it.
func selfSigned(dir string) (certFile, keyFile string, pool *x509.CertPool, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", "", nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "mailpittest"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return "", "", nil, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", nil, err
	}
	certFile, keyFile = filepath.Join(dir, "smtp-cert.pem"), filepath.Join(dir, "smtp-key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		return "", "", nil, err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return "", "", nil, err
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool, nil
}
