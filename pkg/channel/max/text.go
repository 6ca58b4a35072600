package max

import (
	"html"
	"strings"

	"github.com/tgnotify/tgnotify/pkg/maxapi"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Text returns what MAX is sent for a notification's text and parse mode:
//
//   - plain text (no parse mode) goes as it is, without a format;
//   - Telegram HTML goes as MAX HTML. MAX supports b, strong, i, em, u,
//     ins, s, del, a href, code, pre and blockquote, as Telegram does, and
//     these are kept without their attributes (a keeps href). Telegram's
//     strike becomes s. A link whose address is not http, https or mailto
//     (Telegram's tg://user?id=…) keeps its text and loses the link.
//     Spoilers (tg-spoiler, span class="tg-spoiler"), custom emoji
//     (tg-emoji) and any other tag are removed and their text kept: MAX
//     has no spoiler, so a spoiler's text shows. Entities are kept; a
//     stray '<' or '>' is escaped;
//   - Telegram MarkdownV2 is converted to MAX HTML, because MAX's markdown
//     is not Telegram's (MAX's *x* is italic, Telegram's bold): *bold*,
//     _italic_, __underline__, ~strikethrough~, `code`, ```pre```,
//     [text](url) and > quotes become their tags, escapes are resolved,
//     ||spoilers|| lose their markers and ![emoji](tg://emoji?id=…) keeps
//     its emoji.
func Text(text string, mode notify.ParseMode) (string, maxapi.Format) {
	switch mode {
	case notify.ParseModeHTML:
		return convertHTML(text), maxapi.FormatHTML
	case notify.ParseModeMarkdownV2:
		return markdownV2ToHTML(text), maxapi.FormatHTML
	}
	return text, maxapi.FormatPlain
}

// keptTags are the Telegram HTML tags MAX supports, and what they become.
var keptTags = map[string]string{
	"b": "b", "strong": "strong", "i": "i", "em": "em", "u": "u", "ins": "ins",
	"s": "s", "strike": "s", "del": "del", "code": "code", "pre": "pre", "blockquote": "blockquote",
}

// linkSchemes are the link schemes MAX can open.
var linkSchemes = [...]string{"http://", "https://", "mailto:"}

func linkable(href string) bool {
	h := strings.ToLower(strings.TrimSpace(href))
	for _, s := range linkSchemes {
		if strings.HasPrefix(h, s) {
			return true
		}
	}
	return false
}

// attrEscaper escapes an attribute value for a double-quoted attribute.
var attrEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// convertHTML rewrites Telegram HTML as MAX HTML (see Text).
func convertHTML(s string) string {
	var b strings.Builder
	b.Grow(len(s))
	var links []bool // for each open <a>, whether it was kept
	for len(s) > 0 {
		i := strings.IndexAny(s, "<>")
		if i < 0 {
			b.WriteString(s)
			break
		}
		b.WriteString(s[:i])
		if s[i] == '>' {
			b.WriteString("&gt;")
			s = s[i+1:]
			continue
		}
		end := tagEnd(s[i:])
		if end < 0 {
			b.WriteString("&lt;")
			s = s[i+1:]
			continue
		}
		closing, name, attrs := parseTag(s[i+1 : i+end])
		s = s[i+end+1:]
		switch {
		case name == "a" && !closing:
			href, ok := attrs["href"]
			keep := ok && linkable(href)
			links = append(links, keep)
			if keep {
				b.WriteString(`<a href="` + attrEscaper.Replace(href) + `">`)
			}
		case name == "a":
			if n := len(links); n > 0 {
				if links[n-1] {
					b.WriteString("</a>")
				}
				links = links[:n-1]
			}
		case keptTags[name] != "":
			if closing {
				b.WriteString("</" + keptTags[name] + ">")
			} else {
				b.WriteString("<" + keptTags[name] + ">")
			}
		}
	}
	return b.String()
}

// tagEnd returns the index of the '>' that ends the tag s starts with,
// skipping quoted attribute values, or -1 when s is not a tag.
func tagEnd(s string) int {
	if len(s) < 2 || !(isLetter(s[1]) || s[1] == '/') {
		return -1
	}
	var quote byte
	for i := 1; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '>':
			return i
		case c == '<':
			return -1
		}
	}
	return -1
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// parseTag reads "name attr=value …" or "/name" (the text between < and >).
func parseTag(t string) (closing bool, name string, attrs map[string]string) {
	t = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(t), "/"))
	if rest, ok := strings.CutPrefix(t, "/"); ok {
		closing, t = true, strings.TrimSpace(rest)
	}
	n := 0
	for n < len(t) && (isLetter(t[n]) || t[n] >= '0' && t[n] <= '9' || t[n] == '-') {
		n++
	}
	name, t = strings.ToLower(t[:n]), t[n:]
	attrs = map[string]string{}
	for {
		t = strings.TrimLeft(t, " \t\r\n")
		if t == "" {
			return closing, name, attrs
		}
		k := strings.IndexAny(t, "= \t\r\n")
		if k < 0 {
			attrs[strings.ToLower(t)] = ""
			return closing, name, attrs
		}
		key := strings.ToLower(t[:k])
		t = strings.TrimLeft(t[k:], " \t\r\n")
		if !strings.HasPrefix(t, "=") {
			attrs[key] = ""
			continue
		}
		t = strings.TrimLeft(t[1:], " \t\r\n")
		var val string
		if t != "" && (t[0] == '"' || t[0] == '\'') {
			if j := strings.IndexByte(t[1:], t[0]); j >= 0 {
				val, t = t[1:1+j], t[2+j:]
			} else {
				val, t = t[1:], ""
			}
		} else {
			j := strings.IndexAny(t, " \t\r\n")
			if j < 0 {
				j = len(t)
			}
			val, t = t[:j], t[j:]
		}
		attrs[key] = html.UnescapeString(val)
	}
}

