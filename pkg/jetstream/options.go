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

// The other environment variables of the NATS ecosystem's clients (the
// `nats` CLI reads the same names). The daemons take them as fallbacks after
// their own flags and <PREFIX>_* variables: see internal/daemon.NATSFlags.
const (
	EnvCreds    = "NATS_CREDS"
	EnvNKey     = "NATS_NKEY"
	EnvUser     = "NATS_USER"
	EnvPassword = "NATS_PASSWORD"
	EnvToken    = "NATS_TOKEN"
	EnvCA       = "NATS_CA"
	EnvCert     = "NATS_CERT"
	EnvKey      = "NATS_KEY"
	EnvContext  = "NATS_CONTEXT"
)

// The names of the connection flags [Options.RegisterFlags] registers.
const (
	FlagURL         = "nats"
	FlagCreds       = "nats-creds"
	FlagNKey        = "nats-nkey"
	FlagUser        = "nats-user"
	FlagPassword    = "nats-password"
	FlagToken       = "nats-token"
	FlagTLSCA       = "nats-tls-ca"
	FlagTLSCert     = "nats-tls-cert"
	FlagTLSKey      = "nats-tls-key"
	FlagContext     = "nats-context"
	FlagInboxPrefix = "nats-inbox-prefix"
)

// StandardEnv maps each connection flag to the standard environment variable
// that may set it (NATS_URL for -nats, NATS_CREDS for -nats-creds, ...).
func StandardEnv() map[string]string {
	return map[string]string{
		FlagURL: EnvURL, FlagCreds: EnvCreds, FlagNKey: EnvNKey, FlagUser: EnvUser, FlagPassword: EnvPassword,
		FlagToken: EnvToken, FlagTLSCA: EnvCA, FlagTLSCert: EnvCert, FlagTLSKey: EnvKey, FlagContext: EnvContext,
	}
}

// Options are the settings of a NATS connection. Both daemons register them
// with [Options.RegisterFlags] so that they accept identical flags.
type Options struct {
	// URLs is one or more server URLs separated by commas. Empty means
	// $NATS_URL, else [DefaultURL]. URLs may carry user:password@ or
	// token@; they are never logged or put into errors unredacted.
	URLs string
	// CredsFile is a NATS credentials file (JWT and nkey seed).
	CredsFile string
	// NKeyFile is a file holding a user's nkey seed (SU...), for a server
	// whose users are nkeys.
	NKeyFile string
	// User and Password authenticate with a user name and password.
	User, Password string
	// Token authenticates with a token.
	Token string
	// TLSCA is a PEM file of CA certificates to verify the server with.
	TLSCA string
	// TLSCert and TLSKey are a PEM client certificate and key for mutual
	// TLS; give both or neither.
	TLSCert, TLSKey string
	// Context is the `nats` CLI context to take the settings left unset
	// from: a name (read from where the CLI keeps it, see [ContextPath]) or
	// the path of a context's JSON file. Apply it with
	// [Options.ApplyContext]; Connect itself does not read it.
	Context string
	// InboxPrefix replaces _INBOX as the prefix of the connection's reply
	// subjects, so that a server can let each user subscribe to its own
	// replies only (subscribe permission <prefix>.>).
	InboxPrefix string
	// TLSFirst performs the TLS handshake before the server's greeting (a
	// context's tls_first).
	TLSFirst bool
	// Origins say where the URL and the credentials came from, for
	// Connect's start-up log line. Empty fields read "options".
	Origins Origins
	// Name is the client name the server shows in its connection list.
	Name string
	// ReconnectWait is the first delay between reconnect rounds; it doubles
	// up to MaxReconnectWait, with random jitter. Defaults 100ms and 2s.
	ReconnectWait, MaxReconnectWait time.Duration
	// ConnectTimeout bounds one dial and handshake. Default 2s.
	ConnectTimeout time.Duration
	// PingInterval is how often the client pings the server, and
	// MaxPingsOut how many pings may go unanswered before the connection is
	// taken as dead and the client reconnects, to another server of the
	// cluster if it can. Defaults 2s and 3: a server that stops answering
	// without closing the connection (a network cut, a frozen host) is
	// left within about 8 s. nats.go's own defaults, 2 minutes and 2, left
	// the daemons on such a node for 4 minutes or until the cut healed.
	PingInterval time.Duration
	MaxPingsOut  int
	// LeaveUnservedAfter is how long the connected server may fail to
	// serve JetStream (no meta leader there: a node cut off from its
	// cluster) before the connection moves to another server of its list
	// (unserved.go). Default 15s.
	LeaveUnservedAfter time.Duration
	// Reconnects, when set, hears when the connection comes back after
	// each disconnect (a worker's settle after a reconnect is timed from
	// it). Not a flag.
	Reconnects *Reconnects
}

// Origins say where a connection's settings came from: "flag -nats",
// "env NATS_URL", "file publisher.yaml:12", "context ops
// (/home/ops/.config/nats/context/ops.json)", "default".
type Origins struct {
	// URL is where the server URLs came from.
	URL string
	// Auth is where the authentication (credentials file, nkey seed,
	// user and password, token) came from.
	Auth string
}

