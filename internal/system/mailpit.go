package system

import (
	"context"
	"fmt"
	"net/http"
	"time"
)

// MailpitArgs returns the command line of a Mailpit (bin/mailpit) that
// accepts plain SMTP on smtpAddr, serves its web UI and REST API on
// apiAddr and keeps its messages in the database file db, all of them:
// Mailpit's default keeps only the latest 500. A Mailpit started again with
// the same arguments finds the messages it had.
func MailpitArgs(smtpAddr, apiAddr, db string) []string {
	return []string{
		"--smtp", smtpAddr,
		"--listen", apiAddr,
		"--database", db,
		"--max", "0",
		"--disable-version-check",
		"--smtp-disable-rdns",
	}
}

// MailAddress is a name and an address, as Mailpit reports them.
type MailAddress struct {
	Name    string `json:"Name"`
	Address string `json:"Address"`
}

// Mail is one message in Mailpit's list (GET /api/v1/messages).
type Mail struct {
	// ID is Mailpit's id of the message.
	ID string `json:"ID"`
	// MessageID is the Message-ID header without angle brackets.
	MessageID string        `json:"MessageID"`
	From      MailAddress   `json:"From"`
	To        []MailAddress `json:"To"`
	Bcc       []MailAddress `json:"Bcc"`
	Subject   string        `json:"Subject"`
	// Created is when Mailpit received it (millisecond precision).
	Created time.Time `json:"Created"`
}

// mailpitPage is how many messages one request of MailpitMessages reads.
const mailpitPage = 1000

// MailpitMessages reads every message Mailpit at apiURL holds, oldest
// first, page by page.
func MailpitMessages(ctx context.Context, c *http.Client, apiURL string) ([]Mail, error) {
	var all []Mail
	for start := 0; ; start += mailpitPage {
		var page struct {
			Total    int    `json:"total"`
			Messages []Mail `json:"messages"`
		}
		url := fmt.Sprintf("%s/api/v1/messages?start=%d&limit=%d", apiURL, start, mailpitPage)
		if err := GetJSON(ctx, c, url, &page); err != nil {
			return all, fmt.Errorf("reading Mailpit's messages: %w", err)
		}
		all = append(all, page.Messages...)
		if len(page.Messages) == 0 || start+len(page.Messages) >= page.Total {
			break
		}
	}
	// Mailpit lists the newest first.
	for i, j := 0, len(all)-1; i < j; i, j = i+1, j-1 {
		all[i], all[j] = all[j], all[i]
	}
	return all, nil
}
