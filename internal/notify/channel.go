package notify

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// Channel sends events to one configured destination.
type Channel interface {
	// Send delivers one event. The receipt, when not empty, is kept with
	// the row so later events of the same call can refer to this message.
	// An error is retried with backoff unless it is Permanent.
	Send(ctx context.Context, m Message) (receipt string, err error)
}

// receiptUser is a channel that updates or answers its earlier messages
// about a call; the dispatcher looks up the call's receipt before sending.
type receiptUser interface {
	usesReceipt() bool
}

// Message is one row to send.
type Message struct {
	Event Event
	// Body is the JSON of the event, byte for byte what a webhook posts and
	// signs: the stored body, with the by_name fields the dispatcher set on
	// Event (Event.Named) when it names people.
	Body    []byte
	Attempt int // 1 for the first attempt
	// Receipt is the receipt of the earliest delivered message about the
	// same call on the same channel, "" when there is none.
	Receipt string
	// Sent is what earlier attempts of this row finished, as the channel
	// reported it in SendError.Sent ("" on a first attempt): a channel
	// with several receivers skips those already reached.
	Sent string
}

// SendError is a failed attempt with what the dispatcher should do next.
type SendError struct {
	Err error
	// Permanent means retrying cannot help (the receiver refused the
	// message, or the configuration is wrong): the row is dead at once.
	Permanent bool
	// RetryAfter is the receiver's own wait (Retry-After), if it gave one.
	RetryAfter time.Duration
	// Sent is what the channel finished before failing, kept with the row
	// and handed to its next attempt as Message.Sent.
	Sent string
}

func (e *SendError) Error() string { return e.Err.Error() }
func (e *SendError) Unwrap() error { return e.Err }

// Permanent marks err as one that no retry can fix.
func Permanent(err error) error { return &SendError{Err: err, Permanent: true} }

func isPermanent(err error) bool {
	var se *SendError
	return errors.As(err, &se) && se.Permanent
}

func sentOf(err error) string {
	var se *SendError
	if errors.As(err, &se) {
		return se.Sent
	}
	return ""
}

func retryAfterOf(err error) time.Duration {
	var se *SendError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}

// newHTTPClient returns a client that never follows a redirect: every
// address a message goes to comes from the configuration (or a push
// service on the allowlist), never from a receiver's answer.
func newHTTPClient(rt http.RoundTripper) *http.Client {
	if rt == nil {
		rt = http.DefaultTransport
	}
	return &http.Client{
		Transport: rt,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}

// httpResult turns an HTTP answer into nil, a retryable or a permanent
// error. 2xx is success; 408, 425, 429 and 5xx are retried (honouring
// Retry-After); any other status, redirects included, is permanent.
func httpResult(resp *http.Response, err error) error {
	if err != nil {
		return &SendError{Err: err}
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return nil
	}
	msg := fmt.Sprintf("HTTP %d", resp.StatusCode)
	if s := strings.TrimSpace(printable(string(snippet))); s != "" {
		msg += ": " + s
	}
	switch {
	case resp.StatusCode == http.StatusRequestTimeout, resp.StatusCode == http.StatusTooEarly,
		resp.StatusCode == http.StatusTooManyRequests, resp.StatusCode >= 500:
		return &SendError{Err: errors.New(msg), RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"))}
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return Permanent(fmt.Errorf("%s: redirects are not followed; configure the final address", msg))
	}
	return Permanent(errors.New(msg))
}

func parseRetryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0)
	}
	return 0
}

// errorText is a failed attempt's error as it is kept with the delivery,
// shown on the deliveries page and logged: every URL the HTTP client names
// in it is cut to its scheme and host. A channel's URL can be its secret
// (a Slack incoming webhook's URL is its credential, a webhook URL may
// carry a token, a push endpoint is a capability), and a network error
// spells it out whole.
func errorText(err error) string {
	msg := err.Error()
	var ue *url.Error
	for e := err; errors.As(e, &ue); e = ue.Err {
		if ue.URL != "" {
			msg = strings.ReplaceAll(msg, ue.URL, siteOf(ue.URL))
		}
	}
	return msg
}

// siteOf is a URL's scheme and host.
func siteOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a URL)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}

// printable keeps an error text short and on one line.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		if !unicode.IsPrint(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}

// visible shows agent text in a human message: characters that are not
// graphic (bidirectional controls, zero-width and other format characters,
// tag characters) become [U+XXXX], so a message cannot show other text
// than the console does.
func visible(s string) string {
	var b strings.Builder
	for _, r := range s {
		if r == ' ' || (unicode.IsGraphic(r) && !unicode.Is(unicode.Cf, r) && !unicode.Is(unicode.Co, r)) {
			b.WriteRune(r)
			continue
		}
		fmt.Fprintf(&b, "[U+%04X]", r)
	}
	return b.String()
}

