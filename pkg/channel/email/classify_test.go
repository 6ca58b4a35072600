package email_test

import (
	"errors"
	"testing"

	"github.com/tgnotify/tgnotify/pkg/channel/email"
	"github.com/tgnotify/tgnotify/pkg/delivery"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name   string
		err    *email.Error
		kind   delivery.OutcomeKind
		reason string
		maybe  bool
	}{
		{"accepted", nil, delivery.Delivered, "", false},

		// No reply.
		{"connection refused", &email.Error{Stage: email.StageConnect, Text: "connection refused"}, delivery.Transient, email.ReasonNetwork, false},
		{"greeting timeout", &email.Error{Stage: email.StageConnect, Timeout: true}, delivery.Transient, email.ReasonTimeout, false},
		{"certificate", &email.Error{Stage: email.StageTLS}, delivery.Halt, email.ReasonTLS, false},
		{"no auth mechanism", &email.Error{Stage: email.StageAuth}, delivery.Halt, email.ReasonAuth, false},
		{"broken while writing", &email.Error{Stage: email.StageContent}, delivery.Transient, email.ReasonNetwork, false},
		{"no reply to the final dot", &email.Error{Stage: email.StageDataEnd}, delivery.Transient, email.ReasonNetwork, true},
		{"timeout after the final dot", &email.Error{Stage: email.StageDataEnd, Timeout: true}, delivery.Transient, email.ReasonTimeout, true},
		{"message not built", &email.Error{Stage: email.StageMessage}, delivery.Rejected, email.ReasonBadMessage, false},

		// 4xx: temporary, wherever it comes.
		{"421 greeting", &email.Error{Stage: email.StageConnect, Code: 421}, delivery.Transient, email.ReasonTemporary, false},
		{"454 auth temporary", &email.Error{Stage: email.StageAuth, Code: 454, EnhancedCode: "4.7.0"}, delivery.Transient, email.ReasonTemporary, false},
		{"451 mail from", &email.Error{Stage: email.StageMailFrom, Code: 451}, delivery.Transient, email.ReasonTemporary, false},
		{"450 mailbox busy", &email.Error{Stage: email.StageRcptTo, Code: 450, EnhancedCode: "4.2.1"}, delivery.Transient, email.ReasonTemporary, false},
		{"452 storage", &email.Error{Stage: email.StageRcptTo, Code: 452, EnhancedCode: "4.3.1"}, delivery.Transient, email.ReasonTemporary, false},
		{"421 after data", &email.Error{Stage: email.StageDataEnd, Code: 421, EnhancedCode: "4.7.28"}, delivery.Transient, email.ReasonTemporary, false},
		{"552 5.5.3 at rcpt is 452", &email.Error{Stage: email.StageRcptTo, Code: 552, EnhancedCode: "5.5.3"}, delivery.Transient, email.ReasonTemporary, false},

		// 5xx before the transaction: halt.
		{"554 greeting", &email.Error{Stage: email.StageConnect, Code: 554}, delivery.Halt, email.ReasonRefused, false},
		{"535 credentials", &email.Error{Stage: email.StageAuth, Code: 535, EnhancedCode: "5.7.8"}, delivery.Halt, email.ReasonAuth, false},
		{"530 auth required at connect", &email.Error{Stage: email.StageConnect, Code: 530}, delivery.Halt, email.ReasonAuth, false},
		{"starttls refused", &email.Error{Stage: email.StageTLS, Code: 502}, delivery.Halt, email.ReasonTLS, false},

		// 5xx to MAIL FROM: the sender is ours.
		{"550 sender", &email.Error{Stage: email.StageMailFrom, Code: 550, EnhancedCode: "5.7.1"}, delivery.Halt, email.ReasonSenderRefused, false},
		{"530 at mail from", &email.Error{Stage: email.StageMailFrom, Code: 530, EnhancedCode: "5.7.0"}, delivery.Halt, email.ReasonAuth, false},
		{"552 size at mail from", &email.Error{Stage: email.StageMailFrom, Code: 552}, delivery.Rejected, email.ReasonTooBig, false},

		// 5xx to RCPT TO.
		{"550 5.1.1 user unknown", &email.Error{Stage: email.StageRcptTo, Code: 550, EnhancedCode: "5.1.1"}, delivery.RecipientDead, email.ReasonHardBounce, false},
		{"550 5.1.0 mailbox unavailable", &email.Error{Stage: email.StageRcptTo, Code: 550, EnhancedCode: "5.1.0"}, delivery.RecipientDead, email.ReasonHardBounce, false},
		{"550 without enhanced code", &email.Error{Stage: email.StageRcptTo, Code: 550}, delivery.RecipientDead, email.ReasonHardBounce, false},
		{"551 user not local", &email.Error{Stage: email.StageRcptTo, Code: 551}, delivery.RecipientDead, email.ReasonHardBounce, false},
		{"553 bad address", &email.Error{Stage: email.StageRcptTo, Code: 553}, delivery.RecipientDead, email.ReasonInvalidAddress, false},
		{"5.1.3 bad syntax", &email.Error{Stage: email.StageRcptTo, Code: 553, EnhancedCode: "5.1.3"}, delivery.RecipientDead, email.ReasonInvalidAddress, false},
		{"501 bad rcpt parameter", &email.Error{Stage: email.StageRcptTo, Code: 501}, delivery.RecipientDead, email.ReasonInvalidAddress, false},
		{"5.1.10 null MX", &email.Error{Stage: email.StageRcptTo, Code: 556, EnhancedCode: "5.1.10"}, delivery.RecipientDead, email.ReasonHardBounce, false},
		{"5.2.1 mailbox disabled", &email.Error{Stage: email.StageRcptTo, Code: 550, EnhancedCode: "5.2.1"}, delivery.RecipientDead, email.ReasonHardBounce, false},
		{"5.2.2 mailbox full", &email.Error{Stage: email.StageRcptTo, Code: 552, EnhancedCode: "5.2.2"}, delivery.Rejected, email.ReasonMailboxFull, false},
		{"552 at rcpt", &email.Error{Stage: email.StageRcptTo, Code: 552}, delivery.Rejected, email.ReasonMailboxFull, false},
		{"5.7.1 relaying denied", &email.Error{Stage: email.StageRcptTo, Code: 550, EnhancedCode: "5.7.1"}, delivery.Rejected, email.ReasonPolicy, false},
		{"5.1.8 bad sender domain", &email.Error{Stage: email.StageRcptTo, Code: 553, EnhancedCode: "5.1.8"}, delivery.Halt, email.ReasonSenderRefused, false},
		{"550 5.0.0 falls back to the reply code", &email.Error{Stage: email.StageRcptTo, Code: 550, EnhancedCode: "5.0.0"}, delivery.RecipientDead, email.ReasonHardBounce, false},
		{"554 at rcpt", &email.Error{Stage: email.StageRcptTo, Code: 554}, delivery.Rejected, email.ReasonRejected, false},

		// 5xx to DATA or after the data.
		{"554 to DATA", &email.Error{Stage: email.StageData, Code: 554}, delivery.Rejected, email.ReasonRejected, false},
		{"554 5.7.1 spam", &email.Error{Stage: email.StageDataEnd, Code: 554, EnhancedCode: "5.7.1"}, delivery.Rejected, email.ReasonPolicy, false},
		{"552 too big", &email.Error{Stage: email.StageDataEnd, Code: 552}, delivery.Rejected, email.ReasonTooBig, false},
		{"5.3.4 too big", &email.Error{Stage: email.StageDataEnd, Code: 554, EnhancedCode: "5.3.4"}, delivery.Rejected, email.ReasonTooBig, false},
		{"550 5.1.1 after data", &email.Error{Stage: email.StageDataEnd, Code: 550, EnhancedCode: "5.1.1"}, delivery.RecipientDead, email.ReasonHardBounce, false},
		{"550 after data without enhanced code", &email.Error{Stage: email.StageDataEnd, Code: 550}, delivery.Rejected, email.ReasonRejected, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := email.Classify(tt.err)
			if o.Kind != tt.kind || o.Reason != tt.reason || o.MaybeDelivered != tt.maybe {
				t.Errorf("got %s/%q maybe=%v, want %s/%q maybe=%v", o.Kind, o.Reason, o.MaybeDelivered, tt.kind, tt.reason, tt.maybe)
			}
			if tt.err != nil && o.Code != tt.err.Code {
				t.Errorf("got code %d, want %d", o.Code, tt.err.Code)
			}
		})
	}
}

