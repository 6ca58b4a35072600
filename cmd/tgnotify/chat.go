package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/tgnotify/tgnotify/internal/config"
	"github.com/tgnotify/tgnotify/internal/operator"
)

const chatUsage = `Usage: tgnotify chat revive [-channel telegram] [flags] ID

Deletes the mark that says recipient ID is dead on a channel (notify_chats
key dead.<chat> for Telegram, <channel>.dead.<recipient> for the others), so
that the workers send to it again; running workers see the deletion within
milliseconds. It prints what the mark said (reason, error, when, which key
found it). Then replay the recipient's dead letters if they should still go
out (tgnotify dlq replay -channel C -recipient ID).

ID is a Telegram chat id; for MAX u<user id> or c<chat id>; for email the
address or its e<hash> token; for SMS the phone number (+79991234567) or its
p<hash> token. Exit status 1 when the recipient is not marked dead.

`

// chatSettings are what the chat revive command's flags configure.
type chatSettings struct {
	conn    connFlags
	channel string
}

// runChat is `tgnotify chat`.
func runChat(ctx context.Context, s streams, args []string) error {
	if len(args) == 0 || slices.Contains([]string{"-h", "-help", "--help", "help"}, args[0]) {
		fmt.Fprint(s.stderr, chatUsage)
		if len(args) == 0 {
			return &config.Error{Err: errors.New("no chat command given (revive)")}
		}
		return flag.ErrHelp
	}
	if args[0] != "revive" {
		fmt.Fprint(s.stderr, chatUsage)
		return &config.Error{Err: fmt.Errorf("unknown chat command %q (want revive)", args[0])}
	}
	p := &chatSettings{}
	cs := config.New("tgnotify chat revive", config.Options{EnvPrefix: "TGNOTIFY", Getenv: s.getenv, Output: s.stderr, Usage: chatUsage, AllowArgs: true})
	p.conn.register(cs, defaultTimeout)
	p.conn.registerPrefix(cs)
	config.String(cs, &p.channel, "channel", "telegram", "the `channel` the recipient is dead on: telegram, max, email or sms").
		Check(config.OneOf("telegram", "max", "email", "sms"))
	if err := cs.Parse(args[1:]); err != nil {
		return err
	}
	rest := cs.FlagSet().Args()
	if len(rest) != 1 {
		return &config.Error{Err: fmt.Errorf("revive: want one recipient ID after the flags, got %q", rest)}
	}
	token, err := operator.RecipientToken(p.channel, rest[0])
	if err != nil {
		return &config.Error{Err: fmt.Errorf("revive: %w", err)}
	}
	sess, err := p.conn.connect(ctx, s, "tgnotify chat revive")
	if err != nil {
		return err
	}
	defer sess.close()
	d, raw, err := operator.Revive(sess.ctx, sess.js, sess.names, p.channel, token)
	if err != nil {
		return fmt.Errorf("revive: %w", err)
	}
	if d.Reason == "" {
		fmt.Fprintf(s.stdout, "%s recipient %s revived; its mark said: %s\n", p.channel, token, raw)
		return nil
	}
	fmt.Fprintf(s.stdout, "%s recipient %s revived; it was marked dead at %s: %s (%d %s), found by %s\n",
		p.channel, token, d.At.UTC().Format(time.RFC3339), d.Reason, d.Code, d.Description, d.Key)
	return nil
}
