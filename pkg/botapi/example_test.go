package botapi_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/tgnotify/tgnotify/pkg/botapi"
	"github.com/tgnotify/tgnotify/pkg/botapi/emulator"
)

// ExampleClient_SendMessage sends a message to the emulator and reads the
// proof of delivery.
func ExampleClient_SendMessage() {
	const token = "123456789:TEST-example-token"
	emu, err := emulator.New(emulator.Config{Token: token, Blocked: []int64{666}})
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(emu)
	defer srv.Close()

	client, err := botapi.New(token, botapi.WithBaseURL(srv.URL))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	if _, err := client.GetMe(ctx); err != nil {
		panic(err) // a wrong token fails here, at start-up
	}
	msg, err := client.SendMessage(ctx, botapi.SendMessageParams{
		ChatID:    42,
		Text:      "<b>Order #17</b> has shipped",
		ParseMode: botapi.ParseModeHTML,
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("delivered as message", msg.MessageID, "to chat", msg.Chat.ID)

	_, err = client.SendMessage(ctx, botapi.SendMessageParams{ChatID: 666, Text: "hello"})
	fmt.Println(botapi.Classify(err))
	// Output:
	// delivered as message 1 to chat 42
	// dead (blocked, code 403)
}

// ExampleClassify shows how a worker turns an error into its next step.
func ExampleClassify() {
	errs := []error{
		nil,
		&botapi.Error{Method: "sendMessage", Code: 429, Description: "Too Many Requests: retry after 9", RetryAfter: 9e9},
		&botapi.Error{Method: "sendMessage", Code: 400, Description: "Bad Request: group chat was upgraded to a supergroup chat", MigrateToChatID: -1001234567890},
		&botapi.Error{Method: "sendMessage", Code: 403, Description: "Forbidden: bot can't send messages to the user"},
		&botapi.Error{Method: "sendMessage", Code: 400, Description: "Bad Request: message is too long"},
		&botapi.Error{Method: "sendMessage", Code: 401, Description: "Unauthorized"},
	}
	for _, err := range errs {
		d := botapi.Classify(err)
		switch d.Action {
		case botapi.ActionDelivered:
			fmt.Println("ack")
		case botapi.ActionRetryAfter:
			fmt.Println("pause sending for", d.RetryAfter)
		case botapi.ActionMigrate:
			fmt.Println("resend to", d.MigrateTo)
		case botapi.ActionBackoff:
			fmt.Println("retry later:", d.Reason)
		case botapi.ActionDead:
			fmt.Println("dead-letter:", d.Reason, "chat dead:", d.ChatDead())
		case botapi.ActionHalt:
			fmt.Println("stop everything:", d.Reason)
		}
	}
	// Output:
	// ack
	// pause sending for 9s
	// resend to -1001234567890
	// dead-letter: cant_send chat dead: true
	// dead-letter: content chat dead: false
	// stop everything: unauthorized
}
