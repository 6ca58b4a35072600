package email

import (
	"html"
	"net/url"
	"strings"
	"unicode"

	"github.com/tgnotify/tgnotify/pkg/notify"
)

// Body is a notification rendered for email: an HTML fragment and its plain
// text.
type Body struct {
	// HTML is safe to put inside <body>: only the tags of Telegram's HTML
	// that mean the same in email are kept, without attributes (links keep
	// an http, https, mailto or tel href), and everything else is escaped
	// text.
	HTML string
	// Text is the plain text: markup removed, entities decoded, a link's
	// address after its text.
	Text string
}

// Render renders a notification's text for email according to its parse
// mode:
//
//   - HTML (Telegram's subset): b, strong, i, em, u, ins, s, strike, del,
//     code, pre and blockquote are kept as such; a keeps its href when it
//     is http, https, mailto or tel (tg:// links lose it); span
//     class="tg-spoiler", tg-spoiler and tg-emoji keep only their content.
//     Any other tag — Telegram would refuse it — and any stray '<' or '&'
//     are shown as text. Attributes are dropped, and text is decoded and
//     escaped again, so nothing in the text can add markup or script to
//     the email whatever an application failed to escape.
//   - none: the text escaped.
//   - MarkdownV2: best effort — escapes and formatting characters removed,
//     [text](url) as "text (url)"; the HTML part is that text escaped.
//
// Newlines become <br> outside <pre>, as Telegram shows them.
func Render(text string, mode notify.ParseMode) Body {
	switch mode {
	case notify.ParseModeHTML:
		return renderHTML(text)
	case notify.ParseModeMarkdownV2:
		plain := stripMarkdownV2(text)
		return Body{HTML: escapeLines(plain), Text: plain}
	}
	return Body{HTML: escapeLines(text), Text: text}
}

// escapeLines escapes plain text for HTML, with <br> for newlines.
func escapeLines(s string) string {
	return strings.ReplaceAll(html.EscapeString(s), "\n", "<br>\n")
}

// emailTags maps Telegram's tags to the tag written into the email ("" to
// keep only the content).
var emailTags = map[string]string{
	"b": "b", "strong": "b",
	"i": "i", "em": "i",
	"u": "u", "ins": "u",
	"s": "s", "strike": "s", "del": "s",
	"code": "code", "pre": "pre", "blockquote": "blockquote",
	"a": "a", "span": "", "tg-spoiler": "", "tg-emoji": "",
}

// renderer accumulates both parts while walking Telegram HTML.
type renderer struct {
	html, text strings.Builder
	// open is the stack of elements opened in the input; each remembers
	// what was written for it.
	open []openTag
	pre  int // depth of <pre>
}

type openTag struct {
	name  string // Telegram's tag name
	wrote string // the email tag written, "" when none
	href  string // a link's address, written after its text in Text
	start int    // length of text when the link opened
}

func renderHTML(s string) Body {
	var r renderer
	for s != "" {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			r.addText(s)
			break
		}
		r.addText(s[:i])
		s = s[i:]
		tag, rest, ok := parseTag(s)
		if !ok || !r.addTag(tag) {
			// Not one of Telegram's tags: shown as written.
			end := len(s) - len(rest)
			if !ok {
				end = 1
			}
			r.addText(html.EscapeString(s[:end]))
			s = s[end:]
			continue
		}
		s = rest
	}
	for len(r.open) > 0 {
		r.close(len(r.open) - 1)
	}
	return Body{HTML: r.html.String(), Text: r.text.String()}
}

// addText adds text from the input, which Telegram HTML has with entities:
// decoded for Text, escaped again for HTML.
func (r *renderer) addText(s string) {
	if s == "" {
		return
	}
	plain := html.UnescapeString(s)
	r.text.WriteString(plain)
	if r.pre > 0 {
		r.html.WriteString(html.EscapeString(plain))
		return
	}
	r.html.WriteString(escapeLines(plain))
}

// tag is a parsed start or end tag.
type tag struct {
	name  string
	end   bool
	attrs map[string]string
}

