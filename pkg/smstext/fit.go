package smstext

import (
	"html"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Markup is how a notification's text is marked up (Telegram's parse mode).
type Markup uint8

// Markups.
const (
	// MarkupNone is plain text.
	MarkupNone Markup = iota
	// MarkupHTML is Telegram's HTML: <b>, <i>, <a href="...">, entities.
	MarkupHTML
	// MarkupMarkdownV2 is Telegram's MarkdownV2: *bold*, [text](url),
	// backslash escapes.
	MarkupMarkdownV2
)

// DefaultMaxSegments is the segment budget of a notification sent by SMS:
// two, the 320 GSM-7 characters Twilio recommends not to exceed for
// deliverability (docs/CHANNELS.md (SMS)).
const DefaultMaxSegments = 2

// Fit turns a notification's text into the SMS that carries it: [Plain],
// then [Shorten] to at most maxSegments segments.
func Fit(text string, markup Markup, maxSegments int) string {
	body, links := Plain(text, markup)
	return Shorten(body, links, maxSegments)
}

// Plain returns the visible text of a notification, made fit for an SMS,
// and the links it carries:
//
//   - markup is removed: HTML tags and entities, or MarkdownV2's
//     formatting characters and escapes. A link's text stays in place; its
//     address (http and https only) is returned in links, as are addresses
//     written out in the text, in order of appearance, each once;
//   - typographic characters that have a GSM-7 look-alike (curly quotes,
//     guillemets, dashes, the ellipsis, the bullet, the multiplication sign,
//     unusual spaces) are replaced by it when that makes the whole text
//     GSM-7, as Twilio's Smart Encoding does, so that one "—" does not turn
//     a Latin text into UCS-2 and halve its room;
//   - whitespace is collapsed: runs of spaces and tabs become one space,
//     lines are trimmed, empty lines dropped.
func Plain(text string, markup Markup) (body string, links []string) {
	var hrefs []string
	switch markup {
	case MarkupHTML:
		text, hrefs = stripHTML(text)
	case MarkupMarkdownV2:
		text, hrefs = stripMarkdownV2(text)
	}
	body = collapseSpace(text)
	if r := lookalikes.Replace(body); r != body && IsGSM7(r) {
		body = collapseSpace(r)
	}
	return body, appendLinks(hrefs, body)
}

// Shorten returns body as an SMS of at most maxSegments segments (at least
// one), keeping a link when one fits:
//
//  1. body followed by each link it does not already contain, one a line,
//     when that fits;
//  2. otherwise the longest prefix of body that ends at a word boundary,
//     then an ellipsis, then the first link that fits with at least one
//     word before it (unless the prefix already contains it). Trailing
//     punctuation is dropped before the ellipsis, which is "..." in a GSM-7
//     text (the character "…" would make it UCS-2) and "…" in a UCS-2 one;
//  3. with no link that fits, the same without a link;
//  4. when not even the first word fits, the longest prefix that does,
//     cut between two characters (never inside an emoji sequence), and the
//     ellipsis.
func Shorten(body string, links []string, maxSegments int) string {
	maxSegments = max(maxSegments, 1)
	full := body
	for _, l := range links {
		if !strings.Contains(full, l) {
			full = joinLine(full, l)
		}
	}
	if Segments(full) <= maxSegments {
		return full
	}
	for _, l := range links {
		if s, ok := cutAtWord(body, l, maxSegments); ok {
			return s
		}
	}
	if s, ok := cutAtWord(body, "", maxSegments); ok {
		return s
	}
	return cutAtChar(body, maxSegments)
}

// Ellipses.
const (
	ellipsisGSM = "..."
	ellipsisUCS = "…"
)

// maxBytes is a bound on the bytes of a prefix that can fit in n segments:
// a UTF-8 character is at most 4 bytes and a segment holds at most 160
// characters.
func maxBytes(n int) int { return 4 * GSM7Single * n }

