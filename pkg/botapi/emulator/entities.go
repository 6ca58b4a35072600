package emulator

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxMessageLength is Telegram's limit on a message text, in UTF-16 code
// units after entity parsing.
const MaxMessageLength = 4096

// checkText validates a sendMessage text the way the Bot API does and
// returns the plain text (markup removed, surrounding white space trimmed)
// or the description of a 400 error.
func checkText(text, parseMode string) (string, string) {
	if !utf8.ValidString(text) {
		return "", "Bad Request: text must be encoded in UTF-8"
	}
	plain, err := parseEntities(text, parseMode)
	if err != nil {
		return "", "Bad Request: " + err.Error()
	}
	plain = strings.TrimFunc(plain, unicode.IsSpace)
	if plain == "" {
		return "", "Bad Request: message text is empty"
	}
	if utf16Len(plain) > MaxMessageLength {
		return "", "Bad Request: message is too long"
	}
	return plain, ""
}

// checkCaption validates a sendPhoto caption the way the Bot API does and
// returns the plain caption or the description of a 400 error. Unlike a
// text, a caption may be empty.
func checkCaption(caption, parseMode string) (string, string) {
	if !utf8.ValidString(caption) {
		return "", "Bad Request: caption must be encoded in UTF-8"
	}
	plain, err := parseEntities(caption, parseMode)
	if err != nil {
		return "", "Bad Request: " + err.Error()
	}
	plain = strings.TrimFunc(plain, unicode.IsSpace)
	if utf16Len(plain) > MaxCaptionLength {
		return "", "Bad Request: message caption is too long"
	}
	return plain, ""
}

// entityError is a parse failure; its message follows Telegram's wording.
type entityError struct{ detail string }

func (e *entityError) Error() string { return "can't parse entities: " + e.detail }

func entityErrorf(format string, args ...any) error {
	return &entityError{detail: fmt.Sprintf(format, args...)}
}

// parseEntities removes the markup of a parse mode and returns the plain
// text, or an error whose message is what Telegram says after "Bad Request: ".
func parseEntities(text, parseMode string) (string, error) {
	switch strings.ToLower(parseMode) {
	case "":
		return text, nil
	case "html":
		return parseHTML(text)
	case "markdownv2":
		return parseMarkdownV2(text)
	case "markdown":
		return parseMarkdown(text)
	}
	return "", fmt.Errorf("unsupported parse_mode")
}

// utf16Len counts UTF-16 code units, Telegram's unit for lengths.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		if r >= 0x10000 {
			n += 2
		} else {
			n++
		}
	}
	return n
}

// at returns s[i], or 0 past the end (the parsers below follow Telegram's,
// which read a NUL-terminated string).
func at(s string, i int) byte {
	if i >= 0 && i < len(s) {
		return s[i]
	}
	return 0
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v'
}

