package email_test

import (
	"strings"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/notify"
)

func TestRenderTelegramHTML(t *testing.T) {
	tests := []struct {
		name, in, html, text string
	}{
		{"formatting", "<b>Order A1</b> is <i>accepted</i>", "<b>Order A1</b> is <i>accepted</i>", "Order A1 is accepted"},
		{"synonyms", "<strong>a</strong><em>b</em><ins>c</ins><del>d</del><strike>e</strike>", "<b>a</b><i>b</i><u>c</u><s>d</s><s>e</s>", "abcde"},
		{"entities", "Tom &amp; Jerry &lt;3 &quot;x&quot; &#128512;", "Tom &amp; Jerry &lt;3 &#34;x&#34; 😀", `Tom & Jerry <3 "x" 😀`},
		{"newlines", "line 1\nline 2", "line 1<br>\nline 2", "line 1\nline 2"},
		{"pre keeps newlines", "<pre><code class=\"language-go\">a\nb</code></pre>", "<pre><code>a\nb</code></pre>", "a\nb"},
		{"link", `<a href="https://shop.example/o/A1">track</a>`, `<a href="https://shop.example/o/A1">track</a>`, "track (https://shop.example/o/A1)"},
		{"link that is its text", `<a href="https://shop.example/">https://shop.example/</a>`, `<a href="https://shop.example/">https://shop.example/</a>`, "https://shop.example/"},
		{"tg link loses its href", `<a href="tg://user?id=1">Ann</a>`, "Ann", "Ann"},
		{"javascript link loses its href", `<a href="javascript:alert(1)">x</a>`, "x", "x"},
		{"spoiler and emoji", `<span class="tg-spoiler">s</span><tg-spoiler>t</tg-spoiler><tg-emoji emoji-id="1">👍</tg-emoji>`, "st👍", "st👍"},
		{"attributes dropped", `<b onclick="alert(1)">x</b>`, "<b>x</b>", "x"},
		{"unknown tag shown as text", `<script>alert(1)</script>`, "&lt;script&gt;alert(1)&lt;/script&gt;", "<script>alert(1)</script>"},
		{"img shown as text", `<img src=x onerror=alert(1)>`, "&lt;img src=x onerror=alert(1)&gt;", "<img src=x onerror=alert(1)>"},
		{"span without spoiler class", `<span style="x">a</span>`, "&lt;span style=&#34;x&#34;&gt;a", `<span style="x">a`},
		{"stray angle bracket", "a < b", "a &lt; b", "a < b"},
		{"unclosed tags are closed", "<b><i>x", "<b><i>x</i></b>", "x"},
		{"misnested end tag closes inner ones", "<b><i>x</b>y</i>", "<b><i>x</i></b>y", "xy"},
		{"blockquote", "<blockquote expandable>q</blockquote>", "<blockquote>q</blockquote>", "q"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := email.Render(tt.in, notify.ParseModeHTML)
			if b.HTML != tt.html {
				t.Errorf("HTML: got %q, want %q", b.HTML, tt.html)
			}
			if b.Text != tt.text {
				t.Errorf("Text: got %q, want %q", b.Text, tt.text)
			}
		})
	}
}

func TestRenderEscapesCustomerData(t *testing.T) {
	name := `<img src=x onerror=alert(1)> & "Bob" <script>steal()</script>`
	b := email.Render("<b>Hello, "+notify.EscapeHTML(name)+"</b>", notify.ParseModeHTML)
	for _, bad := range []string{"<img", "<script", "onerror=alert(1)>"} {
		if strings.Contains(b.HTML, bad) {
			t.Errorf("HTML %q contains %q", b.HTML, bad)
		}
	}
	if !strings.Contains(b.Text, name) {
		t.Errorf("Text %q does not show the name %q as written", b.Text, name)
	}
}

func TestRenderPlainAndMarkdown(t *testing.T) {
	b := email.Render("Ann <ann@x> & co\nbye", notify.ParseModeNone)
	if want := "Ann &lt;ann@x&gt; &amp; co<br>\nbye"; b.HTML != want {
		t.Errorf("plain HTML: got %q, want %q", b.HTML, want)
	}
	if b.Text != "Ann <ann@x> & co\nbye" {
		t.Errorf("plain Text: got %q", b.Text)
	}
	b = email.Render(`*Order A1* is _accepted_\. [Track](https://s.example/a\)1)`, notify.ParseModeMarkdownV2)
	if want := "Order A1 is accepted. Track (https://s.example/a)1)"; b.Text != want {
		t.Errorf("MarkdownV2 Text: got %q, want %q", b.Text, want)
	}
}

