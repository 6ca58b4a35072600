package notify

import (
	"html"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

func validateText(text string, mode ParseMode, limit int, limitName string) error {
	switch {
	case !utf8.ValidString(text):
		return invalid("text", "is not valid UTF-8")
	case len(text) > MaxTextBytes:
		return invalid("text", "is %d bytes long, the limit is %d", len(text), MaxTextBytes)
	}
	n := TextLength(text, mode)
	switch {
	case n == 0:
		return invalid("text", "is empty")
	case n > limit:
		return invalid("text", "is %d characters long after markup, %s limit is %d", n, limitName, limit)
	}
	return nil
}

// TextLength returns the length of text as Telegram counts it: UTF-16 code
// units of the visible text after markup is parsed. For HTML the tags are
// removed and entities decoded; for MarkdownV2 escaping backslashes are not
// counted (formatting characters are, so the count errs on the long side).
// Whitespace-only text counts as empty, as Telegram trims it.
func TextLength(text string, mode ParseMode) int {
	visible := text
	switch mode {
	case ParseModeHTML:
		visible = html.UnescapeString(stripTags(text))
	case ParseModeMarkdownV2:
		visible = stripEscapes(text)
	}
	if strings.TrimSpace(visible) == "" {
		return 0
	}
	n := 0
	for _, r := range visible {
		n += utf16.RuneLen(r)
	}
	return n
}

func stripTags(s string) string {
	if !strings.Contains(s, "<") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func stripEscapes(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	escaped := false
	for _, r := range s {
		if r == '\\' && !escaped {
			escaped = true
			continue
		}
		escaped = false
		b.WriteRune(r)
	}
	return b.String()
}