func isAlnum(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// htmlTags are the tags Telegram's HTML parse mode accepts.
func isHTMLTag(tag string) bool {
	switch tag {
	case "a", "b", "strong", "i", "em", "s", "strike", "del", "u", "ins",
		"tg-spoiler", "tg-emoji", "span", "pre", "code", "blockquote":
		return true
	}
	return false
}

// parseHTML follows Telegram's HTML parser: supported tags only, attributes
// as name=value, start and end tags matched, the entities &lt; &gt; &amp;
// &quot; and numeric references decoded. Like Telegram, a '&' that does not
// start a known entity is kept as a literal character; a '<' that does not
// start a valid tag is an error.
func parseHTML(text string) (string, error) {
	type openTag struct {
		name string
		arg  string
		pos  int
	}
	var (
		out   strings.Builder
		stack []openTag
		n     = len(text)
	)
	for i := 0; i < n; i++ {
		c := text[i]
		if c == '&' {
			if r, next, ok := decodeHTMLEntity(text, i); ok {
				out.WriteRune(r)
				i = next - 1
				continue
			}
		}
		if c != '<' {
			out.WriteByte(c)
			continue
		}
		begin := i
		i++
		if at(text, i) != '/' {
			// A start tag.
			for i < n && !isSpace(text[i]) && text[i] != '>' {
				i++
			}
			if i >= n {
				return "", entityErrorf("Unclosed start tag at byte offset %d", begin)
			}
			name := strings.ToLower(text[begin+1 : i])
			if !isHTMLTag(name) {
				return "", entityErrorf("Unsupported start tag \"%s\" at byte offset %d", name, begin)
			}
			var arg string
			for at(text, i) != '>' {
				for i < n && isSpace(text[i]) {
					i++
				}
				if i >= n {
					return "", entityErrorf("Unclosed start tag at byte offset %d", begin)
				}
				if text[i] == '>' {
					break
				}
				attrBegin := i
				for i < n && !isSpace(text[i]) && text[i] != '=' && text[i] != '>' {
					i++
				}
				attr := text[attrBegin:i]
				if attr == "" {
					return "", entityErrorf("Empty attribute name in the tag \"%s\" at byte offset %d", name, begin)
				}
				for i < n && isSpace(text[i]) {
					i++
				}
				if at(text, i) != '=' {
					// The one attribute without a value.
					if name == "blockquote" && attr == "expandable" {
						continue
					}
					return "", entityErrorf("Expected equal sign in declaration of an attribute of the tag \"%s\" at byte offset %d", name, begin)
				}
				i++
				for i < n && isSpace(text[i]) {
					i++
				}
				if i >= n {
					return "", entityErrorf("Unclosed start tag \"%s\" at byte offset %d", name, begin)
				}
				var value string
				if q := text[i]; q != '\'' && q != '"' {
					// A name token: letters, digits, periods and hyphens.
					tokenBegin := i
					for i < n && (isAlnum(text[i]) || text[i] == '.' || text[i] == '-') {
						i++
					}
					value = strings.ToLower(text[tokenBegin:i])
					if i < n && !isSpace(text[i]) && text[i] != '>' {
						return "", entityErrorf("Unexpected end of name token at byte offset %d", tokenBegin)
					}
				} else {
					// A quoted string.
					var v strings.Builder
					i++
					for i < n && text[i] != q {
						if text[i] == '&' {
							if r, next, ok := decodeHTMLEntity(text, i); ok {
								v.WriteRune(r)
								i = next
								continue
							}
						}
						v.WriteByte(text[i])
						i++
					}
					if i < n {
						i++
					}
					value = v.String()
				}
				if i >= n {
					return "", entityErrorf("Unclosed start tag at byte offset %d", begin)
				}
				switch {
				case name == "a" && attr == "href":
					arg = value
				case name == "code" && attr == "class" && strings.HasPrefix(value, "language-"):
					arg = value[len("language-"):]
				case name == "span" && attr == "class" && strings.HasPrefix(value, "tg-"):
					arg = value[len("tg-"):]
				case name == "tg-emoji" && attr == "emoji-id":
					arg = value
				}
			}
			if name == "span" && arg != "spoiler" {
				return "", entityErrorf("Tag \"span\" must have class \"tg-spoiler\" at byte offset %d", begin)
			}
			stack = append(stack, openTag{name: name, arg: arg, pos: begin})
			continue
		}
		// An end tag.
		if len(stack) == 0 {
			return "", entityErrorf("Unexpected end tag at byte offset %d", begin)
		}
		for i < n && !isSpace(text[i]) && text[i] != '>' {
			i++
		}
		endName := strings.ToLower(text[begin+2 : i])
		for i < n && isSpace(text[i]) {
			i++
		}
		if at(text, i) != '>' {
			return "", entityErrorf("Unclosed end tag at byte offset %d", begin)
		}
		top := stack[len(stack)-1]
		if endName != "" && endName != top.name {
			return "", entityErrorf("Unmatched end tag at byte offset %d, expected \"</%s>\", found \"</%s>\"", begin, top.name, endName)
		}
		if top.name == "tg-emoji" {
			if id, err := strconv.ParseInt(top.arg, 10, 64); err != nil || id <= 0 {
				return "", entityErrorf("Invalid custom emoji identifier specified")
			}
		}
		stack = stack[:len(stack)-1]
	}
	if len(stack) > 0 {
		return "", entityErrorf("Can't find end tag corresponding to start tag \"%s\"", stack[len(stack)-1].name)
	}
	return out.String(), nil
}

// decodeHTMLEntity decodes the character reference at text[pos] ('&'):
// &lt; &gt; &amp; &quot;, &#NNN; and &#xHHH; (the ';' is optional, as in
// Telegram). It returns the character, the index after the reference and
// whether text[pos] starts one.
func decodeHTMLEntity(text string, pos int) (rune, int, bool) {
	end := pos + 1
	var r rune
	if at(text, end) == '#' {
		end++
		if at(text, end) == 'x' {
			end++
			for {
				c := at(text, end)
				var d rune
				switch {
				case c >= '0' && c <= '9':
					d = rune(c - '0')
				case c >= 'a' && c <= 'f':
					d = rune(c-'a') + 10
				case c >= 'A' && c <= 'F':
					d = rune(c-'A') + 10
				default:
					d = -1
				}
				if d < 0 {
					break
				}
				r = r*16 + d
				end++
				if r >= 0x10ffff {
					return 0, 0, false
				}
			}
		} else {
			for c := at(text, end); c >= '0' && c <= '9'; c = at(text, end) {
				r = r*10 + rune(c-'0')
				end++
				if r >= 0x10ffff {
					return 0, 0, false
				}
			}
		}
		if r == 0 || end-pos >= 10 {
			return 0, 0, false
		}
	} else {
		for c := at(text, end); c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'; c = at(text, end) {
			end++
		}
		switch text[pos+1 : end] {
		case "lt":
			r = '<'
		case "gt":
			r = '>'
		case "amp":
			r = '&'
		case "quot":
			r = '"'
		default:
			return 0, 0, false
		}
	}
	if at(text, end) == ';' {
		end++
	}
	return r, end, true
}

