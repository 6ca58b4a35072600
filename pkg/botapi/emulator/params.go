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

// sendMessageParams are the parsed parameters of sendMessage.
type sendMessageParams struct {
	chatID              int64
	threadID            int64
	text                string
	parseMode           string
	disableNotification bool
	protectContent      bool
	paid                bool
	hasReplyMarkup      bool
}

// parseSendMessage validates sendMessage's parameters, returning the
// description of a 400 on failure. Text content is checked later, after
// rate limiting and chat state, as Telegram does.
func parseSendMessage(p map[string]string) (sendMessageParams, string) {
	var s sendMessageParams
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
	s.text = p["text"]
	s.parseMode = p["parse_mode"]
	switch strings.ToLower(s.parseMode) {
	case "", "html", "markdown", "markdownv2":
	default:
		return s, "Bad Request: unsupported parse_mode"
	}
	s.disableNotification = boolParam(p["disable_notification"])
	s.protectContent = boolParam(p["protect_content"])
	s.paid = boolParam(p["allow_paid_broadcast"])
	if v := strings.TrimSpace(p["link_preview_options"]); v != "" {
		var o map[string]json.RawMessage
		if json.Unmarshal([]byte(v), &o) != nil {
			return s, "Bad Request: can't parse link preview options JSON object"
		}
	}
	if v := strings.TrimSpace(p["reply_markup"]); v != "" {
		if d := checkReplyMarkup(v); d != "" {
			return s, d
		}
		s.hasReplyMarkup = true
	}
	return s, ""
}

// checkReplyMarkup validates an inline keyboard: every button needs a text
// and an action.
func checkReplyMarkup(v string) string {
	var m struct {
		InlineKeyboard [][]map[string]json.RawMessage `json:"inline_keyboard"`
	}
	if json.Unmarshal([]byte(v), &m) != nil {
		return "Bad Request: can't parse reply keyboard markup JSON object"
	}
	for _, row := range m.InlineKeyboard {
		for _, b := range row {
			var text string
			if json.Unmarshal(b["text"], &text) != nil || text == "" {
				return "Bad Request: can't parse inline keyboard button: Text must be non-empty"
			}
			if len(b) < 2 {
				return "Bad Request: can't parse inline keyboard button: Text buttons are unallowed in the inline keyboard"
			}
		}
	}
	return ""
}