// cutAtWord finds the longest word-boundary prefix of body that fits in
// maxSegments with an ellipsis and link (which may be empty).
func cutAtWord(body, link string, maxSegments int) (string, bool) {
	limit := maxBytes(maxSegments)
	for end := len(body); end > 0; end = strings.LastIndexAny(body[:end], " \n") {
		if end > limit {
			continue
		}
		prefix := body[:end]
		if end < len(body) {
			prefix = trimCut(prefix)
		}
		if prefix == "" {
			break
		}
		if s := assemble(prefix, end < len(body), link); Segments(s) <= maxSegments {
			return s, true
		}
	}
	return "", false
}

// cutAtChar cuts body between two characters, for a first word longer than
// the whole budget.
func cutAtChar(body string, maxSegments int) string {
	limit := maxBytes(maxSegments)
	for end := len(body); end > 0; {
		_, size := utf8.DecodeLastRuneInString(body[:end])
		if prefix := trimCut(body[:end]); prefix != "" && end <= limit && charBoundary(body, end) {
			if s := assemble(prefix, end < len(body), ""); Segments(s) <= maxSegments {
				return s
			}
		}
		end -= size
	}
	return ""
}

// assemble joins a prefix, an ellipsis when it was cut, and a link it does
// not already contain.
func assemble(prefix string, cut bool, link string) string {
	if link != "" && strings.Contains(prefix, link) {
		link = ""
	}
	s := prefix
	if cut {
		if IsGSM7(prefix) && IsGSM7(link) {
			s += ellipsisGSM
		} else {
			s += ellipsisUCS
		}
	}
	if link != "" {
		s = joinLine(s, link)
	}
	return s
}

// trimCut drops the spaces and punctuation a cut leaves at the end.
func trimCut(s string) string {
	return strings.TrimRightFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || strings.ContainsRune(",;:-.–—(«\"'", r)
	})
}

// charBoundary reports whether body may be cut at byte offset i: not inside
// an emoji sequence (before a zero-width joiner, variation selector,
// combining mark or skin tone modifier, or after a joiner).
func charBoundary(body string, i int) bool {
	if i >= len(body) {
		return true
	}
	prev, _ := utf8.DecodeLastRuneInString(body[:i])
	next, _ := utf8.DecodeRuneInString(body[i:])
	joins := func(r rune) bool {
		return r == '\u200d' || r == '\ufe0e' || r == '\ufe0f' || (r >= 0x1f3fb && r <= 0x1f3ff) || unicode.Is(unicode.Mn, r)
	}
	return prev != '\u200d' && !joins(next)
}

func joinLine(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n" + b
}

// lookalikes maps typographic characters to their GSM-7 look-alikes.
var lookalikes = strings.NewReplacer(
	"‘", "'", "’", "'", "‚", "'", "′", "'", "‹", "'", "›", "'",
	"“", `"`, "”", `"`, "„", `"`, "″", `"`, "«", `"`, "»", `"`,
	"–", "-", "—", "-", "―", "-", "−", "-", "‐", "-", "‑", "-",
	"…", "...", "•", "-", "×", "x",
	"\u00a0", " ", "\u2002", " ", "\u2003", " ", "\u2009", " ", "\u202f", " ", "\u2007", " ",
	"\u200b", "", "\ufeff", "",
)

// collapseSpace trims every line, collapses runs of white space inside a
// line to one space, and drops empty lines.
func collapseSpace(s string) string {
	s = strings.ReplaceAll(s, "\r\n", "\n")
	s = strings.ReplaceAll(s, "\r", "\n")
	var b strings.Builder
	b.Grow(len(s))
	for line := range strings.SplitSeq(s, "\n") {
		words := strings.Fields(line)
		if len(words) == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		for i, w := range words {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(w)
		}
	}
	return b.String()
}

// appendLinks adds the http(s) addresses written out in body to hrefs, and
// removes duplicates.
func appendLinks(hrefs []string, body string) []string {
	var out []string
	seen := map[string]bool{}
	add := func(l string) {
		if l != "" && !seen[l] {
			seen[l] = true
			out = append(out, l)
		}
	}
	for _, h := range hrefs {
		add(h)
	}
	for _, w := range strings.Fields(body) {
		if i := strings.Index(w, "http://"); i >= 0 {
			w = w[i:]
		} else if i := strings.Index(w, "https://"); i >= 0 {
			w = w[i:]
		} else {
			continue
		}
		add(strings.TrimRight(w, ".,;:!?)»\"'"))
	}
	return out
}

