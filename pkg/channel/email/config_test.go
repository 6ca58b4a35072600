package email_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

// fields returns the Config fields err names.
func fields(err error) []string {
	var out []string
	var walk func(error)
	walk = func(err error) {
		var fe *delivery.FieldError
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		if errors.As(err, &fe) {
			out = append(out, fe.Field)
		}
	}
	walk(err)
	slices.Sort(out)
	return out
}

func TestConfigValidate(t *testing.T) {
	ok := email.Config{Addr: "smtp.example.com:587", From: "Shop <noreply@shop.example>"}
	if err := ok.Validate(); err != nil {
		t.Fatalf("got %v for a valid config, want nil", err)
	}
	tests := []struct {
		name   string
		change func(*email.Config)
		want   []string
	}{
		{"no addr", func(c *email.Config) { c.Addr = "" }, []string{"Addr"}},
		{"addr without port", func(c *email.Config) { c.Addr = "smtp.example.com" }, []string{"Addr"}},
		{"bad port", func(c *email.Config) { c.Addr = "smtp.example.com:99999" }, []string{"Addr"}},
		{"unknown tls mode", func(c *email.Config) { c.TLS = "ssl" }, []string{"TLS"}},
		{"username without password", func(c *email.Config) { c.Username = "shop" }, []string{"Password"}},
		{"password in clear to a remote host", func(c *email.Config) { c.TLS, c.Username, c.Password = email.TLSNone, "shop", "s3cret" }, []string{"TLS"}},
		{"no from", func(c *email.Config) { c.From = "" }, []string{"From"}},
		{"bad from", func(c *email.Config) { c.From = "not an address" }, []string{"From"}},
		{"bad message id domain", func(c *email.Config) { c.MessageIDDomain = "shop example" }, []string{"MessageIDDomain"}},
		{"negative timeout", func(c *email.Config) { c.Timeout = -1 }, []string{"Timeout"}},
		{"negative rates", func(c *email.Config) { c.Rate, c.RecipientPerMinute = -1, -2 }, []string{"Rate", "RecipientPerMinute"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.change(&c)
			err := c.Validate()
			if got := fields(err); !slices.Equal(got, tt.want) {
				t.Errorf("got fields %v (%v), want %v", got, err, tt.want)
			}
			if err != nil && strings.Contains(err.Error(), "s3cret") {
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}

func TestConfigAllowsCredentialsInClearToLoopbackOnly(t *testing.T) {
	c := email.Config{Addr: "127.0.0.1:1025", TLS: email.TLSNone, Username: "u", Password: "p", From: "a@shop.example"}
	if err := c.Validate(); err != nil {
		t.Errorf("got %v, want nil for a loopback server", err)
	}
}

func TestNewFillsDefaults(t *testing.T) {
	ch, err := email.New(email.Config{Addr: "smtp.example.com:587", From: "Shop <noreply@shop.example>"}, email.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	c := ch.Config()
	if c.TLS != email.DefaultTLS || c.Timeout != email.DefaultTimeout || c.Rate != email.DefaultRate ||
		c.RecipientPerMinute != email.DefaultRecipientPerMinute || c.MessageIDDomain != "shop.example" {
		t.Errorf("got %+v, want the defaults and the From domain for Message-IDs", c)
	}
	l := ch.Limits()
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	if l.Rate != email.DefaultRate || l.RecipientRate("e1") != email.DefaultRecipientPerMinute/60.0 {
		t.Errorf("got rates %v and %v, want %v and %v", l.Rate, l.RecipientRate("e1"), email.DefaultRate, email.DefaultRecipientPerMinute/60.0)
	}
	if ch.Name() != "email" {
		t.Errorf("got name %q, want email", ch.Name())
	}
}
