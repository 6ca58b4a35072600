package maxapi_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/tgnotify/tgnotify/pkg/maxapi"
	"github.com/tgnotify/tgnotify/pkg/maxapi/emulator"
)

// Send a message, and read what MAX's refusal means: the emulator stands in
// for platform-api2.max.ru, and user 2 has stopped the bot.
func Example() {
	emu, _ := emulator.New(emulator.Config{
		Token:  "example-token",
		States: map[emulator.Recipient]emulator.RecipientState{emulator.User(2): emulator.StateBlocked},
	})
	srv := httptest.NewServer(emu)
	defer srv.Close()

	client, err := maxapi.New("example-token", maxapi.WithBaseURL(srv.URL))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	m, err := client.SendMessage(ctx, maxapi.SendMessageParams{UserID: 1, Text: "<b>Order A1</b> accepted", Format: maxapi.FormatHTML})
	fmt.Println(m.MessageID, err)

	_, err = client.SendMessage(ctx, maxapi.SendMessageParams{UserID: 2, Text: "Order A2 accepted"})
	fmt.Println(err)
	fmt.Println(maxapi.Classify(err))
	// Output:
	// mid.0000000000000001 <nil>
	// maxapi: sendMessage: 403 chat.denied: error.dialog.suspended
	// recipient_dead (blocked, status 403, code chat.denied)
}