// mdConverter turns Telegram MarkdownV2 into MAX HTML.
type mdConverter struct {
	b     strings.Builder
	open  []string // inline tags open, innermost last; "spoiler" writes nothing
	quote bool     // inside a blockquote
}

// markdownV2ToHTML converts Telegram MarkdownV2 (see Text).
func markdownV2ToHTML(s string) string {
	var c mdConverter
	c.convert([]rune(s), true)
	c.closeAll()
	if c.quote {
		c.b.WriteString("</blockquote>")
	}
	return c.b.String()
}

// quoteMarker returns the length of the quote marker (">" or the
// expandable "**>") rs starts with, or 0.
func quoteMarker(rs []rune) int {
	switch {
	case len(rs) >= 3 && rs[0] == '*' && rs[1] == '*' && rs[2] == '>':
		return 3
	case len(rs) >= 1 && rs[0] == '>':
		return 1
	}
	return 0
}

// convert converts rs; with lines, a line that starts with a quote marker
// is quoted (the text of a link has no lines).
func (c *mdConverter) convert(rs []rune, lines bool) {
	for i := 0; i < len(rs); i++ {
		if lines && (i == 0 || rs[i-1] == '\n') {
			if n := quoteMarker(rs[i:]); n > 0 {
				if !c.quote {
					c.closeAll()
					c.b.WriteString("<blockquote>")
					c.quote = true
				}
				i += n
				if i >= len(rs) {
					break
				}
			}
		}
		r := rs[i]
		switch {
		case r == '\n' && lines && c.quote && quoteMarker(rs[i+1:]) == 0:
			// The quote ends with its last line.
			c.closeAll()
			c.b.WriteString("</blockquote>\n")
			c.quote = false
		case r == '\\' && i+1 < len(rs):
			i++
			c.text(rs[i])
		case r == '`' && i+2 < len(rs) && rs[i+1] == '`' && rs[i+2] == '`':
			end := findUnescaped(rs, i+3, "```")
			if end < 0 {
				c.text(r)
				continue
			}
			body := string(rs[i+3 : end])
			if nl := strings.IndexByte(body, '\n'); nl >= 0 && !strings.ContainsAny(body[:nl], " \t") {
				body = body[nl+1:] // the language line
			}
			c.b.WriteString("<pre>" + html.EscapeString(unescapeMD(body)) + "</pre>")
			i = end + 2
		case r == '`':
			end := findUnescaped(rs, i+1, "`")
			if end < 0 {
				c.text(r)
				continue
			}
			c.b.WriteString("<code>" + html.EscapeString(unescapeMD(string(rs[i+1:end]))) + "</code>")
			i = end
		case r == '*':
			c.toggle("b")
		case r == '_' && i+1 < len(rs) && rs[i+1] == '_':
			c.toggle("u")
			i++
		case r == '_':
			c.toggle("i")
		case r == '~':
			c.toggle("s")
		case r == '|' && i+1 < len(rs) && rs[i+1] == '|':
			c.toggle("spoiler")
			i++
		case r == '[' || (r == '!' && i+1 < len(rs) && rs[i+1] == '['):
			start := i
			if r == '!' {
				start++
			}
			text, url, next, ok := link(rs, start)
			if !ok {
				c.text(r)
				continue
			}
			switch {
			case r == '!': // a custom emoji: its alternative text
				c.convert(text, false)
			case linkable(url):
				var inner mdConverter
				inner.convert(text, false)
				inner.closeAll()
				c.b.WriteString(`<a href="` + attrEscaper.Replace(url) + `">` + inner.b.String() + "</a>")
			default:
				c.convert(text, false)
			}
			i = next - 1
		default:
			c.text(r)
		}
	}
}

