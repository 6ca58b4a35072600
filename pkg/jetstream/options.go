package jetstream

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// DefaultURL is the server used when neither -nats nor $NATS_URL is set.
const DefaultURL = "nats://127.0.0.1:4222"

// EnvURL is the environment variable that provides the default server URLs.
const EnvURL = "NATS_URL"

// Options are the settings of a NATS connection. Both daemons register them
// with [Options.RegisterFlags] so that they accept identical flags.
type Options struct {
	// URLs is one or more server URLs separated by commas. Empty means
	// $NATS_URL, else [DefaultURL]. URLs may carry user:password@ or
	// token@; they are never logged or put into errors unredacted.
	URLs string
	// CredsFile is a NATS credentials file (JWT and nkey seed).
	CredsFile string
	// User and Password authenticate with a user name and password.
	User, Password string
	// Token authenticates with a token.
	Token string
	// TLSCA is a PEM file of CA certificates to verify the server with.
	TLSCA string
	// TLSCert and TLSKey are a PEM client certificate and key for mutual
	// TLS; give both or neither.
	TLSCert, TLSKey string
	// Name is the client name the server shows in its connection list.
	Name string
	// ReconnectWait is the first delay between reconnect rounds; it doubles
	// up to MaxReconnectWait, with random jitter. Defaults 100ms and 2s.
	ReconnectWait, MaxReconnectWait time.Duration
	// ConnectTimeout bounds one dial and handshake. Default 2s.
	ConnectTimeout time.Duration
}

// RegisterFlags registers the connection flags on fs, bound to o:
// -nats, -nats-creds, -nats-user, -nats-password, -nats-token,
// -nats-tls-ca, -nats-tls-cert and -nats-tls-key. The current values of o
// are the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.URLs, "nats", o.URLs, "NATS server `URLs`, comma-separated (default $"+EnvURL+", else "+DefaultURL+")")
	fs.StringVar(&o.CredsFile, "nats-creds", o.CredsFile, "NATS credentials `file` (JWT and nkey seed)")
	fs.StringVar(&o.User, "nats-user", o.User, "NATS user `name` (with -nats-password)")
	fs.StringVar(&o.Password, "nats-password", o.Password, "NATS `password` (never logged)")
	fs.StringVar(&o.Token, "nats-token", o.Token, "NATS authentication `token` (never logged)")
	fs.StringVar(&o.TLSCA, "nats-tls-ca", o.TLSCA, "PEM `file` of CA certificates that verify the NATS server")
	fs.StringVar(&o.TLSCert, "nats-tls-cert", o.TLSCert, "PEM client certificate `file` for mutual TLS (with -nats-tls-key)")
	fs.StringVar(&o.TLSKey, "nats-tls-key", o.TLSKey, "PEM client key `file` for mutual TLS (with -nats-tls-cert)")
}

// ServerURLs returns the URLs to connect to: o.URLs, else $NATS_URL, else
// [DefaultURL].
func (o *Options) ServerURLs() string {
	if u := strings.TrimSpace(o.URLs); u != "" {
		return u
	}
	if u := strings.TrimSpace(os.Getenv(EnvURL)); u != "" {
		return u
	}
	return DefaultURL
}

// Validate checks the options for contradictions and unreadable files. The
// error names the flag at fault and never contains a secret.
func (o *Options) Validate() error {
	var errs []error
	for _, u := range splitURLs(o.ServerURLs()) {
		if err := validateURL(u); err != nil {
			errs = append(errs, fmt.Errorf("-nats: %w", err))
		}
	}
	if o.Password != "" && o.User == "" {
		errs = append(errs, errors.New("-nats-password: requires -nats-user"))
	}
	methods := 0
	for _, set := range []bool{o.CredsFile != "", o.User != "", o.Token != ""} {
		if set {
			methods++
		}
	}
	if methods > 1 {
		errs = append(errs, errors.New("-nats-creds, -nats-user and -nats-token: give at most one authentication method"))
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		errs = append(errs, errors.New("-nats-tls-cert and -nats-tls-key: give both or neither"))
	}
	for _, f := range []struct{ flag, path string }{
		{"-nats-creds", o.CredsFile},
		{"-nats-tls-ca", o.TLSCA},
		{"-nats-tls-cert", o.TLSCert},
		{"-nats-tls-key", o.TLSKey},
	} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f.flag, err))
		}
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"ReconnectWait", o.ReconnectWait}, {"MaxReconnectWait", o.MaxReconnectWait}, {"ConnectTimeout", o.ConnectTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %v must not be negative", d.name, d.v))
		}
	}
	return errors.Join(errs...)
}

func (o Options) withDefaults() Options {
	if o.ReconnectWait <= 0 {
		o.ReconnectWait = 100 * time.Millisecond
	}
	if o.MaxReconnectWait <= 0 {
		o.MaxReconnectWait = 2 * time.Second
	}
	if o.MaxReconnectWait < o.ReconnectWait {
		o.MaxReconnectWait = o.ReconnectWait
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = 2 * time.Second
	}
	return o
}
