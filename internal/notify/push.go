package notify

import (
	"context"
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"sync"
	"time"

	webpush "github.com/SherClockHolmes/webpush-go"
)

// Subscription is one browser's Web Push subscription (the PushSubscription
// JSON a browser hands the console).
type Subscription struct {
	Endpoint  string
	P256dh    string // the browser's P-256 public key, base64url
	Auth      string // the 16-byte authentication secret, base64url
	Account   string // the console account that subscribed
	CreatedAt time.Time
}

// Bounds on what browsers can make the console keep. A subscription lives
// until its operator turns notifications off in that browser, or until the
// push service says it is gone (the browser unsubscribed, or it expired).
const (
	// MaxPushSubscriptionsPerAccount is how many browsers one account may
	// subscribe; one more is refused with ErrTooManyPushSubscriptions.
	MaxPushSubscriptionsPerAccount = 10
	// MaxPushSubscriptions is how many the console keeps in all; one more
	// is refused with ErrPushSubscriptionsFull.
	MaxPushSubscriptions = 2000
)

// Errors of a Subscriptions store's writes.
var (
	ErrTooManyPushSubscriptions = errors.New("notify: the account has the most push subscriptions it may have")
	ErrPushSubscriptionsFull    = errors.New("notify: the console keeps the most push subscriptions it may")
	// ErrPushEndpointTaken is a subscription whose endpoint another
	// account registered: an endpoint stays with the account that
	// registered it until that account, or the push service, removes it.
	ErrPushEndpointTaken = errors.New("notify: the push endpoint is registered to another account")
)

// Subscriptions is where the console keeps push subscriptions. Adding and
// removing a subscription are audited (push_subscribed,
// push_unsubscribed) in the transaction of the change.
type Subscriptions interface {
	// PushSubscriptions lists the subscriptions of accounts that may
	// decide (enabled operators and admins).
	PushSubscriptions(ctx context.Context) ([]Subscription, error)
	// DeletePushSubscription forgets a subscription the push service says
	// is gone, at now.
	DeletePushSubscription(ctx context.Context, endpoint string, now time.Time) error
}

// EndpointDigest names a push endpoint in the audit trail and in a
// delivery's progress without writing the endpoint itself, which is a
// bearer address of the browser: the first 16 hex digits of its SHA-256.
func EndpointDigest(endpoint string) string {
	sum := sha256.Sum256([]byte(endpoint))
	return hex.EncodeToString(sum[:8])
}

// Push sends Web Push messages (RFC 8030, payload encrypted per RFC 8291,
// VAPID per RFC 8292) to every subscribed browser, so an operator is
// reached with the console closed. The payload names the tool, target and
// actor and links to the call; it never holds arguments.
//
// Push endpoints come from browsers, so they are untrusted addresses: the
// channel posts only to https endpoints whose host is on the allowlist of
// push services, never to an address a subscriber chose.
type Push struct {
	cfg      *PushConfig
	priv     string
	pub      string
	subs     Subscriptions
	client   *http.Client
	log      *slog.Logger
	parallel int
	now      func() time.Time
}

// NewPush returns the channel. privateKey is the VAPID key (base64url)
// used when cfg names none.
func NewPush(cfg *PushConfig, privateKey string, subs Subscriptions, rt http.RoundTripper, log *slog.Logger) (*Push, error) {
	if cfg.PrivateKey != "" {
		privateKey = cfg.PrivateKey
	}
	pub, err := vapidPublicKey(privateKey)
	if err != nil {
		return nil, fmt.Errorf("notify: push: VAPID key: %w", err)
	}
	if log == nil {
		log = slog.Default()
	}
	return &Push{cfg: cfg, priv: privateKey, pub: pub, subs: subs, client: newHTTPClient(rt), log: log, parallel: 4, now: time.Now}, nil
}

