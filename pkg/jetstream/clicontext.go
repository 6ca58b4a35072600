package jetstream

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
)

// CLIContext is a `nats` CLI context: a named set of connection settings
// that `nats context save NAME --server URL --creds FILE ...` writes as JSON
// (natscli v0.5.0, jsm.go's natscontext format). [LoadContext] reads it;
// [Options.ApplyContext] takes from it what the daemon's own settings leave
// unset.
//
// Paths may start with ~ and hold $VARIABLES, as the CLI allows, and may be
// written as file:// URIs. A password or token may be an env://NAME or
// file:// reference. What the daemons cannot honour (credentials fetched
// with op://, nsc:// or embedded as data: URIs, JetStream domains and API
// prefixes, SOCKS proxies, a separate JWT and seed) is refused by
// LoadContext with an error naming the field, rather than ignored.
type CLIContext struct {
	// Name is the context's name (a file's base name without .json).
	Name string
	// Path is the file it was read from.
	Path string
	// URL is the server URLs, comma-separated.
	URL string
	// User and Password, Token, Creds (a credentials file) and NKey (a
	// seed file) are its authentication; at most one is set.
	User, Password, Token, Creds, NKey string
	// CA, Cert and Key are TLS files.
	CA, Cert, Key string
	// InboxPrefix replaces _INBOX for replies.
	InboxPrefix string
	// TLSFirst performs the TLS handshake before the server's greeting.
	TLSFirst bool
}

// String describes the context without its secrets: "context NAME (PATH)".
func (c *CLIContext) String() string { return "context " + c.Name + " (" + c.Path + ")" }

// GoString is String, so that %#v shows no secret either.
func (c *CLIContext) GoString() string { return c.String() }

// ContextError is a context that cannot be used: missing, unreadable, or
// asking for something the daemons do not support. Its message names the
// context's file and the field, never a secret.
type ContextError struct {
	// Context is the name or path given.
	Context string
	// Path is the file, when known.
	Path string
	// Field is the JSON field at fault, or "".
	Field string
	// Err says what is wrong.
	Err error
}

// Error reads "nats context NAME (PATH): FIELD: what is wrong".
func (e *ContextError) Error() string {
	var b strings.Builder
	b.WriteString("nats context " + e.Context)
	if e.Path != "" && e.Path != e.Context {
		b.WriteString(" (" + e.Path + ")")
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Err.Error())
	return b.String()
}

// Unwrap returns what is wrong.
func (e *ContextError) Unwrap() error { return e.Err }

// contextFile is the JSON of a context file: the fields the daemons read,
// and those they must refuse when set.
type contextFile struct {
	URL         string `json:"url"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Token       string `json:"token"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	InboxPrefix string `json:"inbox_prefix"`
	TLSFirst    bool   `json:"tls_first"`

	NSC           string   `json:"nsc"`
	JSDomain      string   `json:"jetstream_domain"`
	JSAPIPrefix   string   `json:"jetstream_api_prefix"`
	JSEventPrefix string   `json:"jetstream_event_prefix"`
	SocksProxy    string   `json:"socks_proxy"`
	UserJWT       string   `json:"user_jwt"`
	UserSeed      string   `json:"user_seed"`
	WinCertStore  string   `json:"windows_cert_store"`
	WinCertMatch  string   `json:"windows_cert_match"`
	WinCACerts    []string `json:"windows_ca_certs_match"`
}

