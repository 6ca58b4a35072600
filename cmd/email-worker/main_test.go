package main

import (
	"io"
	"testing"

	"github.com/tgnotify/tgnotify/internal/config/configtest"
	"github.com/tgnotify/tgnotify/internal/workerd"
)

// TestShippedConfigFile checks configs/email-worker.yaml: it parses, sets
// nothing (so it never overrides the environment), and shows every flag
// commented at its default.
func TestShippedConfigFile(t *testing.T) {
	const path = "../../configs/email-worker.yaml"
	s, err := workerd.Parse(spec(&flags{}), []string{"-config", path, "-smtp", "127.0.0.1:25", "-from", "noreply@shop.example"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	configtest.CheckCommentedDefaults(t, s.FlagSet(), path, "config", "version")
}