// webLink reports whether an address is worth sending by SMS.
func webLink(href string) bool {
	return strings.HasPrefix(href, "https://") || strings.HasPrefix(href, "http://")
}

// stripHTML removes Telegram HTML markup: tags go, entities are decoded,
// the href of <a> elements is collected.
func stripHTML(s string) (string, []string) {
	var b strings.Builder
	var links []string
	for {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			b.WriteString(html.UnescapeString(s))
			break
		}
		b.WriteString(html.UnescapeString(s[:i]))
		j := strings.IndexByte(s[i:], '>')
		if j < 0 { // a lone '<': text, as Telegram would refuse it anyway
			b.WriteString(html.UnescapeString(s[i:]))
			break
		}
		if href, ok := anchorHref(s[i+1 : i+j]); ok && webLink(href) {
			links = append(links, href)
		}
		s = s[i+j+1:]
	}
	return b.String(), links
}

// anchorHref returns the href of an opening <a ...> tag's inside.
func anchorHref(tag string) (string, bool) {
	name, attrs, _ := strings.Cut(strings.TrimSpace(tag), " ")
	if !strings.EqualFold(name, "a") {
		return "", false
	}
	k := strings.Index(strings.ToLower(attrs), "href")
	if k < 0 {
		return "", false
	}
	rest := strings.TrimLeft(attrs[k+len("href"):], " ")
	rest, ok := strings.CutPrefix(rest, "=")
	if !ok {
		return "", false
	}
	rest = strings.TrimLeft(rest, " ")
	if rest == "" {
		return "", false
	}
	var v string
	if q := rest[0]; q == '"' || q == '\'' {
		end := strings.IndexByte(rest[1:], q)
		if end < 0 {
			return "", false
		}
		v = rest[1 : 1+end]
	} else {
		v, _, _ = strings.Cut(rest, " ")
	}
	return strings.TrimSpace(html.UnescapeString(v)), true
}

// stripMarkdownV2 removes MarkdownV2 markup: escapes are resolved,
// formatting characters dropped, [text](url) becomes text with url
// collected.
func stripMarkdownV2(s string) (string, []string) {
	var b strings.Builder
	var links []string
	lineStart := true
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			_, size := utf8.DecodeRuneInString(s[i+1:])
			b.WriteString(s[i+1 : i+1+size])
			i += 1 + size
		case c == '[':
			text, url, n, ok := markdownLink(s[i:])
			if !ok {
				b.WriteByte(c)
				i++
				break
			}
			inner, innerLinks := stripMarkdownV2(text)
			b.WriteString(inner)
			links = append(links, innerLinks...)
			if webLink(url) {
				links = append(links, url)
			}
			i += n
		case c == '*' || c == '_' || c == '~' || c == '|' || c == '`':
			i++
		case c == '>' && lineStart:
			i++
		default:
			_, size := utf8.DecodeRuneInString(s[i:])
			b.WriteString(s[i : i+size])
			i += size
		}
		lineStart = c == '\n'
	}
	return b.String(), links
}

// markdownLink parses [text](url) at the start of s and returns its length.
func markdownLink(s string) (text, url string, n int, ok bool) {
	end := unescapedIndex(s, 1, ']')
	if end < 0 || end+1 >= len(s) || s[end+1] != '(' {
		return "", "", 0, false
	}
	closing := unescapedIndex(s, end+2, ')')
	if closing < 0 {
		return "", "", 0, false
	}
	url = strings.NewReplacer(`\)`, ")", `\\`, `\`).Replace(s[end+2 : closing])
	return s[1:end], url, closing + 1, true
}

// unescapedIndex returns the index of the first c at or after from that no
// backslash escapes, or -1.
func unescapedIndex(s string, from int, c byte) int {
	for i := from; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case c:
			return i
		}
	}
	return -1
}
