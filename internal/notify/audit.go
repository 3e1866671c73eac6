package notify

import (
	"time"

	"github.com/countersign/countersign/internal/audit"
)

// The audit entries of the notification store's changes, built here so
// that both store engines record the same facts. A push endpoint is named
// by its service's host and EndpointDigest, never written out: it is a
// bearer address of the browser.

// SubscribedEntry records s added (renewed false) or its keys renewed by
// its own account.
func SubscribedEntry(s Subscription, renewed bool) *audit.Entry {
	return &audit.Entry{Time: audit.FormatTime(s.CreatedAt), Kind: audit.KindPushSubscribed, Principal: s.Account,
		Channel: audit.ChannelWeb, Details: map[string]any{"account": s.Account, "service": hostOf(s.Endpoint),
			"endpoint_digest": EndpointDigest(s.Endpoint), "renewed": renewed}}
}

// UnsubscribedEntry records account's subscription to endpoint removed:
// by the account itself when by is not empty, else because the push
// service said it is gone.
func UnsubscribedEntry(now time.Time, by, account, endpoint string) *audit.Entry {
	e := &audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindPushUnsubscribed, Principal: by, Channel: audit.ChannelWeb,
		Details: map[string]any{"account": account, "service": hostOf(endpoint), "endpoint_digest": EndpointDigest(endpoint),
			"reason": "removed by the account"}}
	if by == "" {
		e.Principal, e.Channel = "console", audit.ChannelAPI
		e.Details.(map[string]any)["reason"] = "the push service says it is gone"
	}
	return e
}

// RetriedEntry records an admin's retry of delivery seq, which was in
// state (dead, or pending between attempts).
func RetriedEntry(now time.Time, by string, seq int64, state, eventID, kind, channel, callID string) *audit.Entry {
	return &audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindDeliveryRetried, Principal: by, Channel: audit.ChannelWeb,
		CallID: callID, Details: map[string]any{"seq": seq, "was": state, "event_id": eventID, "event": kind, "channel": channel}}
}
