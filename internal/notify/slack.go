package notify

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/slack-go/slack"
)

// Slack posts a message per call with the tool, target, actor, the first
// digest group, the deadline and a button that opens the call in the
// console. There is deliberately no approve button: a click in Slack proves
// a Slack identity, not the operator's console login, and an approval must
// carry the digest the operator was shown in the console.
//
// With a bot token the channel posts through chat.postMessage and, when the
// call is decided, edits that message with chat.update; reminders and
// escalations reply in its thread. An incoming webhook cannot edit what it
// posted, so it posts a short follow-up instead.
type Slack struct {
	cfg    *SlackConfig
	api    *slack.Client
	client *http.Client
}

// NewSlack returns the channel for cfg; rt carries its requests.
func NewSlack(cfg *SlackConfig, rt http.RoundTripper) *Slack {
	s := &Slack{cfg: cfg, client: newHTTPClient(rt)}
	if cfg.Token != "" {
		s.api = slack.New(cfg.Token, slack.OptionAPIURL(cfg.APIURL), slack.OptionHTTPClient(s.client))
	}
	return s
}

func (s *Slack) usesReceipt() bool { return s.api != nil }

// Send posts, updates or answers the call's message.
func (s *Slack) Send(ctx context.Context, m Message) (string, error) {
	ev := m.Event
	if s.api == nil {
		msg := &slack.WebhookMessage{Text: escapeSlack(summary(ev))}
		if !Decided(ev.Type) {
			msg.Blocks = &slack.Blocks{BlockSet: blocks(ev)}
		}
		return "", slackResult(slack.PostWebhookCustomHTTPContext(ctx, s.cfg.WebhookURL, s.client, msg))
	}
	opts := []slack.MsgOption{slack.MsgOptionText(summary(ev), true), slack.MsgOptionBlocks(blocks(ev)...),
		slack.MsgOptionDisableLinkUnfurl(), slack.MsgOptionDisableMediaUnfurl()}
	channel, ts, ok := strings.Cut(m.Receipt, " ")
	switch {
	case ok && Decided(ev.Type):
		_, _, _, err := s.api.UpdateMessageContext(ctx, channel, ts, opts...)
		return "", slackResult(err)
	case ok:
		_, _, err := s.api.PostMessageContext(ctx, channel, append(opts, slack.MsgOptionTS(ts))...)
		return "", slackResult(err)
	}
	channel, ts, err := s.api.PostMessageContext(ctx, s.cfg.Channel, opts...)
	if err != nil {
		return "", slackResult(err)
	}
	return channel + " " + ts, nil
}

// summary is the message's plain text: what Slack shows in notifications
// and to clients that do not render blocks.
func summary(ev Event) string {
	d := ev.Data
	var b strings.Builder
	b.WriteString(title(ev))
	if d.Target != "" {
		fmt.Fprintf(&b, " on %s", inert(d.Target))
	}
	if d.Actor != "" {
		fmt.Fprintf(&b, " by %s", inert(d.Actor))
	}
	if line := decisionLine(ev); line != "" {
		b.WriteString(" (" + line + ")")
	}
	if d.ID != "" {
		fmt.Fprintf(&b, " [%s]", d.ID)
	}
	b.WriteString(" " + d.URL)
	return b.String()
}

// blocks lays the event out. Everything the agent wrote goes into
// plain_text objects, which Slack shows as written: no mentions, links or
// formatting can be smuggled in through a target.
func blocks(ev Event) []slack.Block {
	d := ev.Data
	plain := func(s string) *slack.TextBlockObject {
		return slack.NewTextBlockObject(slack.PlainTextType, s, false, false)
	}
	out := []slack.Block{slack.NewHeaderBlock(plain(heading(ev)))}
	fields := []*slack.TextBlockObject{plain("Tool: " + visible(d.Tool))}
	if line := d.RiskLine(); line != "" {
		fields = append(fields, plain("Risk: "+line))
	}
	if d.ID != "" {
		fields = append(fields, plain("Target: "+inert(d.Target)), plain("Actor: "+inert(d.Actor)),
			plain("Digest: "+d.DigestGroup()+"…"), plain("Decide by: "+deadline(d)))
		if d.Approvals != nil && d.Approvals.Required > 1 {
			fields = append(fields, plain(fmt.Sprintf("Approvals: %d of %d", d.Approvals.Received, d.Approvals.Required)))
		}
	}
	out = append(out, slack.NewSectionBlock(nil, fields, nil))
	if line := decisionLine(ev); line != "" {
		out = append(out, slack.NewSectionBlock(plain(line), nil, nil))
	}
	if d.Reason != "" {
		out = append(out, slack.NewSectionBlock(plain(inert(d.Reason)), nil, nil))
	}
	label := "Open in Countersign"
	if ev.Type == ToolReviewNeeded {
		label = "Review in Countersign"
	}
	out = append(out, slack.NewActionBlock("countersign", slack.NewButtonBlockElement("open", d.ID, plain(label)).WithURL(d.URL)))
	if ev.Type == CallSubmitted || ev.Type == CallEscalated || ev.Type == CallReminder {
		out = append(out, slack.NewContextBlock("", plain("Decide in the console. Slack cannot approve: a click here proves a Slack account, not your console login.")))
	}
	return out
}

// escapeSlack escapes the three characters Slack's text formatting gives
// meaning to.
func escapeSlack(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// slackResult sorts Slack's errors: rate limits, server errors and network
// trouble are retried; refusals (bad token, unknown channel, invalid
// payload) are permanent.
func slackResult(err error) error {
	if err == nil {
		return nil
	}
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return &SendError{Err: err, RetryAfter: rl.RetryAfter}
	}
	var sc slack.StatusCodeError
	if errors.As(err, &sc) {
		if sc.Code >= 500 || sc.Code == http.StatusTooManyRequests || sc.Code == http.StatusRequestTimeout {
			return &SendError{Err: err}
		}
		return Permanent(fmt.Errorf("slack: %w", err))
	}
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		switch se.Err {
		case "ratelimited", "internal_error", "fatal_error", "service_unavailable", "request_timeout":
			return &SendError{Err: fmt.Errorf("slack: %w", err)}
		}
		return Permanent(fmt.Errorf("slack: %w", err))
	}
	return &SendError{Err: fmt.Errorf("slack: %w", err)}
}
