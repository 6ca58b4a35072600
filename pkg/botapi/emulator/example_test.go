package emulator_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"

	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// Example runs the emulator in-process with Telegram's limits and a chat
// that blocked the bot, sends to it over HTTP, and reads what it recorded.
func Example() {
	const token = "123456789:TEST-example-token"
	emu, err := emulator.New(emulator.Config{
		Token:   token,
		Limits:  emulator.DefaultLimits(),
		Blocked: []int64{666},
	})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(emu)
	defer srv.Close()

	send := func(chatID, text string) {
		resp, err := http.PostForm(srv.URL+"/bot"+token+"/sendMessage", url.Values{"chat_id": {chatID}, "text": {text}})
		if err != nil {
			panic(err)
		}
		defer resp.Body.Close()
		var answer struct {
			OK          bool   `json:"ok"`
			Description string `json:"description"`
			Result      struct {
				MessageID int64 `json:"message_id"`
			} `json:"result"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&answer); err != nil {
			panic(err)
		}
		if answer.OK {
			fmt.Println(resp.StatusCode, "message", answer.Result.MessageID)
			return
		}
		fmt.Println(resp.StatusCode, answer.Description)
	}
	send("666", "hello")
	for range 4 { // one private chat: a burst of 3, then 429
		send("42", "hello")
	}
	fmt.Println("delivered:", emu.Stats().Delivered, "rate limited:", emu.Stats().RateLimited)
	fmt.Println("kept:", len(emu.ChatMessages(42)), "messages for chat 42")
	// Output:
	// 403 Forbidden: bot was blocked by the user
	// 200 message 1
	// 200 message 2
	// 200 message 3
	// 429 Too Many Requests: retry after 1
	// delivered: 3 rate limited: 1
	// kept: 3 messages for chat 42
}
