package main

import (
	"errors"
	"flag"
	"io"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunRejectsBadCommandLines(t *testing.T) {
	work := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"too few runs", []string{"-runs", "2"}, "at least 3"},
		{"too few telegram runs", []string{"-telegram-runs", "1"}, "at least 3"},
		{"unknown scenario", []string{"-only", "1,10"}, `unknown scenario "10"`},
		{"report inside the work directory", []string{"-work", work, "-out", filepath.Join(work, "B.md")}, "inside the work directory"},
		{"plots are the work directory", []string{"-work", work, "-plots", work}, "inside the work directory"},
		{"zero size", []string{"-drain-rows", "0"}, "DrainRows"},
		{"stray argument", []string{"now"}, "unexpected arguments"},
		{"unknown flag", []string{"-fast"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := run(tc.args, io.Discard, io.Discard)
			var ue usageError
			if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want a usage error containing %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestRunHelp(t *testing.T) {
	var out strings.Builder
	if err := run([]string{"-h"}, io.Discard, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("run(-h) = %v, want flag.ErrHelp", err)
	}
	for _, want := range []string{"-runs", "-only", "-smoke", "BENCHMARKS.md"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-h output lacks %q", want)
		}
	}
}

func TestInside(t *testing.T) {
	for _, tc := range []struct {
		path, dir string
		want      bool
	}{
		{".bench/x.md", ".bench", true},
		{".bench", ".bench", true},
		{"BENCHMARKS.md", ".bench", false},
		{".benchmarks/x", ".bench", false},
		{"docs/bench", ".bench", false},
	} {
		if got := inside(tc.path, tc.dir); got != tc.want {
			t.Errorf("inside(%q, %q) = %v, want %v", tc.path, tc.dir, got, tc.want)
		}
	}
}