// addTag applies a tag and reports whether it is one Telegram knows.
func (r *renderer) addTag(t tag) bool {
	out, known := emailTags[t.name]
	if !known {
		return false
	}
	if t.end {
		for i := len(r.open) - 1; i >= 0; i-- {
			if r.open[i].name == t.name {
				for len(r.open) > i {
					r.close(len(r.open) - 1)
				}
				return true
			}
		}
		return true // an end tag without its start: dropped
	}
	o := openTag{name: t.name, start: r.text.Len()}
	switch {
	case t.name == "span" && t.attrs["class"] != "tg-spoiler":
		return false
	case t.name == "a":
		if href, ok := safeHref(t.attrs["href"]); ok {
			o.href = href
			o.wrote = "a"
			r.html.WriteString(`<a href="` + html.EscapeString(href) + `">`)
		}
	case out != "":
		o.wrote = out
		r.html.WriteString("<" + out + ">")
	}
	if t.name == "pre" {
		r.pre++
	}
	r.open = append(r.open, o)
	return true
}

// close closes the i-th open element, the last one.
func (r *renderer) close(i int) {
	o := r.open[i]
	r.open = r.open[:i]
	if o.wrote != "" {
		r.html.WriteString("</" + o.wrote + ">")
	}
	if o.name == "pre" {
		r.pre--
	}
	if o.href != "" {
		label := r.text.String()[o.start:]
		if label != o.href && strings.TrimPrefix(o.href, "mailto:") != label && strings.TrimPrefix(o.href, "tel:") != label {
			r.text.WriteString(" (" + o.href + ")")
		}
	}
}

// safeHref returns a link's address if its scheme is one an email may
// carry: http, https, mailto, tel.
func safeHref(raw string) (string, bool) {
	href := strings.TrimSpace(html.UnescapeString(raw))
	u, err := url.Parse(href)
	if err != nil {
		return "", false
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
		return href, u.Host != ""
	case "mailto", "tel":
		return href, u.Opaque != ""
	}
	return "", false
}

// parseTag parses the tag at the start of s ('<' ...) and returns it with
// what follows. ok is false when s does not start with a well-formed tag.
func parseTag(s string) (t tag, rest string, ok bool) {
	i := 1
	if i < len(s) && s[i] == '/' {
		t.end = true
		i++
	}
	start := i
	for i < len(s) && (isNameByte(s[i])) {
		i++
	}
	if i == start {
		return tag{}, s, false
	}
	t.name = strings.ToLower(s[start:i])
	for {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) {
			return tag{}, s, false
		}
		switch s[i] {
		case '>':
			return t, s[i+1:], true
		case '/':
			if i+1 < len(s) && s[i+1] == '>' {
				return t, s[i+2:], true
			}
			return tag{}, s, false
		}
		if t.end {
			return tag{}, s, false
		}
		nameStart := i
		for i < len(s) && isNameByte(s[i]) {
			i++
		}
		if i == nameStart {
			return tag{}, s, false
		}
		name := strings.ToLower(s[nameStart:i])
		value := ""
		if i < len(s) && s[i] == '=' {
			i++
			if i >= len(s) {
				return tag{}, s, false
			}
			if q := s[i]; q == '"' || q == '\'' {
				end := strings.IndexByte(s[i+1:], q)
				if end < 0 {
					return tag{}, s, false
				}
				value = s[i+1 : i+1+end]
				i += end + 2
			} else {
				vs := i
				for i < len(s) && !isSpace(s[i]) && s[i] != '>' {
					i++
				}
				value = s[vs:i]
			}
		}
		if t.attrs == nil {
			t.attrs = map[string]string{}
		}
		t.attrs[name] = value
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// stripMarkdownV2 turns Telegram MarkdownV2 into plain text: an escaped
// character stands for itself, unescaped formatting characters (* _ ~ | `
// and a blockquote's >) are dropped, and [text](url) becomes "text (url)".
func stripMarkdownV2(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == '\\' && i+1 < len(rs):
			i++
			b.WriteRune(rs[i])
		case r == '*' || r == '_' || r == '~' || r == '|' || r == '`' || r == '>' || r == '[':
		case r == ']':
			if i+1 < len(rs) && rs[i+1] == '(' {
				end := i + 2
				for end < len(rs) && rs[end] != ')' {
					if rs[end] == '\\' {
						end++
					}
					end++
				}
				if end < len(rs) {
					u := strings.ReplaceAll(string(rs[i+2:end]), `\`, "")
					b.WriteString(" (" + u + ")")
					i = end
				}
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// firstLine returns the first non-blank line of text with its spaces
// collapsed, cut to max characters (with an ellipsis).
func firstLine(text string, max int) string {
	for line := range strings.SplitSeq(text, "\n") {
		line = strings.Join(strings.FieldsFunc(line, unicode.IsSpace), " ")
		if line == "" {
			continue
		}
		if r := []rune(line); len(r) > max {
			line = strings.TrimRightFunc(string(r[:max-1]), unicode.IsSpace) + "…"
		}
		return line
	}
	return ""
}