// inert shows agent text (a target, an actor, a reason, a note, a name)
// in a message's text so that no client turns it into a link or
// formatting: visible's escapes, then
//
//   - "://" becomes "[:]//", so no URL scheme is recognised;
//   - a "." or "@" followed by a character that is not white space becomes
//     "[.]" or "[@]", so no domain name or mail address is auto-linked;
//   - the characters Slack's mrkdwn and Markdown format with, "*", "~" and
//     "`", always, and "_" at the edge of a word (inside a word no client
//     formats it), become visible escapes "[U+002A]", "[U+007E]",
//     "[U+0060]" and "[U+005F]", as invisible characters do.
//
// Slack additionally escapes "&", "<" and ">". The console shows the text
// exactly; a message only points to it.
func inert(s string) string {
	rs := []rune(visible(s))
	var b strings.Builder
	for i, r := range rs {
		next := rune(' ')
		if i+1 < len(rs) {
			next = rs[i+1]
		}
		switch {
		case r == ':' && i+2 < len(rs) && rs[i+1] == '/' && rs[i+2] == '/':
			b.WriteString("[:]")
		case (r == '.' || r == '@') && !unicode.IsSpace(next):
			b.WriteString("[" + string(r) + "]")
		case r == '*' || r == '~' || r == '`':
			fmt.Fprintf(&b, "[U+%04X]", r)
		case r == '_' && (i == 0 || i+1 == len(rs) || !isWordRune(rs[i-1]) || !isWordRune(next)):
			fmt.Fprintf(&b, "[U+%04X]", r)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isWordRune(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }

// heading is the few words that say what happened, shared by Slack, email
// and push.
func heading(ev Event) string {
	d := ev.Data
	switch ev.Type {
	case CallSubmitted:
		return "Approval needed"
	case CallEscalated:
		return fmt.Sprintf("Escalated: still waiting after %s", time.Duration(d.EscalatedAfter)*time.Second)
	case CallReminder:
		return "Deadline near"
	case CallApproved:
		return "Approved"
	case CallDenied:
		return "Denied"
	case CallExpired:
		return "Expired without a decision"
	case CallCancelled:
		return "Withdrawn by the agent"
	case CallCountered:
		return "Countered: an operator proposed an edited call"
	case CallRedeemed:
		return "Redeemed"
	case CallOutcome:
		if d.Outcome != nil {
			return "Outcome: " + visible(d.Outcome.Status)
		}
		return "Outcome"
	case CallLeaseExpired:
		return "Outcome unknown: the executor's lease expired; find out whether it ran"
	case CallResolved:
		if d.Resolution != nil {
			return "Resolved as " + strings.ReplaceAll(visible(d.Resolution.Verdict), "_", " ")
		}
		return "Resolved"
	case ToolReviewNeeded:
		return "Tool needs review"
	case AllowanceGiven:
		if a := d.Allowance; a != nil {
			return fmt.Sprintf("Allowance given by %s: up to %d calls until %s", inert(shown(a.Giver, a.GiverName)), a.Uses, deadlineOf(a.Until))
		}
		return "Allowance given"
	case AllowanceEnded:
		return "Allowance ended: " + endedWords(d.Reason)
	case PlanSubmitted:
		if d.Plan != nil {
			return fmt.Sprintf("Approval needed: a plan of %d calls", d.Plan.Items)
		}
		return "Approval needed: a plan"
	case PlanDecided:
		if d.Status == "denied" {
			return "Plan denied"
		}
		return "Plan approved"
	}
	return visible(ev.Type)
}

// title is heading and tool on one line.
func title(ev Event) string { return heading(ev) + ": " + visible(ev.Data.Tool) }

// deadline formats decide_by for people.
func deadline(d Data) string { return deadlineOf(d.DecideBy) }

// deadlineOf formats an RFC 3339 time for people.
func deadlineOf(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05 UTC")
}

// endedWords says why an allowance ended (allowance.ended's reason).
func endedWords(reason string) string {
	switch reason {
	case "used_up":
		return "used up"
	case "expired":
		return "its time is up"
	case "revoked":
		return "revoked"
	case "tool_changed":
		return "its tool's definition changed"
	case "confirmer_disabled":
		return "a confirmer may no longer approve"
	}
	return visible(reason)
}

// decisionLine says who decided and why, for events that end a wait,
// naming people as people see them (by_name), never by a principal.
func decisionLine(ev Event) string {
	d := ev.Data
	switch {
	case d.Decision != nil && d.Decision.Reason != "":
		return fmt.Sprintf("%s by %s: %s", d.Status, inert(shown(d.Decision.By, d.Decision.ByName)), inert(d.Decision.Reason))
	case d.Decision != nil:
		return fmt.Sprintf("%s by %s", d.Status, inert(shown(d.Decision.By, d.Decision.ByName)))
	case ev.Type == CallApproved && d.Approvals != nil && len(d.Approvals.By) > 0:
		names := make([]string, len(d.Approvals.By))
		for i, by := range d.Approvals.By {
			var byName string
			if i < len(d.Approvals.ByName) {
				byName = d.Approvals.ByName[i]
			}
			names[i] = shown(by, byName)
		}
		return "approved by " + inert(strings.Join(names, ", "))
	case d.Resolution != nil:
		return fmt.Sprintf("resolved by %s: %s", inert(shown(d.Resolution.By, d.Resolution.ByName)), inert(d.Resolution.Note))
	case ev.Type == CallLeaseExpired:
		return "no outcome was reported by " + visible(d.LeaseUntil) + "; the call waits in Unresolved"
	case d.Outcome != nil && d.Outcome.Detail != "":
		return fmt.Sprintf("outcome %s: %s", visible(d.Outcome.Status), inert(d.Outcome.Detail))
	}
	return ""
}