func TestMessageID(t *testing.T) {
	id := email.MessageID("order:A1:accepted", "shop.example")
	if !strings.HasPrefix(id, "order.A1.accepted.") || !strings.HasSuffix(id, "@shop.example") {
		t.Errorf("got %q, want order.A1.accepted.<hash>@shop.example", id)
	}
	if again := email.MessageID("order:A1:accepted", "shop.example"); again != id {
		t.Errorf("got %q then %q, want the same id for the same key", id, again)
	}
	if other := email.MessageID("order.A1.accepted", "shop.example"); other == id {
		t.Errorf("keys that differ in replaced characters share id %q", id)
	}
	odd := email.MessageID(`<a>"b"@c\d`+strings.Repeat("x", 300), "shop.example")
	left, _, _ := strings.Cut(odd, "@")
	if len(left) > 64+1+16 || strings.ContainsAny(left, `<>"\@ `) || strings.HasPrefix(left, ".") || strings.Contains(left, "..") {
		t.Errorf("got %q, want a short dot-atom left part", odd)
	}
}

func TestSubject(t *testing.T) {
	n := notify.Notification{Text: "\n  <b>Order  A1</b> accepted\nsecond line", ParseMode: notify.ParseModeHTML}
	if got := email.Subject(n, email.Render(n.Text, n.ParseMode)); got != "Order A1 accepted" {
		t.Errorf("got %q, want the first line without markup", got)
	}
	n.Subject = "Your order"
	if got := email.Subject(n, email.Render(n.Text, n.ParseMode)); got != "Your order" {
		t.Errorf("got %q, want the notification's subject", got)
	}
	long := notify.Notification{Text: strings.Repeat("word ", 50)}
	got := email.Subject(long, email.Render(long.Text, long.ParseMode))
	if r := []rune(got); len(r) > 100 || !strings.HasSuffix(got, "…") {
		t.Errorf("got %q (%d characters), want at most 100 ending in an ellipsis", got, len(r))
	}
}

// A notification's email body is used as written; its photo comes first,
// as an image linking to itself, and its http(s) buttons last, as links.
func TestComposeRich(t *testing.T) {
	n := notify.Notification{Key: "order:A1:shipped", Email: "ann@example.com", ParseMode: notify.ParseModeHTML,
		Text:   "<b>Telegram's text</b>",
		Bodies: notify.Bodies{Email: &notify.EmailBody{HTML: "<h1>Order A1 shipped</h1>\n<p>Hello, Ann &amp; Bob</p>", Text: "Order A1 shipped\nHello, Ann & Bob"}},
		Photo:  "https://cdn.shop.example/A1.jpg?w=600&h=400",
		Buttons: [][]notify.Button{
			{{Text: "Track <it>", URL: "https://shop.example/A1?from=mail&x=1"}, {Text: "Bot", URL: "tg://resolve?domain=shop_bot"}},
			{{Text: "Help", URL: "http://shop.example/help"}},
		}}
	subject, b := email.Compose(n)
	if subject != "Order A1 shipped" {
		t.Errorf("subject %q, want the email body's first line", subject)
	}
	wantHTML := `<p><a href="https://cdn.shop.example/A1.jpg?w=600&amp;h=400"><img src="https://cdn.shop.example/A1.jpg?w=600&amp;h=400" alt="" style="max-width: 100%; height: auto"></a></p>` + "\n" +
		"<h1>Order A1 shipped</h1>\n<p>Hello, Ann &amp; Bob</p>\n" + `<p style="margin-top: 1.5em">` +
		`<a href="https://shop.example/A1?from=mail&amp;x=1" style="display: inline-block; margin: 4px 4px 0 0; padding: 8px 16px; border-radius: 4px; background: #2a6fdb; color: #ffffff; text-decoration: none">Track &lt;it&gt;</a><br>` + "\n" +
		`<a href="http://shop.example/help" style="display: inline-block; margin: 4px 4px 0 0; padding: 8px 16px; border-radius: 4px; background: #2a6fdb; color: #ffffff; text-decoration: none">Help</a></p>`
	if b.HTML != wantHTML {
		t.Errorf("HTML:\n got %s\nwant %s", b.HTML, wantHTML)
	}
	wantText := "Order A1 shipped\nHello, Ann & Bob\n\nhttps://cdn.shop.example/A1.jpg?w=600&h=400\n\nTrack <it>: https://shop.example/A1?from=mail&x=1\nHelp: http://shop.example/help"
	if b.Text != wantText {
		t.Errorf("text:\n got %q\nwant %q", b.Text, wantText)
	}

	// Without an email body, the text is rendered from Telegram's HTML.
	n.Bodies, n.Photo, n.Buttons = notify.Bodies{}, "", [][]notify.Button{{{Text: "Only Telegram", URL: "tg://x"}}}
	subject, b = email.Compose(n)
	if subject != "Telegram's text" || b.HTML != "<b>Telegram&#39;s text</b>" || b.Text != "Telegram's text" {
		t.Errorf("without a body or web buttons: %q %+v", subject, b)
	}
}
