package emulator_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// TestEntities checks the text checks of sendMessage: markup parsing with
// Telegram's error wording, the empty-text and length limits.
func TestEntities(t *testing.T) {
	t.Parallel()
	const cantParse = "Bad Request: can't parse entities: "
	tests := []struct {
		name      string
		parseMode string
		text      string
		wantErr   string // full description; "" means delivered
		wantText  string // plain text returned, when delivered
	}{
		// Plain text.
		{"plain", "", "hello <b> & world", "", "hello <b> & world"},
		{"empty", "", "", "Bad Request: message text is empty", ""},
		{"only white space", "", " \n\t ", "Bad Request: message text is empty", ""},
		{"surrounding space is trimmed", "", "  hi  ", "", "hi"},
		{"4096 characters", "", strings.Repeat("a", 4096), "", strings.Repeat("a", 4096)},
		{"4097 characters", "", strings.Repeat("a", 4097), "Bad Request: message is too long", ""},
		{"4096 Cyrillic characters", "", strings.Repeat("я", 4096), "", strings.Repeat("я", 4096)},
		{"2049 emoji are 4098 UTF-16 units", "", strings.Repeat("😀", 2049), "Bad Request: message is too long", ""},

		// HTML.
		{"html all tags", "HTML", `<b>b</b><strong>s</strong><i>i</i><em>e</em><u>u</u><ins>n</ins><s>s</s><strike>k</strike><del>d</del>` +
			`<span class="tg-spoiler">p</span><tg-spoiler>q</tg-spoiler><a href="https://t.me/x?a=1&amp;b=2">a</a><code>c</code>` +
			`<pre><code class="language-go">go</code></pre><blockquote expandable>bq</blockquote><tg-emoji emoji-id="5368324170671202286">👍</tg-emoji>`,
			"", "bsieunskdpqacgobq👍"},
		{"html entities", "HTML", "a &lt;b&gt; &amp; &quot;c&quot; &#65;&#x42; AT&T &copy; 5&", "", `a <b> & "c" AB AT&T &copy; 5&`},
		{"html tags are case-insensitive", "html", "<B>x</B>", "", "x"},
		{"html unquoted attribute", "HTML", "<a href=tg-link.x>x</a>", "", "x"},
		{"html markup only", "HTML", "<b> </b>", "Bad Request: message text is empty", ""},
		{"html length after parsing", "HTML", "<b>" + strings.Repeat("a", 4096) + "</b>", "", strings.Repeat("a", 4096)},
		{"html unsupported tag", "HTML", "hello <foo>x</foo>", cantParse + `Unsupported start tag "foo" at byte offset 6`, ""},
		{"html bare less-than", "HTML", "1 < 2", cantParse + `Unsupported start tag "" at byte offset 2`, ""},
		{"html unclosed start tag", "HTML", "x <b", cantParse + "Unclosed start tag at byte offset 2", ""},
		{"html unclosed tag", "HTML", "<b>bold", cantParse + `Can't find end tag corresponding to start tag "b"`, ""},
		{"html misnested tags", "HTML", "<b><i>x</b></i>", cantParse + `Unmatched end tag at byte offset 7, expected "</i>", found "</b>"`, ""},
		{"html unexpected end tag", "HTML", "x</b>", cantParse + "Unexpected end tag at byte offset 1", ""},
		{"html unclosed end tag", "HTML", "<b>x</b", cantParse + "Unclosed end tag at byte offset 4", ""},
		{"html span without spoiler class", "HTML", `<span class="x">y</span>`, cantParse + `Tag "span" must have class "tg-spoiler" at byte offset 0`, ""},
		{"html attribute without value", "HTML", "<a href>x</a>", cantParse + `Expected equal sign in declaration of an attribute of the tag "a" at byte offset 0`, ""},
		{"html bad name token", "HTML", "<a href=x/y>z</a>", cantParse + "Unexpected end of name token at byte offset 8", ""},
		{"html bad custom emoji", "HTML", `<tg-emoji emoji-id="x">👍</tg-emoji>`, cantParse + "Invalid custom emoji identifier specified", ""},

		// MarkdownV2.
		{"mdv2 entities", "MarkdownV2", "*b* _i_ __u__ ~s~ ||p|| `c` [l](https://t.me/x) ```go\nfmt```", "", "b i u s p c l fmt"},
		{"mdv2 escapes", "MarkdownV2", `Total: 5\.00 \- \(net\)\!`, "", "Total: 5.00 - (net)!"},
		{"mdv2 code keeps reserved characters", "MarkdownV2", "`a.b-c!`", "", "a.b-c!"},
		{"mdv2 block quote", "MarkdownV2", ">quoted\n>more", "", "quoted\nmore"},
		{"mdv2 unescaped dot", "MarkdownV2", "Total: 5.00", cantParse + `Character '.' is reserved and must be escaped with the preceding '\'`, ""},
		{"mdv2 unescaped dash", "MarkdownV2", "a - b", cantParse + `Character '-' is reserved and must be escaped with the preceding '\'`, ""},
		{"mdv2 unescaped paren", "MarkdownV2", "(x)", cantParse + `Character '(' is reserved and must be escaped with the preceding '\'`, ""},
		{"mdv2 unclosed bold", "MarkdownV2", "*bold", cantParse + "Can't find end of Bold entity at byte offset 0", ""},
		{"mdv2 unclosed italic", "MarkdownV2", "hi _there", cantParse + "Can't find end of Italic entity at byte offset 3", ""},
		{"mdv2 unclosed pre", "MarkdownV2", "```\ncode", cantParse + "Can't find end of Pre entity at byte offset 0", ""},
		{"mdv2 unclosed URL", "MarkdownV2", "[a](https://x", cantParse + "Can't find end of a URL at byte offset 4", ""},
		{"mdv2 single pipe", "MarkdownV2", "a|b", cantParse + `Character '|' is reserved and must be escaped with the preceding '\'`, ""},

		// Legacy Markdown.
		{"markdown entities", "Markdown", "*b* _i_ `c` [l](https://t.me/x) ```pre```", "", "b i c l pre"},
		{"markdown unclosed", "Markdown", "a *b", cantParse + "Can't find end of the entity starting at byte offset 2", ""},

		{"unknown parse mode", "BBCode", "[b]x[/b]", "Bad Request: unsupported parse_mode", ""},
	}
	e := setup(t, emulator.Config{})
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := e.call("sendMessage", map[string]any{"chat_id": 1000 + i, "text": tt.text, "parse_mode": tt.parseMode})
			if tt.wantErr != "" {
				if a.OK || a.status != 400 || a.Description != tt.wantErr {
					t.Fatalf("got %d %q, want 400 %q", a.status, a.Description, tt.wantErr)
				}
				return
			}
			if !a.OK {
				t.Fatalf("got %d %q, want delivered", a.status, a.Description)
			}
			var m struct {
				Text string `json:"text"`
			}
			if err := json.Unmarshal(a.Result, &m); err != nil {
				t.Fatal(err)
			}
			if m.Text != tt.wantText {
				t.Errorf("text = %q, want %q", m.Text, tt.wantText)
			}
		})
	}
}
