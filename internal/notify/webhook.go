package notify

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"strconv"
	"time"

	"github.com/countersign/countersign/internal/tracing"
)

// Webhook posts events in the Standard Webhooks format
// (standardwebhooks.com): the headers webhook-id (the event id, the same on
// every retry), webhook-timestamp (Unix seconds of this attempt) and
// webhook-signature, which holds "v1," and the base64 HMAC-SHA256 of
// "id.timestamp.body" under the whsec_ secret, and, when a signing key is
// configured, "v1a," and an Ed25519 signature of the same bytes, so a
// receiver can verify with the public key alone.
type Webhook struct {
	url    string
	secret []byte
	key    ed25519.PrivateKey
	client *http.Client
	now    func() time.Time
}

// NewWebhook returns the channel for cfg; rt carries its requests (nil for
// the default transport).
func NewWebhook(cfg *WebhookConfig, rt http.RoundTripper, now func() time.Time) *Webhook {
	w := &Webhook{url: cfg.URL, secret: cfg.Secret, client: newHTTPClient(rt), now: now}
	if w.now == nil {
		w.now = time.Now
	}
	// The key is always derived from its seed, so the public key listed is
	// the one that verifies what the channel signs (the configuration
	// refuses a 64-byte key whose halves disagree).
	if len(cfg.SigningKey) == ed25519.SeedSize || len(cfg.SigningKey) == ed25519.PrivateKeySize {
		w.key = ed25519.NewKeyFromSeed(cfg.SigningKey[:ed25519.SeedSize])
	}
	return w
}

// PublicKey is the whpk_ key receivers verify v1a signatures with, "" when
// the channel signs with the shared secret only.
func (w *Webhook) PublicKey() string {
	if w.key == nil {
		return ""
	}
	return "whpk_" + base64.StdEncoding.EncodeToString(w.key.Public().(ed25519.PublicKey))
}

// Send posts the stored body unchanged.
func (w *Webhook) Send(ctx context.Context, m Message) (string, error) {
	ts := w.now().Unix()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(m.Body))
	if err != nil {
		return "", Permanent(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Countersign-Webhooks/1")
	req.Header.Set("webhook-id", m.Event.ID)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(ts, 10))
	req.Header.Set("webhook-signature", Sign(w.secret, w.key, m.Event.ID, ts, m.Body))
	// The trace of the agent step that caused the event, when traced.
	tracing.Inject(ctx, req.Header)
	return "", httpResult(w.client.Do(req))
}

// Sign returns the webhook-signature header for one message: the v1
// signature under secret and, when key is not nil, the v1a signature,
// separated by a space.
func Sign(secret []byte, key ed25519.PrivateKey, id string, ts int64, body []byte) string {
	content := make([]byte, 0, len(id)+len(body)+24)
	content = append(content, id...)
	content = append(content, '.')
	content = strconv.AppendInt(content, ts, 10)
	content = append(content, '.')
	content = append(content, body...)
	mac := hmac.New(sha256.New, secret)
	mac.Write(content)
	sig := "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
	if key != nil {
		sig += " v1a," + base64.StdEncoding.EncodeToString(ed25519.Sign(key, content))
	}
	return sig
}