// link reads [text](url) at rs[i] == '['. It returns the text, the
// unescaped url and the index after ')'.
func link(rs []rune, i int) (text []rune, url string, next int, ok bool) {
	close := findUnescaped(rs, i+1, "]")
	if close < 0 || close+1 >= len(rs) || rs[close+1] != '(' {
		return nil, "", 0, false
	}
	end := findUnescaped(rs, close+2, ")")
	if end < 0 {
		return nil, "", 0, false
	}
	return rs[i+1 : close], unescapeMD(string(rs[close+2 : end])), end + 1, true
}

// findUnescaped returns the index of the first unescaped occurrence of sep
// at or after from, or -1.
func findUnescaped(rs []rune, from int, sep string) int {
	pat := []rune(sep)
	for i := from; i+len(pat) <= len(rs); i++ {
		if rs[i] == '\\' {
			i++
			continue
		}
		match := true
		for k, p := range pat {
			if rs[i+k] != p {
				match = false
				break
			}
		}
		if match {
			return i
		}
	}
	return -1
}

// unescapeMD resolves MarkdownV2 backslash escapes.
func unescapeMD(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
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

// text writes one character, escaped for HTML.
func (c *mdConverter) text(r rune) {
	switch r {
	case '&':
		c.b.WriteString("&amp;")
	case '<':
		c.b.WriteString("&lt;")
	case '>':
		c.b.WriteString("&gt;")
	default:
		c.b.WriteRune(r)
	}
}

// toggle opens tag, or closes it when it is open, closing and reopening the
// tags opened after it so that the HTML stays well nested.
func (c *mdConverter) toggle(tag string) {
	at := -1
	for k, t := range c.open {
		if t == tag {
			at = k
		}
	}
	if at < 0 {
		c.open = append(c.open, tag)
		c.write(tag, false)
		return
	}
	above := append([]string(nil), c.open[at+1:]...)
	for k := len(c.open) - 1; k >= at; k-- {
		c.write(c.open[k], true)
	}
	c.open = c.open[:at]
	for _, t := range above {
		c.open = append(c.open, t)
		c.write(t, false)
	}
}

// closeAll closes every open tag: markup does not run across a quote's
// edge or the end of the text.
func (c *mdConverter) closeAll() {
	for k := len(c.open) - 1; k >= 0; k-- {
		c.write(c.open[k], true)
	}
	c.open = c.open[:0]
}

func (c *mdConverter) write(tag string, closing bool) {
	if tag == "spoiler" {
		return
	}
	if closing {
		c.b.WriteString("</" + tag + ">")
	} else {
		c.b.WriteString("<" + tag + ">")
	}
}
