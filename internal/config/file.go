package config

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"go.yaml.in/yaml/v3"
)

// applyFile sets every flag not given on the command line or in the
// environment from the YAML file at path. The file is a mapping of flag
// names to values; a list is given to the flag comma-separated.
func (s *Set) applyFile(path string) error {
	fileErr := func(err error) error {
		if s.opts.ConfigFlag == "" {
			return &Error{Err: fmt.Errorf("%s: %w", path, err)}
		}
		return &Error{Flag: s.opts.ConfigFlag, Value: path, Err: err}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return fileErr(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return fileErr(fmt.Errorf("not valid YAML: %w", err))
	}
	if len(doc.Content) == 0 {
		return nil // empty, or only comments
	}
	root := doc.Content[0]
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil
	}
	if root.Kind != yaml.MappingNode {
		return fileErr(fmt.Errorf("line %d: want a mapping of flag names to values", root.Line))
	}
	var errs []error
	seen := map[string]int{}
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		origin := Origin{Source: FromFile, Where: fmt.Sprintf("%s:%d", path, k.Line)}
		key := k.Value
		if first, dup := seen[key]; dup {
			errs = append(errs, &Error{Origin: origin, Err: fmt.Errorf("key %q repeats the one on line %d", key, first)})
			continue
		}
		seen[key] = k.Line
		if err := s.fileKey(key); err != nil {
			errs = append(errs, &Error{Origin: origin, Err: err})
			continue
		}
		if hint, ok := s.removed[key]; ok {
			errs = append(errs, &Error{Flag: key, Origin: origin, Err: errors.New("removed: " + hint)})
			continue
		}
		value, err := scalar(v)
		if err != nil {
			errs = append(errs, &Error{Flag: key, Origin: origin, Err: err})
			continue
		}
		if o, set := s.origins[key]; set && o.Source > FromFile {
			continue // the command line or the environment wins
		}
		if err := s.set(key, value, origin); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// fileKey reports why key cannot appear in the file, if it cannot.
func (s *Set) fileKey(key string) error {
	if s.fs.Lookup(key) == nil || key == s.opts.ConfigFlag {
		return fmt.Errorf("unknown key %q: not a setting of %s (see %s -h)", key, s.name, s.name)
	}
	if s.fileKeys != nil && !s.fileKeys[key] {
		return fmt.Errorf("key %q does not belong in this file: %s", key, s.fileHint)
	}
	return nil
}

// scalar returns the text of a value: a scalar as written, a list of
// scalars joined with commas.
func scalar(v *yaml.Node) (string, error) {
	switch {
	case v.Kind == yaml.ScalarNode && v.Tag == "!!null":
		return "", errors.New("no value (write \"\" for an empty one, or remove the key for the default)")
	case v.Kind == yaml.ScalarNode:
		return v.Value, nil
	case v.Kind == yaml.SequenceNode:
		parts := make([]string, 0, len(v.Content))
		for _, e := range v.Content {
			if e.Kind != yaml.ScalarNode {
				return "", fmt.Errorf("line %d: a list of plain values is expected", e.Line)
			}
			parts = append(parts, e.Value)
		}
		return strings.Join(parts, ","), nil
	}
	return "", fmt.Errorf("line %d: a value or a list of values is expected", v.Line)
}