// PublicKey is the VAPID public key browsers subscribe with
// (applicationServerKey), base64url.
func (p *Push) PublicKey() string { return p.pub }

// Allowed reports whether endpoint may be posted to.
func (p *Push) Allowed(endpoint string) error { return AllowedEndpoint(p.cfg.Allow, endpoint) }

// AllowedEndpoint accepts an https endpoint without credentials whose host
// is on allow: an entry "host" matches that host on port 443, "host:port"
// that host and port, "*.domain" any subdomain of domain on port 443.
func AllowedEndpoint(allow []string, endpoint string) error {
	u, err := url.Parse(endpoint)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil {
		return fmt.Errorf("a push endpoint must be an https address without credentials")
	}
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = "443"
	}
	for _, entry := range allow {
		entry = strings.ToLower(entry)
		eh, ep, err := net.SplitHostPort(entry)
		if err != nil {
			eh, ep = strings.Trim(entry, "[]"), "443"
		}
		if ep != port {
			continue
		}
		if rest, ok := strings.CutPrefix(eh, "*."); ok {
			if strings.HasSuffix(host, "."+rest) {
				return nil
			}
		} else if host == eh {
			return nil
		}
	}
	return fmt.Errorf("%s is not a push service on the allowlist (%s)", u.Host, strings.Join(allow, ", "))
}

// PushPayload is the decrypted content of a push message; the service
// worker shows it as a notification.
type PushPayload struct {
	ID    string `json:"id"` // the event id
	Type  string `json:"type"`
	Title string `json:"title"`
	Body  string `json:"body"`
	Call  string `json:"call,omitempty"`
	// Tag groups notifications: a later one about the same call replaces
	// the earlier one, and a repeated delivery shows once.
	Tag string `json:"tag"`
	URL string `json:"url"`
}

func pushPayload(ev Event) PushPayload {
	d := ev.Data
	parts := []string{}
	if line := d.RiskLine(); line != "" {
		parts = append(parts, line)
	}
	if d.Target != "" {
		parts = append(parts, inert(d.Target))
	}
	if d.Actor != "" {
		parts = append(parts, "by "+inert(d.Actor))
	}
	if line := decisionLine(ev); line != "" {
		parts = append(parts, line)
	} else if d.DecideBy != "" && !Decided(ev.Type) {
		parts = append(parts, "decide by "+deadline(d))
	}
	tag := d.ID
	if tag == "" {
		tag = "tool:" + d.Tool
	}
	return PushPayload{ID: ev.ID, Type: ev.Type, Title: title(ev), Body: strings.Join(parts, " · "), Call: d.ID, Tag: tag, URL: d.URL}
}

