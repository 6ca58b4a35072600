package emulator

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"unicode"
)

// Limits of an inline keyboard. Telegram publishes none; these are what its
// servers are reported to enforce (tginfo/Telegram-Limits), answered with
// 400 "reply markup is too long".
const (
	// MaxButtons bounds the buttons of one inline keyboard.
	MaxButtons = 100
	// MaxButtonsPerRow bounds one row.
	MaxButtonsPerRow = 8
	// MaxReplyMarkupBytes bounds the reply_markup JSON.
	MaxReplyMarkupBytes = 10 << 10
	// MaxCaptionLength is Telegram's limit on a photo's caption, in UTF-16
	// code units after entity parsing.
	MaxCaptionLength = 1024
)

// uploadedPrefix marks a parameter that came as a file in a multipart body.
const uploadedPrefix = "attach://upload/"

// Button is one button of an inline keyboard as it was sent.
type Button struct {
	Text         string `json:"text"`
	URL          string `json:"url,omitempty"`
	CallbackData string `json:"callback_data,omitempty"`
}

// LinkPreview is the link_preview_options of a message as they were sent.
type LinkPreview struct {
	IsDisabled       bool   `json:"is_disabled,omitempty"`
	URL              string `json:"url,omitempty"`
	PreferSmallMedia bool   `json:"prefer_small_media,omitempty"`
	PreferLargeMedia bool   `json:"prefer_large_media,omitempty"`
	ShowAboveText    bool   `json:"show_above_text,omitempty"`
}

// parseLinkPreview reads link_preview_options, given as an object or as a
// JSON string.
func parseLinkPreview(v string) (*LinkPreview, error) {
	var o LinkPreview
	if err := json.Unmarshal([]byte(v), &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// parseReplyMarkup reads an inline keyboard and checks it as Telegram
// does: every button has a text and exactly one action, a URL button's URL
// is an http, https or tg URL, and the keyboard is not too long. It returns
// the buttons, or the description of a 400.
func parseReplyMarkup(v string) ([][]Button, string) {
	var m struct {
		InlineKeyboard [][]map[string]json.RawMessage `json:"inline_keyboard"`
	}
	if json.Unmarshal([]byte(v), &m) != nil {
		return nil, "Bad Request: can't parse reply keyboard markup JSON object"
	}
	if len(v) > MaxReplyMarkupBytes {
		return nil, "Bad Request: reply markup is too long"
	}
	var rows [][]Button
	total := 0
	for _, row := range m.InlineKeyboard {
		if len(row) > MaxButtonsPerRow {
			return nil, "Bad Request: reply markup is too long"
		}
		var out []Button
		for _, raw := range row {
			var b Button
			if json.Unmarshal(raw["text"], &b.Text) != nil || b.Text == "" {
				return nil, "Bad Request: can't parse inline keyboard button: Text must be non-empty"
			}
			if len(raw) < 2 {
				return nil, "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
			}
			if u, ok := raw["url"]; ok {
				if json.Unmarshal(u, &b.URL) != nil {
					return nil, "Bad Request: can't parse inline keyboard button: Field \"url\" must be of type String"
				}
				if d := checkButtonURL(b.URL); d != "" {
					return nil, d
				}
			}
			if c, ok := raw["callback_data"]; ok {
				_ = json.Unmarshal(c, &b.CallbackData)
			}
			out = append(out, b)
		}
		total += len(out)
		rows = append(rows, out)
	}
	if total > MaxButtons {
		return nil, "Bad Request: reply markup is too long"
	}
	return rows, ""
}

// checkButtonURL checks a URL button's address with Telegram's wording.
func checkButtonURL(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil || raw == "" || strings.IndexFunc(raw, unicode.IsSpace) >= 0:
		return fmt.Sprintf("Bad Request: inline keyboard button URL '%s' is invalid: Wrong HTTP URL", raw)
	case u.Scheme != "" && !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https") && !strings.EqualFold(u.Scheme, "tg"):
		return fmt.Sprintf("Bad Request: inline keyboard button URL '%s' is invalid: Unsupported URL protocol", raw)
	case u.Host == "" && u.Opaque == "" && !strings.Contains(u.Path, "."):
		// Telegram takes "example.com/x" for http://example.com/x, but
		// not a bare word.
		return fmt.Sprintf("Bad Request: inline keyboard button URL '%s' is invalid: Wrong HTTP URL", raw)
	}
	return ""
}

// photoFileID is the file_id the emulator gives a photo fetched from a
// URL: the same URL always gets the same id.
func photoFileID(photo string) string {
	sum := sha256.Sum256([]byte(photo))
	return "AgACAgIAAxkDemu" + hex.EncodeToString(sum[:12])
}

// checkPhoto checks sendPhoto's photo parameter: an uploaded file, an http
// or https URL, or the file_id of a photo this emulator sent before. It
// returns the description of a 400.
func (e *Emulator) checkPhotoLocked(photo string) string {
	if strings.HasPrefix(photo, uploadedPrefix) {
		return ""
	}
	if scheme, _, ok := strings.Cut(photo, "://"); ok {
		u, err := url.Parse(photo)
		if err != nil || u.Host == "" || !strings.EqualFold(scheme, "http") && !strings.EqualFold(scheme, "https") {
			return "Bad Request: wrong file identifier/HTTP URL specified"
		}
		if host := strings.ToLower(u.Hostname()); host == "invalid" || strings.HasSuffix(host, ".invalid") {
			// RFC 2606 reserves .invalid: such a host never resolves, so
			// Telegram could not fetch the picture.
			return "Bad Request: failed to get HTTP URL content"
		}
		return ""
	}
	if !e.photos[photo] {
		return "Bad Request: wrong file identifier/HTTP URL specified"
	}
	return ""
}

// photoResult is the Bot API's PhotoSize.
type photoResult struct {
	FileID       string `json:"file_id"`
	FileUniqueID string `json:"file_unique_id"`
	Width        int    `json:"width"`
	Height       int    `json:"height"`
	FileSize     int64  `json:"file_size"`
}

// photoSizes are the sizes Telegram reports of a photo it stored.
func photoSizes(fileID string) []photoResult {
	return []photoResult{
		{FileID: fileID + "-s", FileUniqueID: fileID[len(fileID)-12:] + "s", Width: 90, Height: 60, FileSize: 1_311},
		{FileID: fileID, FileUniqueID: fileID[len(fileID)-12:] + "x", Width: 1280, Height: 853, FileSize: 98_472},
	}
}

// keyboardResult is the reply_markup a Message carries back.
type keyboardResult struct {
	InlineKeyboard [][]Button `json:"inline_keyboard"`
}
