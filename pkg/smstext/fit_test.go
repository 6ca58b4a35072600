package smstext_test

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/tgnotify/tgnotify/pkg/smstext"
)

func TestPlain(t *testing.T) {
	tests := []struct {
		name   string
		text   string
		markup smstext.Markup
		want   string
		links  []string
	}{
		{
			name:   "shop notification becomes GSM-7",
			text:   "<b>Order A1 accepted</b>\nHello, Ann! We have received your order:\n• Tea × 2 — 7.00\n<b>Total: 7.00</b>",
			markup: smstext.MarkupHTML,
			want:   "Order A1 accepted\nHello, Ann! We have received your order:\n- Tea x 2 - 7.00\nTotal: 7.00",
		},
		{
			name:   "entities decoded",
			text:   "A &lt;b&gt; &amp; &quot;q&quot; &#8364;5",
			markup: smstext.MarkupHTML,
			want:   `A <b> & "q" €5`,
		},
		{
			name:   "link text stays, address collected",
			text:   `Track it <a href="https://shop.example/t/A1?x=1&amp;y=2">here</a>.`,
			markup: smstext.MarkupHTML,
			want:   "Track it here.",
			links:  []string{"https://shop.example/t/A1?x=1&y=2"},
		},
		{
			name:   "single-quoted and nested markup",
			text:   `<i><a href='http://a.example/x'><b>go</b></a></i> <tg-spoiler>secret</tg-spoiler>`,
			markup: smstext.MarkupHTML,
			want:   "go secret",
			links:  []string{"http://a.example/x"},
		},
		{
			name:   "telegram-only links dropped",
			text:   `Hi <a href="tg://user?id=1">Ann</a>`,
			markup: smstext.MarkupHTML,
			want:   "Hi Ann",
		},
		{
			name:   "addresses in the text are links too, once",
			text:   `See <a href="https://a.example/1">https://a.example/1</a> and https://b.example/2.`,
			markup: smstext.MarkupHTML,
			want:   "See https://a.example/1 and https://b.example/2.",
			links:  []string{"https://a.example/1", "https://b.example/2"},
		},
		{
			name:   "cyrillic keeps its typography",
			text:   "<b>Заказ «A1» принят</b> — спасибо…",
			markup: smstext.MarkupHTML,
			want:   "Заказ «A1» принят — спасибо…",
		},
		{
			name: "latin loses typography it does not need",
			text: "“Order” A1 – it’s on its way…",
			want: `"Order" A1 - it's on its way...`,
		},
		{
			name: "emoji kept",
			text: "Order A1 ✅ shipped 🚚",
			want: "Order A1 ✅ shipped 🚚",
		},
		{
			name: "whitespace collapsed",
			text: "  Order \t A1\r\n\n\n   accepted \u00a0 now  \n",
			want: "Order A1\naccepted now",
		},
		{
			name:   "markdownV2",
			text:   `*Order* A1 \- _accepted_\! [track it](https://shop.example/t/A1) ||soon||`,
			markup: smstext.MarkupMarkdownV2,
			want:   "Order A1 - accepted! track it soon",
			links:  []string{"https://shop.example/t/A1"},
		},
		{
			name:   "markdownV2 escaped brackets are text",
			text:   `a \[b\] \(c\) 1\.5`,
			markup: smstext.MarkupMarkdownV2,
			want:   "a [b] (c) 1.5",
		},
		{
			name: "plain text keeps angle brackets",
			text: "a <b> c",
			want: "a <b> c",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, links := smstext.Plain(tt.text, tt.markup)
			if got != tt.want {
				t.Errorf("body = %q, want %q", got, tt.want)
			}
			if !slices.Equal(links, tt.links) {
				t.Errorf("links = %q, want %q", links, tt.links)
			}
		})
	}
}

// words returns n words of the given alphabet, space-separated.
func words(n int, word string) string {
	w := make([]string, n)
	for i := range w {
		w[i] = word
	}
	return strings.Join(w, " ")
}