// mdEntity is an open MarkdownV2 entity.
type mdEntity struct {
	typ string // Telegram's type name, used in error messages
	pos int    // byte offset of its opening marker
}

// parseMarkdownV2 follows Telegram's MarkdownV2 parser: the characters
// _ * [ ] ( ) ~ ` > # + - = | { } . ! are reserved outside code and must be
// escaped with '\'; inside code and pre only ` and \ are.
func parseMarkdownV2(text string) (string, error) {
	var (
		out   strings.Builder
		stack []mdEntity
		n     = len(text)
	)
	reservedErr := func(c byte) error {
		return entityErrorf("Character '%c' is reserved and must be escaped with the preceding '\\'", c)
	}
	for i := 0; i < n; i++ {
		c := text[i]
		if next := at(text, i+1); c == '\\' && next > 0 && next <= 126 {
			i++
			out.WriteByte(text[i])
			continue
		}
		reserved := "_*[]()~`>#+-=|{}.!"
		inCode := false
		if len(stack) > 0 {
			switch stack[len(stack)-1].typ {
			case "Code", "Pre", "PreCode":
				reserved, inCode = "`", true
			}
		}
		if !strings.ContainsRune(reserved, rune(c)) {
			out.WriteByte(c)
			continue
		}
		// '>' at the start of a line begins a block quote line.
		if c == '>' && !inCode && (i == 0 || text[i-1] == '\n') {
			continue
		}
		end := false
		if len(stack) > 0 {
			switch stack[len(stack)-1].typ {
			case "Bold":
				end = c == '*'
			case "Italic":
				end = c == '_' && at(text, i+1) != '_'
			case "Underline":
				end = c == '_' && at(text, i+1) == '_'
			case "Strikethrough":
				end = c == '~'
			case "Spoiler":
				end = c == '|' && at(text, i+1) == '|'
			case "Code":
				end = c == '`'
			case "Pre", "PreCode":
				end = c == '`' && at(text, i+1) == '`' && at(text, i+2) == '`'
			case "TextUrl", "CustomEmoji":
				end = c == ']'
			}
		}
		if !end {
			begin := i
			var typ string
			switch c {
			case '_':
				if at(text, i+1) == '_' {
					typ = "Underline"
					i++
				} else {
					typ = "Italic"
				}
			case '*':
				typ = "Bold"
			case '~':
				typ = "Strikethrough"
			case '|':
				if at(text, i+1) != '|' {
					return "", reservedErr(c)
				}
				typ = "Spoiler"
				i++
			case '[':
				typ = "TextUrl"
			case '`':
				if at(text, i+1) == '`' && at(text, i+2) == '`' {
					typ = "Pre"
					i += 3
					langEnd := i
					for langEnd < n && !isSpace(text[langEnd]) && text[langEnd] != '`' {
						langEnd++
					}
					if i != langEnd && langEnd < n && text[langEnd] != '`' {
						typ = "PreCode"
						i = langEnd
					}
					// One new line after the opening marker is skipped.
					if c := at(text, i); c == '\n' || c == '\r' {
						if d := at(text, i+1); (d == '\n' || d == '\r') && c != d {
							i += 2
						} else {
							i++
						}
					}
					i--
				} else {
					typ = "Code"
				}
			case '!':
				if at(text, i+1) != '[' {
					return "", reservedErr(c)
				}
				typ = "CustomEmoji"
				i++
			default:
				return "", reservedErr(c)
			}
			stack = append(stack, mdEntity{typ: typ, pos: begin})
			continue
		}
		// The end of the innermost entity.
		top := stack[len(stack)-1]
		switch top.typ {
		case "Underline", "Spoiler":
			i++
		case "Pre", "PreCode":
			i += 2
		case "TextUrl", "CustomEmoji":
			if at(text, i+1) != '(' {
				if top.typ == "CustomEmoji" {
					return "", entityErrorf("Custom emoji entity must contain a tg://emoji URL")
				}
				break
			}
			i += 2
			urlBegin := i
			var url strings.Builder
			for i < n && text[i] != ')' {
				if next := at(text, i+1); text[i] == '\\' && next > 0 && next <= 126 {
					url.WriteByte(next)
					i += 2
					continue
				}
				url.WriteByte(text[i])
				i++
			}
			if at(text, i) != ')' {
				return "", entityErrorf("Can't find end of a URL at byte offset %d", urlBegin)
			}
			if top.typ == "CustomEmoji" {
				id, ok := strings.CutPrefix(url.String(), "tg://emoji?id=")
				if v, err := strconv.ParseInt(id, 10, 64); !ok || err != nil || v <= 0 {
					return "", entityErrorf("Invalid custom emoji identifier specified")
				}
			}
		}
		stack = stack[:len(stack)-1]
	}
	if len(stack) > 0 {
		top := stack[len(stack)-1]
		return "", entityErrorf("Can't find end of %s entity at byte offset %d", top.typ, top.pos)
	}
	return out.String(), nil
}

