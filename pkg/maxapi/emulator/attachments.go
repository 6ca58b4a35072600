package emulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Limits of an inline keyboard: the schema's Button.text (1..128) and
// LinkButton.url (at most 2048), and dev.max.ru ("Клавиатура в
// сообщениях"): up to 210 buttons in 30 rows, up to 7 a row, up to 3 when
// they are link, open_app, request_geo_location or request_contact buttons.
const (
	MaxButtons           = 210
	MaxButtonRows        = 30
	MaxButtonsPerRow     = 7
	MaxLinkButtonsPerRow = 3
	MaxButtonText        = 128
	MaxButtonURL         = 2048
)

// Button is one button of an inline keyboard as it was sent.
type Button struct {
	// Type is the button's type: link, callback, message, ….
	Type string `json:"type"`
	// Text is its label.
	Text string `json:"text"`
	// URL is a link button's address.
	URL string `json:"url,omitempty"`
	// Payload is a callback or clipboard button's payload.
	Payload string `json:"payload,omitempty"`
}

// attachmentTypes are the schema's AttachmentRequest types.
var attachmentTypes = map[string]bool{
	"image": true, "video": true, "audio": true, "file": true, "sticker": true,
	"contact": true, "inline_keyboard": true, "location": true, "share": true,
}

// buttonTypes are the schema's Button types; the narrow ones may stand only
// three to a row.
var buttonTypes = map[string]bool{
	"callback": false, "message": false, "clipboard": false,
	"link": true, "open_app": true, "request_geo_location": true, "request_contact": true,
}

// parsedAttachments is what the emulator keeps of a message's attachments.
type parsedAttachments struct {
	images  []string
	buttons [][]Button
}

// parseAttachments checks the attachments of a NewMessageBody as MAX's
// schema and documentation describe them, and returns the images (by URL)
// and the keyboard.
func parseAttachments(raw []json.RawMessage) (parsedAttachments, error) {
	var out parsedAttachments
	for i, r := range raw {
		var a struct {
			Type    string          `json:"type"`
			Payload json.RawMessage `json:"payload"`
		}
		if err := json.Unmarshal(r, &a); err != nil {
			return out, fmt.Errorf("attachments[%d] is not an AttachmentRequest object", i)
		}
		if !attachmentTypes[a.Type] {
			return out, fmt.Errorf("attachments[%d].type %q is not a known attachment type", i, a.Type)
		}
		switch a.Type {
		case "image":
			url, err := parseImage(a.Payload)
			if err != nil {
				return out, fmt.Errorf("attachments[%d].payload: %v", i, err)
			}
			out.images = append(out.images, url)
		case "inline_keyboard":
			if out.buttons != nil {
				return out, fmt.Errorf("attachments[%d]: only one inline_keyboard is allowed", i)
			}
			b, err := parseKeyboard(a.Payload)
			if err != nil {
				return out, fmt.Errorf("attachments[%d].payload: %v", i, err)
			}
			out.buttons = b
		}
	}
	return out, nil
}

// parseImage reads a PhotoAttachmentRequestPayload: exactly one of url,
// token and photos. It returns the URL, or "token:…" for a token.
func parseImage(raw json.RawMessage) (string, error) {
	var p struct {
		URL    *string         `json:"url"`
		Token  *string         `json:"token"`
		Photos json.RawMessage `json:"photos"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return "", errors.New("is not a PhotoAttachmentRequestPayload object")
	}
	n := 0
	for _, set := range []bool{p.URL != nil, p.Token != nil, len(p.Photos) > 0 && string(p.Photos) != "null"} {
		if set {
			n++
		}
	}
	switch {
	case n != 1:
		return "", errors.New("give exactly one of url, token and photos")
	case p.URL != nil && *p.URL == "":
		return "", errors.New("url: size must be at least 1")
	case p.URL != nil:
		return *p.URL, nil
	case p.Token != nil:
		return "token:" + *p.Token, nil
	}
	return "photos", nil
}

// parseKeyboard reads an InlineKeyboardAttachmentRequestPayload and checks
// its buttons.
func parseKeyboard(raw json.RawMessage) ([][]Button, error) {
	var p struct {
		Buttons [][]Button `json:"buttons"`
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return nil, errors.New("is not an InlineKeyboardAttachmentRequestPayload object")
	}
	switch {
	case len(p.Buttons) == 0:
		return nil, errors.New("buttons: size must be at least 1")
	case len(p.Buttons) > MaxButtonRows:
		return nil, fmt.Errorf("buttons: at most %d rows, got %d", MaxButtonRows, len(p.Buttons))
	}
	total := 0
	for i, row := range p.Buttons {
		narrow := 0
		for j, b := range row {
			field := fmt.Sprintf("buttons[%d][%d]", i, j)
			isNarrow, known := buttonTypes[b.Type]
			if !known {
				return nil, fmt.Errorf("%s.type %q is not a known button type", field, b.Type)
			}
			if isNarrow {
				narrow++
			}
			if n := utf8.RuneCountInString(b.Text); n < 1 || n > MaxButtonText {
				return nil, fmt.Errorf("%s.text: size must be between 1 and %d", field, MaxButtonText)
			}
			if b.Type == "link" {
				if n := utf8.RuneCountInString(b.URL); n < 1 || n > MaxButtonURL {
					return nil, fmt.Errorf("%s.url: size must be between 1 and %d", field, MaxButtonURL)
				}
			}
		}
		switch {
		case len(row) == 0:
			return nil, fmt.Errorf("buttons[%d]: a row must have buttons", i)
		case len(row) > MaxButtonsPerRow:
			return nil, fmt.Errorf("buttons[%d]: at most %d buttons a row, got %d", i, MaxButtonsPerRow, len(row))
		case narrow > 0 && len(row) > MaxLinkButtonsPerRow:
			return nil, fmt.Errorf("buttons[%d]: at most %d buttons a row with link, open_app or request buttons, got %d", i, MaxLinkButtonsPerRow, len(row))
		}
		total += len(row)
	}
	if total > MaxButtons {
		return nil, fmt.Errorf("buttons: at most %d buttons, got %d", MaxButtons, total)
	}
	return p.Buttons, nil
}