func TestClassifyMarksUnknownPermanentAnswers(t *testing.T) {
	o := email.Classify(&email.Error{Stage: email.StageDataEnd, Code: 557})
	if o.Kind != delivery.Rejected || !o.Unrecognised {
		t.Errorf("got %s unrecognised=%v, want rejected and unrecognised", o.Kind, o.Unrecognised)
	}
	o = email.Classify(&email.Error{Stage: email.StageRcptTo, Code: 550, EnhancedCode: "5.1.1"})
	if o.Unrecognised {
		t.Error("a 550 5.1.1 is marked unrecognised")
	}
}

func TestErrorMatchesSentinels(t *testing.T) {
	tests := []struct {
		err  *email.Error
		is   []error
		isnt []error
	}{
		{&email.Error{Stage: email.StageAuth, Code: 535}, []error{email.ErrAuth, email.ErrPermanent}, []error{email.ErrTLS, email.ErrTemporary}},
		{&email.Error{Stage: email.StageTLS}, []error{email.ErrTLS}, []error{email.ErrAuth, email.ErrPermanent}},
		{&email.Error{Stage: email.StageRcptTo, Code: 451}, []error{email.ErrTemporary}, []error{email.ErrPermanent}},
	}
	for _, tt := range tests {
		for _, want := range tt.is {
			if !errors.Is(tt.err, want) {
				t.Errorf("errors.Is(%v, %v) = false, want true", tt.err, want)
			}
		}
		for _, not := range tt.isnt {
			if errors.Is(tt.err, not) {
				t.Errorf("errors.Is(%v, %v) = true, want false", tt.err, not)
			}
		}
	}
	got := (&email.Error{Stage: email.StageRcptTo, Code: 550, EnhancedCode: "5.1.1", Text: "user unknown"}).Error()
	if want := "smtp rcpt_to: 550 5.1.1 user unknown"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