// parseMarkdown follows Telegram's legacy Markdown parser: *bold*, _italic_,
// `code`, ```pre```, [text](url); entities do not nest, and an entity that
// is not closed is an error.
func parseMarkdown(text string) (string, error) {
	var out strings.Builder
	n := len(text)
	for i := 0; i < n; i++ {
		c := text[i]
		if next := at(text, i+1); c == '\\' && (next == '_' || next == '*' || next == '`' || next == '[') {
			i++
			out.WriteByte(next)
			continue
		}
		if c != '_' && c != '*' && c != '`' && c != '[' {
			out.WriteByte(c)
			continue
		}
		begin := i
		endChar := c
		if c == '[' {
			endChar = ']'
		}
		i++
		pre := false
		if c == '`' && at(text, i) == '`' && at(text, i+1) == '`' {
			pre = true
			i += 2
			langEnd := i
			for langEnd < n && !isSpace(text[langEnd]) && text[langEnd] != '`' {
				langEnd++
			}
			if i != langEnd && langEnd < n && text[langEnd] != '`' {
				i = langEnd
			}
			if c := at(text, i); c == '\n' || c == '\r' {
				if d := at(text, i+1); (d == '\n' || d == '\r') && c != d {
					i += 2
				} else {
					i++
				}
			}
		}
		for i < n && (text[i] != endChar || (pre && !(at(text, i+1) == '`' && at(text, i+2) == '`'))) {
			out.WriteByte(text[i])
			i++
		}
		if i >= n {
			return "", entityErrorf("Can't find end of the entity starting at byte offset %d", begin)
		}
		if c == '[' && at(text, i+1) == '(' {
			j := i + 2
			for j < n && text[j] != ')' {
				j++
			}
			if j < n {
				i = j
			}
		}
		if pre {
			i += 2
		}
	}
	return out.String(), nil
}
