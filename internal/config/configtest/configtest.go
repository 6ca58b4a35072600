// Package configtest checks the configuration files the project ships
// against the flags of the command that reads them.
package configtest

import (
	"bufio"
	"bytes"
	"flag"
	"os"
	"regexp"
	"slices"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/tgnotify/tgnotify/internal/config"
)

// setting matches a commented setting: "# key: value", maybe followed by a
// comment of its own.
var setting = regexp.MustCompile(`^#\s?([a-z][a-z0-9-]*):(\s.*)?$`)

// CheckCommentedDefaults checks a shipped configuration file for fs's
// command: the file sets nothing (every setting in it is a comment, so that
// the environment is never overridden by it), every commented "# key:
// value" is a flag of fs and shows that flag's default, and every flag of fs
// but skip is shown.
func CheckCommentedDefaults(t testing.TB, fs *flag.FlagSet, path string, skip ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if len(doc.Content) > 0 && !(doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null") {
		t.Errorf("%s sets settings (line %d): every setting must be a comment showing its default", path, doc.Content[0].Line)
	}
	shown := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for line := 1; sc.Scan(); line++ {
		m := setting.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		key := m[1]
		if first, dup := shown[key]; dup {
			t.Errorf("%s:%d: %s is shown again (first on line %d)", path, line, key, first)
			continue
		}
		shown[key] = line
		f := fs.Lookup(key)
		if f == nil || config.IsRemoved(f) {
			t.Errorf("%s:%d: %s is not a flag of %s (or was removed)", path, line, key, fs.Name())
			continue
		}
		var kv map[string]yaml.Node
		if err := yaml.Unmarshal([]byte(sc.Text()[1:]), &kv); err != nil {
			t.Errorf("%s:%d: the commented setting is not YAML: %v", path, line, err)
			continue
		}
		if v := kv[key]; v.Value != f.DefValue {
			t.Errorf("%s:%d: %s shows %q, the flag's default is %q", path, line, key, v.Value, f.DefValue)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	fs.VisitAll(func(f *flag.Flag) {
		if _, ok := shown[f.Name]; !ok && !slices.Contains(skip, f.Name) && !config.IsRemoved(f) {
			t.Errorf("%s does not show -%s (default %q)", path, f.Name, f.DefValue)
		}
	})
}
