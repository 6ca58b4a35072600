package notify

import "strings"

// htmlEscaper escapes exactly the characters Telegram's HTML parse mode
// requires in text and attribute values.
var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&quot;")

// EscapeHTML escapes a user-provided string (a customer name, an item title)
// for a message sent with parse mode HTML: '&', '<', '>' and '"' become
// entities, so the string can be neither markup nor a broken entity.
//
// Use it with html/template-like care: escape every value that did not come
// from your own template, and only once.
func EscapeHTML(s string) string { return htmlEscaper.Replace(s) }
