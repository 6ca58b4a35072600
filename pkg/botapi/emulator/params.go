package emulator

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strconv"
	"strings"
)

// maxRequestBytes bounds a request body.
const maxRequestBytes = 1 << 20

// errTooLarge reports a body over maxRequestBytes.
var errTooLarge = errors.New("request body too large")

// readParams collects a Bot API request's parameters the way Telegram
// accepts them: from the query string and from a JSON,
// application/x-www-form-urlencoded or multipart/form-data body, the body
// winning. Every value is kept as a string; JSON numbers and booleans keep
// their literal text and JSON objects and arrays their raw JSON, as if they
// had been sent in a form.
func readParams(w http.ResponseWriter, r *http.Request) (map[string]string, error) {
	params := make(map[string]string)
	for k, v := range r.URL.Query() {
		if len(v) > 0 {
			params[k] = v[0]
		}
	}
	if r.Body == nil || r.Method == http.MethodGet || r.Method == http.MethodHead {
		return params, nil
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxRequestBytes)
	mediaType, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch mediaType {
	case "application/json":
		var body bytes.Buffer
		if _, err := body.ReadFrom(r.Body); err != nil {
			return nil, bodyError(err)
		}
		if len(bytes.TrimSpace(body.Bytes())) == 0 {
			return params, nil
		}
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(body.Bytes(), &fields); err != nil {
			return nil, errors.New("can't parse JSON object")
		}
		for k, raw := range fields {
			params[k] = jsonParam(raw)
		}
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			return nil, bodyError(err)
		}
		for k, v := range r.PostForm {
			if len(v) > 0 {
				params[k] = v[0]
			}
		}
	case "multipart/form-data":
		if err := r.ParseMultipartForm(maxRequestBytes); err != nil {
			return nil, bodyError(err)
		}
		for k, v := range r.MultipartForm.Value {
			if len(v) > 0 {
				params[k] = v[0]
			}
		}
		for k, f := range r.MultipartForm.File {
			if len(f) > 0 {
				params[k] = uploadedPrefix + f[0].Filename
			}
		}
	}
	return params, nil
}

func bodyError(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return errTooLarge
	}
	return errors.New("can't read request body")
}

// jsonParam turns a JSON value into the string Telegram would have received
// in a form: strings unquoted, null empty, everything else as raw JSON.
func jsonParam(raw json.RawMessage) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) == nil {
			return s
		}
	}
	if string(raw) == "null" {
		return ""
	}
	return string(raw)
}

// boolParam reads a boolean as Telegram does: "true" or a non-zero number.
func boolParam(v string) bool {
	v = strings.TrimSpace(strings.ToLower(v))
	if v == "true" {
		return true
	}
	n, err := strconv.ParseFloat(v, 64)
	return err == nil && n != 0
}

// sendParams are the parsed parameters of sendMessage or sendPhoto.
type sendParams struct {
	method              string
	chatID              int64
	threadID            int64
	text                string // the text, or the photo's caption
	parseMode           string
	photo               string // sendPhoto: the URL or file id
	captionAbove        bool
	disableNotification bool
	protectContent      bool
	paid                bool
	hasReplyMarkup      bool
	buttons             [][]Button
	preview             *LinkPreview
}

// parseSend validates the parameters of sendMessage or sendPhoto,
// returning the description of a 400 on failure. The text (or caption),
// the photo's content and the forum topic are checked later, after rate
// limiting and chat state, as Telegram does.
func parseSend(method string, p map[string]string) (sendParams, string) {
	s := sendParams{method: method}
	raw := strings.TrimSpace(p["chat_id"])
	if raw == "" {
		return s, "Bad Request: chat_id is empty"
	}
	id, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || id == 0 {
		// Usernames ("@channel") and junk resolve to nothing here.
		return s, "Bad Request: chat not found"
	}
	s.chatID = id
	if v := strings.TrimSpace(p["message_thread_id"]); v != "" {
		if s.threadID, err = strconv.ParseInt(v, 10, 64); err != nil || s.threadID < 0 {
			return s, "Bad Request: message thread not found"
		}
	}
	if method == methodSendPhoto {
		s.text = p["caption"]
		s.photo = strings.TrimSpace(p["photo"])
		if s.photo == "" {
			return s, "Bad Request: there is no photo in the request"
		}
		s.captionAbove = boolParam(p["show_caption_above_media"])
	} else {
		s.text = p["text"]
	}
	s.parseMode = p["parse_mode"]
	switch strings.ToLower(s.parseMode) {
	case "", "html", "markdown", "markdownv2":
	default:
		return s, "Bad Request: unsupported parse_mode"
	}
	s.disableNotification = boolParam(p["disable_notification"])
	s.protectContent = boolParam(p["protect_content"])
	s.paid = boolParam(p["allow_paid_broadcast"])
	if v := strings.TrimSpace(p["link_preview_options"]); v != "" && method == methodSendMessage {
		if s.preview, err = parseLinkPreview(v); err != nil {
			return s, "Bad Request: can't parse link preview options JSON object"
		}
	}
	if v := strings.TrimSpace(p["reply_markup"]); v != "" {
		var d string
		if s.buttons, d = parseReplyMarkup(v); d != "" {
			return s, d
		}
		s.hasReplyMarkup = true
	}
	return s, ""
}