func TestShorten(t *testing.T) {
	const link = "https://shop.example/t/A1"
	latin := words(80, "order") // 479 characters: four GSM-7 segments
	cyrillic := words(40, "заказ")
	emoji := words(60, "🚚📦")
	tests := []struct {
		name     string
		body     string
		links    []string
		max      int
		want     string // exact, when set
		prefix   string // the result must start with it
		suffix   string // and end with it
		encoding smstext.Encoding
	}{
		{name: "fits unchanged", body: "Order A1 accepted", max: 2, want: "Order A1 accepted"},
		{name: "fits with its link", body: "Order A1 accepted", links: []string{link}, max: 1, want: "Order A1 accepted\n" + link},
		{name: "link already in the text", body: "Track " + link, links: []string{link}, max: 1, want: "Track " + link},
		{name: "latin cut with three dots", body: latin, max: 2, prefix: "order order", suffix: "order...", encoding: smstext.GSM7},
		{name: "latin cut keeps the link", body: latin, links: []string{link}, max: 2, prefix: "order order", suffix: "order...\n" + link, encoding: smstext.GSM7},
		{name: "cyrillic cut with an ellipsis", body: cyrillic, max: 2, prefix: "заказ заказ", suffix: "заказ…", encoding: smstext.UCS2},
		{name: "cyrillic cut keeps the link", body: cyrillic, links: []string{link}, max: 2, prefix: "заказ", suffix: "заказ…\n" + link, encoding: smstext.UCS2},
		{name: "emoji cut between words", body: emoji, max: 1, prefix: "🚚📦", suffix: "🚚📦…", encoding: smstext.UCS2},
		{name: "link too long is dropped", body: latin, links: []string{"https://a.example/" + strings.Repeat("x", 200)}, max: 1, prefix: "order", suffix: "order...", encoding: smstext.GSM7},
		{name: "trailing punctuation before the ellipsis", body: "Order A1, " + latin, max: 1, prefix: "Order A1,", suffix: "order...", encoding: smstext.GSM7},
		{name: "extension characters count two", body: words(60, "{x}"), max: 1, suffix: "{x}...", encoding: smstext.GSM7},
		{name: "one long word is cut between characters", body: strings.Repeat("a", 400), max: 1, want: strings.Repeat("a", 157) + "...", encoding: smstext.GSM7},
		{name: "one long cyrillic word", body: strings.Repeat("я", 400), max: 1, want: strings.Repeat("я", 69) + "…", encoding: smstext.UCS2},
		{name: "zero budget means one", body: latin, max: 0, suffix: "...", encoding: smstext.GSM7},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := smstext.Shorten(tt.body, tt.links, tt.max)
			budget := max(tt.max, 1)
			if s := smstext.Segments(got); s > budget {
				t.Errorf("%q is %d segments, want at most %d", got, s, budget)
			}
			if !utf8.ValidString(got) {
				t.Errorf("%q is not valid UTF-8", got)
			}
			if tt.want != "" && got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if !strings.HasPrefix(got, tt.prefix) {
				t.Errorf("got %q, want a prefix %q", got, tt.prefix)
			}
			if !strings.HasSuffix(got, tt.suffix) {
				t.Errorf("got %q, want a suffix %q", got, tt.suffix)
			}
			if tt.encoding != 0 {
				if e := smstext.Measure(got).Encoding; e != tt.encoding {
					t.Errorf("encoding %s, want %s", e, tt.encoding)
				}
			}
		})
	}
}

// The cut is as long as it can be: one more word would not fit.
func TestShortenIsGreedy(t *testing.T) {
	for _, word := range []string{"order", "заказ", "😀", "{x}"} {
		for budget := 1; budget <= 3; budget++ {
			body := words(200, word)
			got := smstext.Shorten(body, nil, budget)
			n := strings.Count(got, word)
			longer := words(n+1, word) + "..."
			if !smstext.IsGSM7(longer) {
				longer = words(n+1, word) + "…"
			}
			if smstext.Segments(longer) <= budget {
				t.Errorf("%q in %d segments: %d words, but %d fit", word, budget, n, n+1)
			}
		}
	}
}

// Whatever the input, the result fits its budget, is valid UTF-8, and is
// empty only for an empty input.
func TestShortenAlwaysFits(t *testing.T) {
	alphabet := []string{"a", "b", " ", "\n", "{", "€", "é", "я", "😀", "👍🏽", "👨\u200d👩\u200d👧", "e\u0301", ".", ","}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 300 {
		var b strings.Builder
		for range rng.IntN(500) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		checkShorten(t, b.String(), 1+rng.IntN(4))
	}
}

func checkShorten(t *testing.T, text string, budget int) {
	t.Helper()
	body, links := smstext.Plain(text, smstext.MarkupNone)
	got := smstext.Shorten(body, links, budget)
	if s := smstext.Segments(got); s > budget {
		t.Fatalf("Shorten(%q, %d) = %q: %d segments", body, budget, got, s)
	}
	if !utf8.ValidString(got) {
		t.Fatalf("Shorten(%q, %d) = %q: invalid UTF-8", body, budget, got)
	}
	if strings.Trim(body, " \n.,") != "" && got == "" {
		t.Fatalf("Shorten(%q, %d) is empty", body, budget)
	}
}

func FuzzShorten(f *testing.F) {
	f.Add("<b>Order A1</b> accepted <a href=\"https://x.example/1\">track</a>", 1)
	f.Add(strings.Repeat("заказ ", 50), 2)
	f.Add(strings.Repeat("😀", 100), 1)
	f.Fuzz(func(t *testing.T, text string, budget int) {
		if !utf8.ValidString(text) || budget < 1 || budget > 10 {
			t.Skip()
		}
		body, links := smstext.Plain(text, smstext.MarkupHTML)
		got := smstext.Shorten(body, links, budget)
		if s := smstext.Segments(got); s > budget {
			t.Fatalf("Shorten(%q, %d) = %q: %d segments", body, budget, got, s)
		}
	})
}

func TestFit(t *testing.T) {
	text := `<b>Заказ A1 принят</b>` + "\n" + strings.Repeat("Чай × 2 — 7.00\n", 20) + `<a href="https://shop.example/t/A1">Отследить</a>`
	got := smstext.Fit(text, smstext.MarkupHTML, smstext.DefaultMaxSegments)
	if s := smstext.Segments(got); s > 2 {
		t.Fatalf("Fit gave %d segments: %q", s, got)
	}
	if !strings.HasPrefix(got, "Заказ A1 принят\n") || !strings.HasSuffix(got, "…\nhttps://shop.example/t/A1") {
		t.Errorf("Fit = %q, want the heading, an ellipsis and the link", got)
	}
}
