package natstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// Certs are PEM files of a throw-away certificate authority and the
// certificates it signed: a server certificate for 127.0.0.1 and localhost,
// and a client certificate for mutual TLS. OtherCA is a second authority
// that signed nothing of these, to check that a wrong CA is refused.
type Certs struct {
	CA, OtherCA           string
	ServerCert, ServerKey string
	ClientCert, ClientKey string
}

// NewCerts generates the certificates in a temporary directory of t.
func NewCerts(t testing.TB) Certs {
	t.Helper()
	dir := t.TempDir()
	caCert, caKey := newCA(t, "tgnotify test CA")
	otherCert, _ := newCA(t, "some other CA")
	c := Certs{
		CA:         writePEM(t, dir, "ca.pem", "CERTIFICATE", caCert.Raw),
		OtherCA:    writePEM(t, dir, "other-ca.pem", "CERTIFICATE", otherCert.Raw),
		ServerCert: filepath.Join(dir, "server.pem"), ServerKey: filepath.Join(dir, "server-key.pem"),
		ClientCert: filepath.Join(dir, "client.pem"), ClientKey: filepath.Join(dir, "client-key.pem"),
	}
	leaf(t, caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "nats-server"},
		DNSNames:    []string{"localhost"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}, c.ServerCert, c.ServerKey)
	leaf(t, caCert, caKey, &x509.Certificate{
		Subject:     pkix.Name{CommonName: "tgnotify-daemon"},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, c.ClientCert, c.ClientKey)
	return c
}

// WithTLS makes the server require TLS with the certificates' server
// certificate, and, when verifyClients is set, a client certificate signed
// by their CA (mutual TLS).
func WithTLS(t testing.TB, c Certs, verifyClients bool) Option {
	t.Helper()
	tc, err := server.GenTLSConfig(&server.TLSConfigOpts{CertFile: c.ServerCert, KeyFile: c.ServerKey, CaFile: c.CA, Verify: verifyClients})
	if err != nil {
		t.Fatalf("natstest: TLS configuration: %v", err)
	}
	return func(o *server.Options) {
		o.TLSConfig = tc
		o.TLS = true
		o.TLSVerify = verifyClients
		o.TLSTimeout = 5
	}
}

// Operator is a decentralized-authentication setup: an operator, a system
// account, an application account with JetStream enabled, and a user of it
// whose credentials file (JWT and nkey seed) is Creds.
type Operator struct {
	// Creds is the user's credentials file, as `nsc` writes it.
	Creds string
	// OtherCreds is a user of an account the server does not know.
	OtherCreds string
	opts       func(*server.Options)
}

// NewOperator generates the keys and JWTs and writes the credentials files.
func NewOperator(t testing.TB) *Operator {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("natstest: operator setup: %v", err)
		}
	}
	opKP, err := nkeys.CreateOperator()
	must(err)
	opPub, err := opKP.PublicKey()
	must(err)
	opClaims := jwt.NewOperatorClaims(opPub)
	opJWT, err := opClaims.Encode(opKP)
	must(err)
	opDecoded, err := jwt.DecodeOperatorClaims(opJWT)
	must(err)

	resolver := &server.MemAccResolver{}
	account := func(name string, jetStream bool) (nkeys.KeyPair, string) {
		kp, err := nkeys.CreateAccount()
		must(err)
		pub, err := kp.PublicKey()
		must(err)
		ac := jwt.NewAccountClaims(pub)
		ac.Name = name
		if jetStream {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		token, err := ac.Encode(opKP)
		must(err)
		must(resolver.Store(pub, token))
		return kp, pub
	}
	_, sysPub := account("SYS", false)
	appKP, _ := account("APP", true)

	dir := t.TempDir()
	user := func(signer nkeys.KeyPair, file string) string {
		ukp, err := nkeys.CreateUser()
		must(err)
		upub, err := ukp.PublicKey()
		must(err)
		uc := jwt.NewUserClaims(upub)
		uc.Name = "tgnotify"
		token, err := uc.Encode(signer)
		must(err)
		seed, err := ukp.Seed()
		must(err)
		creds, err := jwt.FormatUserConfig(token, seed)
		must(err)
		path := filepath.Join(dir, file)
		must(os.WriteFile(path, creds, 0o600))
		return path
	}
	strangerKP, err := nkeys.CreateAccount()
	must(err)
	return &Operator{
		Creds:      user(appKP, "app.creds"),
		OtherCreds: user(strangerKP, "stranger.creds"),
		opts: func(o *server.Options) {
			o.TrustedOperators = []*jwt.OperatorClaims{opDecoded}
			o.AccountResolver = resolver
			o.SystemAccount = sysPub
		},
	}
}

// Option makes a server trust the operator: clients authenticate with a
// credentials file of one of its accounts.
func (op *Operator) Option() Option { return op.opts }

func newCA(t testing.TB, name string) (*x509.Certificate, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(t),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return cert, key
}

// leaf signs tmpl with the CA and writes the certificate and its key.
func leaf(t testing.TB, ca *x509.Certificate, caKey *ecdsa.PrivateKey, tmpl *x509.Certificate, certPath, keyPath string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial(t)
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(24 * time.Hour)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writePEM(t, filepath.Dir(certPath), filepath.Base(certPath), "CERTIFICATE", der)
	writePEM(t, filepath.Dir(keyPath), filepath.Base(keyPath), "PRIVATE KEY", keyDER)
}

func serial(t testing.TB) *big.Int {
	t.Helper()
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func writePEM(t testing.TB, dir, name, kind string, der []byte) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