// ContextPath returns the file of the context named name where the `nats`
// CLI keeps it: $XDG_CONFIG_HOME/nats/context/<name>.json, else
// $HOME/.config/nats/context/<name>.json. getenv reads the environment.
func ContextPath(name string, getenv func(string) string) (string, error) {
	if name == "" || strings.Contains(name, "..") || strings.ContainsAny(name, `/\`) {
		return "", fmt.Errorf("%q is not a context name (no slashes, no ..)", name)
	}
	root := getenv("XDG_CONFIG_HOME")
	if root == "" {
		home := getenv("HOME")
		if home == "" {
			var err error
			if home, err = os.UserHomeDir(); err != nil {
				return "", fmt.Errorf("finding the contexts: neither XDG_CONFIG_HOME nor HOME is set: %w", err)
			}
		}
		root = filepath.Join(home, ".config")
	}
	return filepath.Join(root, "nats", "context", name+".json"), nil
}

// LoadContext reads the `nats` CLI context ref: the path of a JSON file
// when ref ends in .json and names an existing file (as the CLI's
// --context accepts), else a context name looked up with [ContextPath].
// getenv reads the environment (XDG_CONFIG_HOME, HOME, and the variables a
// path or an env:// reference names). Every failure is a *[ContextError].
func LoadContext(ref string, getenv func(string) string) (*CLIContext, error) {
	path := ref
	name := strings.TrimSuffix(filepath.Base(ref), ".json")
	if st, err := os.Stat(ref); err != nil || st.IsDir() || !strings.HasSuffix(ref, ".json") {
		p, err := ContextPath(ref, getenv)
		if err != nil {
			return nil, &ContextError{Context: ref, Err: err}
		}
		path, name = p, ref
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = fmt.Errorf("no such context (create it with `nats context save %s --server URL ...`)", name)
		}
		return nil, &ContextError{Context: ref, Path: path, Err: err}
	}
	var f contextFile
	if err := json.Unmarshal(b, &f); err != nil {
		// json's errors quote no input values, only offsets and types.
		return nil, &ContextError{Context: ref, Path: path, Err: fmt.Errorf("not a context file: %w", err)}
	}
	fail := func(field string, err error) (*CLIContext, error) {
		return nil, &ContextError{Context: ref, Path: path, Field: field, Err: err}
	}
	for _, u := range []struct {
		field string
		set   bool
	}{
		{"nsc", f.NSC != ""}, {"jetstream_domain", f.JSDomain != ""}, {"jetstream_api_prefix", f.JSAPIPrefix != ""},
		{"jetstream_event_prefix", f.JSEventPrefix != ""}, {"socks_proxy", f.SocksProxy != ""},
		{"user_jwt", f.UserJWT != ""}, {"user_seed", f.UserSeed != ""},
		{"windows_cert_store", f.WinCertStore != "" || f.WinCertMatch != "" || len(f.WinCACerts) > 0},
	} {
		if u.set {
			return fail(u.field, errors.New("set, but tgnotify's daemons do not support it: save a context without it (a creds or nkey file, the default JetStream API)"))
		}
	}
	c := &CLIContext{Name: name, Path: path, URL: strings.TrimSpace(f.URL), User: f.User, InboxPrefix: f.InboxPrefix, TLSFirst: f.TLSFirst}
	for _, p := range []struct {
		field string
		ref   string
		dst   *string
	}{{"creds", f.Creds, &c.Creds}, {"nkey", f.NKey, &c.NKey}, {"ca", f.CA, &c.CA}, {"cert", f.Cert, &c.Cert}, {"key", f.Key, &c.Key}} {
		v, err := contextPath(p.ref, getenv)
		if err != nil {
			return fail(p.field, err)
		}
		*p.dst = v
	}
	for _, s := range []struct {
		field string
		ref   string
		dst   *string
	}{{"password", f.Password, &c.Password}, {"token", f.Token, &c.Token}} {
		v, err := contextSecret(s.ref, getenv)
		if err != nil {
			return fail(s.field, err)
		}
		*s.dst = v
	}
	n := 0
	for _, set := range []bool{c.User != "", c.Creds != "", c.NKey != "", c.Token != "" && c.User == ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return fail("", errors.New("sets more than one of user, creds, nkey and token"))
	}
	if c.User != "" && c.Password == "" && c.Token == "" {
		// The CLI reads a user without a password as a token.
		c.Token, c.User = c.User, ""
	}
	return c, nil
}

// scheme returns the URI scheme of a credential reference, or "" for a
// plain path or literal (a one-letter scheme is a Windows drive).
func scheme(ref string) string {
	u, err := url.Parse(ref)
	if err != nil || len(u.Scheme) < 2 {
		if strings.HasPrefix(ref, "data:") {
			return "data"
		}
		return ""
	}
	return u.Scheme
}

// contextPath resolves a file reference of a context: a path (~ and $VAR
// expanded) or file://path. Other schemes are refused without echoing the
// reference, which may embed the secret itself (data:).
func contextPath(ref string, getenv func(string) string) (string, error) {
	if ref == "" {
		return "", nil
	}
	switch s := scheme(ref); s {
	case "":
	case "file":
		ref = strings.TrimPrefix(ref, "file://")
	default:
		return "", fmt.Errorf("a %s: reference, which tgnotify's daemons do not read: point it at a file (nats context save without --embed)", s)
	}
	return expandPath(ref, getenv), nil
}

// contextSecret resolves a password or token of a context: literal, or
// env://NAME, or file://PATH. Other schemes are refused.
func contextSecret(ref string, getenv func(string) string) (string, error) {
	switch s := scheme(ref); s {
	case "env":
		name := strings.TrimPrefix(ref, "env://")
		v := getenv(name)
		if v == "" {
			return "", fmt.Errorf("env://%s: the variable is not set", name)
		}
		return v, nil
	case "file":
		b, err := os.ReadFile(expandPath(strings.TrimPrefix(ref, "file://"), getenv))
		if err != nil {
			return "", err
		}
		return strings.TrimSpace(string(b)), nil
	case "op", "nsc", "data":
		return "", fmt.Errorf("a %s: reference, which tgnotify's daemons do not read: use a literal, env:// or file://", s)
	}
	return ref, nil
}

// expandPath expands $VARIABLES and a leading ~ as the CLI does.
func expandPath(p string, getenv func(string) string) string {
	p = os.Expand(p, getenv)
	if p == "~" || strings.HasPrefix(p, "~/") {
		home := getenv("HOME")
		if home == "" {
			home, _ = os.UserHomeDir()
		}
		p = filepath.Join(home, strings.TrimPrefix(p, "~"))
	}
	return p
}

// ApplyContext fills from c the settings of o that are not explicit: the
// URL when explicit(FlagURL) is false; the authentication when no
// authentication flag is explicit; the CA, the client certificate and key
// (as a pair), the inbox prefix and tls_first the same way. It records in
// o.Origins what came from the context.
func (o *Options) ApplyContext(c *CLIContext, explicit func(flag string) bool) {
	from := c.String()
	if !explicit(FlagURL) && c.URL != "" {
		o.URLs = c.URL
		o.Origins.URL = from
	}
	if !explicit(FlagCreds) && !explicit(FlagNKey) && !explicit(FlagUser) && !explicit(FlagToken) && !explicit(FlagPassword) {
		o.CredsFile, o.NKeyFile, o.User, o.Password, o.Token = c.Creds, c.NKey, c.User, c.Password, c.Token
		if c.Creds != "" || c.NKey != "" || c.User != "" || c.Token != "" {
			o.Origins.Auth = from
		}
	}
	if !explicit(FlagTLSCA) && c.CA != "" {
		o.TLSCA = c.CA
	}
	if !explicit(FlagTLSCert) && !explicit(FlagTLSKey) && c.Cert != "" {
		o.TLSCert, o.TLSKey = c.Cert, c.Key
	}
	if !explicit(FlagInboxPrefix) && c.InboxPrefix != "" {
		o.InboxPrefix = c.InboxPrefix
	}
	if c.TLSFirst {
		o.TLSFirst = true
	}
}
