package main

import (
	"io"
	"testing"

	"github.com/tgnotify/tgnotify/internal/config/configtest"
	"github.com/tgnotify/tgnotify/internal/workerd"
)

// TestShippedConfigFile checks configs/sms-worker.yaml: it parses, sets
// nothing (so it never overrides the environment), and shows every flag
// commented at its default.
func TestShippedConfigFile(t *testing.T) {
	const path = "../../configs/sms-worker.yaml"
	s, err := workerd.Parse(spec(&flags{}), []string{"-config", path, "-from", "+15005550006"}, func(string) string { return "" }, io.Discard)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	configtest.CheckCommentedDefaults(t, s.FlagSet(), path, "config", "version")
}