// Send posts the event to every subscription. A subscription the push
// service says is gone (404, 410) is deleted; one that is refused for good
// is logged and left. Each subscription is delivered once: when a push
// service fails in a way that may pass (timeouts, 429, 5xx), the row is
// retried for the subscriptions that failed only, because the error
// carries, as Sent, the subscriptions this and earlier attempts finished
// (m.Sent), which the next attempt skips.
func (p *Push) Send(ctx context.Context, m Message) (string, error) {
	subs, err := p.subs.PushSubscriptions(ctx)
	if err != nil {
		return "", &SendError{Err: fmt.Errorf("push: list subscriptions: %w", err), Sent: m.Sent}
	}
	// sent holds what earlier attempts finished, read by this loop only;
	// done is what is finished now, written by the sends under mu.
	sent, done := map[string]bool{}, map[string]bool{}
	for _, d := range strings.Fields(m.Sent) {
		sent[d], done[d] = true, true
	}
	payload, _ := json.Marshal(pushPayload(m.Event))
	urgency := webpush.UrgencyNormal
	if !Decided(m.Event.Type) {
		urgency = webpush.UrgencyHigh
	}
	var (
		mu       sync.Mutex
		failures []string
		retry    time.Duration
		wg       sync.WaitGroup
		sem      = make(chan struct{}, p.parallel)
		tried    int
	)
	for _, sub := range subs {
		key := EndpointDigest(sub.Endpoint)
		if sent[key] {
			continue
		}
		if err := p.Allowed(sub.Endpoint); err != nil {
			p.log.Warn("push subscription refused", slog.String("account", sub.Account), slog.Any("error", err))
			continue
		}
		tried++
		wg.Add(1)
		sem <- struct{}{}
		go func(sub Subscription) {
			defer wg.Done()
			defer func() { <-sem }()
			err := p.sendOne(ctx, sub, payload, m.Event.Data.ID, urgency)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				done[key] = true
			case isPermanent(err):
				p.log.Warn("push refused", slog.String("account", sub.Account), slog.String("error", errorText(err)))
				done[key] = true
			default:
				failures = append(failures, errorText(err))
				retry = max(retry, retryAfterOf(err))
			}
		}(sub)
	}
	wg.Wait()
	if len(failures) > 0 {
		finished := make([]string, 0, len(done))
		for d := range done {
			finished = append(finished, d)
		}
		sort.Strings(finished)
		return "", &SendError{Err: fmt.Errorf("push: %d of %d subscriptions failed: %s", len(failures), tried,
			strings.Join(failures, "; ")), RetryAfter: retry, Sent: strings.Join(finished, " ")}
	}
	return "", nil
}

func (p *Push) sendOne(ctx context.Context, sub Subscription, payload []byte, topic string, urgency webpush.Urgency) error {
	opts := &webpush.Options{
		HTTPClient:      p.client,
		Subscriber:      strings.TrimPrefix(p.cfg.Subject, "mailto:"),
		VAPIDPublicKey:  p.pub,
		VAPIDPrivateKey: p.priv,
		TTL:             int(p.cfg.TTL / time.Second),
		Urgency:         urgency,
		Topic:           topic,
	}
	// The library pads the message by appending to the slice it is given,
	// so each send gets a copy of its own.
	resp, err := webpush.SendNotificationWithContext(ctx, append([]byte(nil), payload...),
		&webpush.Subscription{Endpoint: sub.Endpoint, Keys: webpush.Keys{P256dh: sub.P256dh, Auth: sub.Auth}}, opts)
	if err != nil && resp == nil && ctx.Err() == nil && !isNetError(err) {
		// The library refused before sending: a malformed key.
		return Permanent(fmt.Errorf("push to %s: %w", hostOf(sub.Endpoint), err))
	}
	if resp != nil && (resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone) {
		resp.Body.Close()
		if derr := p.subs.DeletePushSubscription(ctx, sub.Endpoint, p.now()); derr != nil {
			return &SendError{Err: fmt.Errorf("push: forget a gone subscription: %w", derr)}
		}
		p.log.Info("push subscription gone", slog.String("account", sub.Account), slog.String("service", hostOf(sub.Endpoint)))
		return nil
	}
	if err := httpResult(resp, err); err != nil {
		return fmt.Errorf("push to %s: %w", hostOf(sub.Endpoint), err)
	}
	return nil
}

func isNetError(err error) bool {
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue)
}

func hostOf(endpoint string) string {
	if u, err := url.Parse(endpoint); err == nil {
		return u.Host
	}
	return "?"
}

// NewVAPIDKey returns a fresh VAPID private key, base64url.
func NewVAPIDKey() (string, error) {
	priv, _, err := webpush.GenerateVAPIDKeys()
	return priv, err
}

// vapidPublicKey derives the uncompressed P-256 public key of a VAPID
// private key, both base64url.
func vapidPublicKey(priv string) (string, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(priv, "="))
	if err != nil {
		return "", errors.New("not base64url")
	}
	k, err := ecdh.P256().NewPrivateKey(raw)
	if err != nil {
		return "", fmt.Errorf("not a P-256 private key: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(k.PublicKey().Bytes()), nil
}