// RegisterFlags registers the connection flags on fs, bound to o:
// -nats, -nats-creds, -nats-nkey, -nats-user, -nats-password, -nats-token,
// -nats-tls-ca, -nats-tls-cert, -nats-tls-key, -nats-context and
// -nats-inbox-prefix. The current values of o are the defaults.
func (o *Options) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.URLs, FlagURL, o.URLs, "NATS server `URLs`, comma-separated (default $"+EnvURL+", else "+DefaultURL+")")
	fs.StringVar(&o.CredsFile, FlagCreds, o.CredsFile, "NATS credentials `file` (JWT and nkey seed)")
	fs.StringVar(&o.NKeyFile, FlagNKey, o.NKeyFile, "`file` holding the NATS user's nkey seed (SU...)")
	fs.StringVar(&o.User, FlagUser, o.User, "NATS user `name` (with -nats-password)")
	fs.StringVar(&o.Password, FlagPassword, o.Password, "NATS `password` (never logged)")
	fs.StringVar(&o.Token, FlagToken, o.Token, "NATS authentication `token` (never logged)")
	fs.StringVar(&o.TLSCA, FlagTLSCA, o.TLSCA, "PEM `file` of CA certificates that verify the NATS server")
	fs.StringVar(&o.TLSCert, FlagTLSCert, o.TLSCert, "PEM client certificate `file` for mutual TLS (with -nats-tls-key)")
	fs.StringVar(&o.TLSKey, FlagTLSKey, o.TLSKey, "PEM client key `file` for mutual TLS (with -nats-tls-cert)")
	fs.StringVar(&o.Context, FlagContext, o.Context, "nats CLI `context` (a name, from $XDG_CONFIG_HOME/nats/context/NAME.json or ~/.config/nats/context/NAME.json, or a .json file) giving the connection settings not set otherwise")
	fs.StringVar(&o.InboxPrefix, FlagInboxPrefix, o.InboxPrefix, "`prefix` of the connection's reply subjects instead of _INBOX, for a server that lets each user subscribe to its own replies only")
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
	if methods := o.authMethods(); len(methods) > 1 {
		errs = append(errs, fmt.Errorf("%s: give at most one authentication method", strings.Join(methods, ", ")))
	}
	if o.InboxPrefix != "" && !validInboxPrefix(o.InboxPrefix) {
		errs = append(errs, fmt.Errorf("-%s %q: must be subject tokens without wildcards or spaces, like _INBOX_publisher", FlagInboxPrefix, o.InboxPrefix))
	}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		errs = append(errs, errors.New("-nats-tls-cert and -nats-tls-key: give both or neither"))
	}
	for _, f := range []struct{ flag, path string }{
		{"-nats-creds", o.CredsFile},
		{"-nats-nkey", o.NKeyFile},
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
	}{{"ReconnectWait", o.ReconnectWait}, {"MaxReconnectWait", o.MaxReconnectWait}, {"ConnectTimeout", o.ConnectTimeout}, {"PingInterval", o.PingInterval}, {"LeaveUnservedAfter", o.LeaveUnservedAfter}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %v must not be negative", d.name, d.v))
		}
	}
	if o.MaxPingsOut < 0 {
		errs = append(errs, fmt.Errorf("MaxPingsOut: %d must not be negative", o.MaxPingsOut))
	}
	return errors.Join(errs...)
}

// authMethods returns the flags of the authentication methods o sets.
func (o *Options) authMethods() []string {
	var out []string
	for _, m := range []struct {
		flag string
		set  bool
	}{{"-" + FlagCreds, o.CredsFile != ""}, {"-" + FlagNKey, o.NKeyFile != ""}, {"-" + FlagUser, o.User != ""}, {"-" + FlagToken, o.Token != ""}} {
		if m.set {
			out = append(out, m.flag)
		}
	}
	return out
}

// Auth describes the authentication o uses, without any secret: "credentials
// file PATH", "nkey seed file PATH", "user NAME and password", "token",
// "user and password in the URL", "none".
func (o *Options) Auth() string {
	switch {
	case o.CredsFile != "":
		return "credentials file " + o.CredsFile
	case o.NKeyFile != "":
		return "nkey seed file " + o.NKeyFile
	case o.User != "" && o.Password != "":
		return "user " + o.User + " and password"
	case o.User != "":
		return "user " + o.User
	case o.Token != "":
		return "token"
	case strings.Contains(o.ServerURLs(), "@"):
		return "credentials in the URL"
	}
	return "none"
}

// validInboxPrefix reports whether p can prefix subjects: tokens separated
// by dots, none empty, without wildcards or white space.
func validInboxPrefix(p string) bool {
	for _, tok := range strings.Split(p, ".") {
		if tok == "" || strings.ContainsAny(tok, "*> \t\r\n") {
			return false
		}
	}
	return true
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
	if o.PingInterval <= 0 {
		o.PingInterval = 2 * time.Second
	}
	if o.MaxPingsOut <= 0 {
		o.MaxPingsOut = 3
	}
	if o.LeaveUnservedAfter <= 0 {
		o.LeaveUnservedAfter = 15 * time.Second
	}
	return o
}
