package max_test

import (
	"testing"

	maxchannel "github.com/tgnotify/tgnotify/pkg/channel/max"
	"github.com/tgnotify/tgnotify/pkg/maxapi"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

func TestTextPlain(t *testing.T) {
	t.Parallel()
	in := "Order <A1> *accepted* & paid"
	if got, f := maxchannel.Text(in, notify.ParseModeNone); got != in || f != maxapi.FormatPlain {
		t.Errorf("Text(%q, none) = %q, %q; want it unchanged, no format", in, got, f)
	}
}

func TestTextHTML(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, in, want string }{
		{"supported tags", "<b>B</b><strong>S</strong><i>I</i><em>E</em><u>U</u><ins>N</ins><s>X</s><del>D</del>",
			"<b>B</b><strong>S</strong><i>I</i><em>E</em><u>U</u><ins>N</ins><s>X</s><del>D</del>"},
		{"strike becomes s", "<strike>old</strike> price", "<s>old</s> price"},
		{"entities kept", "Tom &amp; Jerry &lt;3 &quot;x&quot; &#128512;", "Tom &amp; Jerry &lt;3 &quot;x&quot; &#128512;"},
		{"link", `<a href="https://shop.example/o/A1?x=1&amp;y=2">track</a>`, `<a href="https://shop.example/o/A1?x=1&amp;y=2">track</a>`},
		{"link with single quotes", `<a href='http://e.example/'>e</a>`, `<a href="http://e.example/">e</a>`},
		{"mailto link", `<a href="mailto:help@shop.example">write</a>`, `<a href="mailto:help@shop.example">write</a>`},
		{"telegram user link loses the link", `<a href="tg://user?id=42">Ann</a>, hi`, "Ann, hi"},
		{"link without href", `<a>x</a>`, "x"},
		{"nested links", `<a href="https://a.example">A <a href="tg://x">B</a> C</a>`, `<a href="https://a.example">A B C</a>`},
		{"pre with language", `<pre><code class="language-go">x := 1 &lt; 2</code></pre>`, "<pre><code>x := 1 &lt; 2</code></pre>"},
		{"expandable quote", "<blockquote expandable>long</blockquote>", "<blockquote>long</blockquote>"},
		{"spoiler tag", "code <tg-spoiler>1234</tg-spoiler>", "code 1234"},
		{"spoiler span", `code <span class="tg-spoiler">1234</span>`, "code 1234"},
		{"custom emoji", `<tg-emoji emoji-id="5368324170671202286">👍</tg-emoji> ok`, "👍 ok"},
		{"unknown tag", "<h2>Title</h2><br/>text", "Titletext"},
		{"upper case", "<B>bold</B>", "<b>bold</b>"},
		{"stray brackets", "1 < 2 > 0 <", "1 &lt; 2 &gt; 0 &lt;"},
		{"quoted >", `<a href="https://e.example/?q=a>b">x</a>`, `<a href="https://e.example/?q=a&gt;b">x</a>`},
		{"not a tag", "a <3 b", "a &lt;3 b"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, f := maxchannel.Text(tt.in, notify.ParseModeHTML)
			if got != tt.want || f != maxapi.FormatHTML {
				t.Errorf("Text(%q, HTML) = %q, %q; want %q, html", tt.in, got, f, tt.want)
			}
		})
	}
}

func TestTextMarkdownV2(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, in, want string }{
		{"plain with escapes", `Order A1 accepted\! Total: 10\.50 \(RUB\)`, "Order A1 accepted! Total: 10.50 (RUB)"},
		{"bold italic underline strike", `*b* _i_ __u__ ~s~`, "<b>b</b> <i>i</i> <u>u</u> <s>s</s>"},
		{"nested", `*bold _both_*`, "<b>bold <i>both</i></b>"},
		{"crossing", `*a _b* c_`, "<b>a <i>b</i></b><i> c</i>"},
		{"spoiler", `code ||1234||`, "code 1234"},
		{"code", "`a < b` \\`", "<code>a &lt; b</code> `"},
		{"pre with language", "```go\nx := `y`\n```", "<pre>x := `y`\n</pre>"},
		{"pre without language", "```\nline 1\nline 2```", "<pre>line 1\nline 2</pre>"},
		{"link", `[track *it*](https://shop.example/o/A1\))`, `<a href="https://shop.example/o/A1)">track <b>it</b></a>`},
		{"telegram link", `[Ann](tg://user?id=42)`, "Ann"},
		{"custom emoji", `![👍](tg://emoji?id=5368324170671202286) ok`, "👍 ok"},
		{"not a link", `[x] y`, "[x] y"},
		{"html characters", `a < b & c > d`, "a &lt; b &amp; c &gt; d"},
		{"quote", "Note:\n>line 1\n>line 2\nafter", "Note:\n<blockquote>line 1\nline 2</blockquote>\nafter"},
		{"expandable quote", "**>hidden\n>more||", "<blockquote>hidden\nmore</blockquote>"},
		{"unclosed", `*bold`, "<b>bold</b>"},
		{"bold does not cross a quote", "*a\n>b*", "<b>a\n</b><blockquote>b<b></b></blockquote>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, f := maxchannel.Text(tt.in, notify.ParseModeMarkdownV2)
			if got != tt.want || f != maxapi.FormatHTML {
				t.Errorf("Text(%q, MarkdownV2) = %q, %q; want %q, html", tt.in, got, f, tt.want)
			}
		})
	}
}
