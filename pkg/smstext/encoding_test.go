package smstext_test

import (
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/smstext"
)

func TestMeasure(t *testing.T) {
	const emoji = "😀" // outside the BMP: two UTF-16 code units
	tests := []struct {
		name string
		text string
		want smstext.Size
	}{
		{"empty", "", smstext.Size{}},
		{"latin", "Hello", smstext.Size{Encoding: smstext.GSM7, Units: 5, Segments: 1}},
		{"gsm7 full single", strings.Repeat("a", 160), smstext.Size{Encoding: smstext.GSM7, Units: 160, Segments: 1}},
		{"gsm7 one over", strings.Repeat("a", 161), smstext.Size{Encoding: smstext.GSM7, Units: 161, Segments: 2}},
		{"gsm7 two full parts", strings.Repeat("a", 306), smstext.Size{Encoding: smstext.GSM7, Units: 306, Segments: 2}},
		{"gsm7 three parts", strings.Repeat("a", 307), smstext.Size{Encoding: smstext.GSM7, Units: 307, Segments: 3}},
		{"gsm7 accented in alphabet", "é à ü Ñ ß Ø Å Δ £ ¥ § ¿ ¡", smstext.Size{Encoding: smstext.GSM7, Units: 25, Segments: 1}},
		{"extension counts two", "{[~]}", smstext.Size{Encoding: smstext.GSM7, Units: 10, Segments: 1}},
		{"euro counts two", "10€", smstext.Size{Encoding: smstext.GSM7, Units: 4, Segments: 1}},
		{"extension fills single", strings.Repeat("{", 80), smstext.Size{Encoding: smstext.GSM7, Units: 160, Segments: 1}},
		{"extension over single", strings.Repeat("|", 81), smstext.Size{Encoding: smstext.GSM7, Units: 162, Segments: 2}},
		// 306 septets would be two parts if an escape could be split from
		// its character; it cannot, so the '{' opens the second part.
		{"escape not split across parts", strings.Repeat("a", 152) + "{" + strings.Repeat("a", 152), smstext.Size{Encoding: smstext.GSM7, Units: 306, Segments: 3}},
		{"cyrillic", "Привет", smstext.Size{Encoding: smstext.UCS2, Units: 6, Segments: 1}},
		{"cyrillic full single", strings.Repeat("я", 70), smstext.Size{Encoding: smstext.UCS2, Units: 70, Segments: 1}},
		{"cyrillic one over", strings.Repeat("я", 71), smstext.Size{Encoding: smstext.UCS2, Units: 71, Segments: 2}},
		{"cyrillic two parts", strings.Repeat("я", 134), smstext.Size{Encoding: smstext.UCS2, Units: 134, Segments: 2}},
		{"cyrillic three parts", strings.Repeat("я", 135), smstext.Size{Encoding: smstext.UCS2, Units: 135, Segments: 3}},
		{"one cyrillic letter makes all UCS-2", strings.Repeat("a", 70) + "ж", smstext.Size{Encoding: smstext.UCS2, Units: 71, Segments: 2}},
		{"emoji is two units", emoji, smstext.Size{Encoding: smstext.UCS2, Units: 2, Segments: 1}},
		{"emoji fill single", strings.Repeat(emoji, 35), smstext.Size{Encoding: smstext.UCS2, Units: 70, Segments: 1}},
		{"emoji over single", strings.Repeat(emoji, 36), smstext.Size{Encoding: smstext.UCS2, Units: 72, Segments: 2}},
		// 134 units would be two parts if a surrogate pair could be split.
		{"surrogate pair not split", "ab" + strings.Repeat(emoji, 66), smstext.Size{Encoding: smstext.UCS2, Units: 134, Segments: 3}},
		{"typographic dash is UCS-2", "a — b", smstext.Size{Encoding: smstext.UCS2, Units: 5, Segments: 1}},
		{"backtick is not GSM-7", "`", smstext.Size{Encoding: smstext.UCS2, Units: 1, Segments: 1}},
		{"tab is not GSM-7", "a\tb", smstext.Size{Encoding: smstext.UCS2, Units: 3, Segments: 1}},
		{"newline is GSM-7", "a\nb", smstext.Size{Encoding: smstext.GSM7, Units: 3, Segments: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := smstext.Measure(tt.text); got != tt.want {
				t.Errorf("Measure = %+v, want %+v", got, tt.want)
			}
			if got := smstext.Segments(tt.text); got != tt.want.Segments {
				t.Errorf("Segments = %d, want %d", got, tt.want.Segments)
			}
			if got, want := smstext.IsGSM7(tt.text), tt.want.Encoding != smstext.UCS2; got != want {
				t.Errorf("IsGSM7 = %v, want %v", got, want)
			}
		})
	}
}

func TestEncodingString(t *testing.T) {
	for e, want := range map[smstext.Encoding]string{0: "none", smstext.GSM7: "GSM-7", smstext.UCS2: "UCS-2"} {
		if got := e.String(); got != want {
			t.Errorf("Encoding(%d).String() = %q, want %q", e, got, want)
		}
	}
}
