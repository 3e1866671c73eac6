package notify_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/notify"
)

var b64 = base64.RawURLEncoding

// browser is a push subscriber: its P-256 key pair and auth secret, as a
// browser's PushManager would make them.
type browser struct {
	key  *ecdh.PrivateKey
	auth []byte
}

func newBrowser(t *testing.T) *browser {
	k, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	rand.Read(auth)
	return &browser{key: k, auth: auth}
}

func (b *browser) subscription(endpoint string) notify.Subscription {
	return notify.Subscription{Endpoint: endpoint, P256dh: b64.EncodeToString(b.key.PublicKey().Bytes()),
		Auth: b64.EncodeToString(b.auth), Account: "alice"}
}

func hmacSHA256(key []byte, parts ...[]byte) []byte {
	m := hmac.New(sha256.New, key)
	for _, p := range parts {
		m.Write(p)
	}
	return m.Sum(nil)
}

// decrypt opens an RFC 8291 message (RFC 8188 aes128gcm content coding),
// written from the RFCs: the header is salt (16) | record size (4) |
// key id length (1) | key id (the sender's public key); the input keying
// material is HKDF(auth, ECDH, "WebPush: info\0" ua_public as_public); the
// content key and nonce are HKDF(salt, IKM) with their info strings; each
// record ends in a delimiter (2 for the last) and zero padding.
func (b *browser) decrypt(body []byte) ([]byte, error) {
	if len(body) < 21 {
		return nil, errors.New("short body")
	}
	salt, rs, idlen := body[:16], binary.BigEndian.Uint32(body[16:20]), int(body[20])
	if len(body) < 21+idlen || rs < 18 {
		return nil, errors.New("bad header")
	}
	asPub, err := ecdh.P256().NewPublicKey(body[21 : 21+idlen])
	if err != nil {
		return nil, fmt.Errorf("key id is not a P-256 key: %w", err)
	}
	shared, err := b.key.ECDH(asPub)
	if err != nil {
		return nil, err
	}
	prkKey := hmacSHA256(b.auth, shared)
	info := append(append([]byte("WebPush: info\x00"), b.key.PublicKey().Bytes()...), asPub.Bytes()...)
	ikm := hmacSHA256(prkKey, info, []byte{1})
	prk := hmacSHA256(salt, ikm)
	cek := hmacSHA256(prk, []byte("Content-Encoding: aes128gcm\x00"), []byte{1})[:16]
	nonce := hmacSHA256(prk, []byte("Content-Encoding: nonce\x00"), []byte{1})[:12]
	block, _ := aes.NewCipher(cek)
	gcm, _ := cipher.NewGCM(block)
	records := body[21+idlen:]
	var out []byte
	for seq := uint64(0); len(records) > 0; seq++ {
		n := min(int(rs), len(records))
		iv := append([]byte(nil), nonce...)
		for i := 0; i < 8; i++ {
			iv[11-i] ^= byte(seq >> (8 * i))
		}
		plain, err := gcm.Open(nil, iv, records[:n], nil)
		if err != nil {
			return nil, fmt.Errorf("record %d does not decrypt: %w", seq, err)
		}
		records = records[n:]
		plain = bytes.TrimRight(plain, "\x00")
		if len(plain) == 0 {
			return nil, errors.New("record without delimiter")
		}
		delim := plain[len(plain)-1]
		if (delim == 2) != (len(records) == 0) || (delim != 1 && delim != 2) {
			return nil, fmt.Errorf("record %d has delimiter %d", seq, delim)
		}
		out = append(out, plain[:len(plain)-1]...)
	}
	return out, nil
}

// checkVAPID verifies the Authorization header of RFC 8292: "vapid t=JWT,
// k=KEY", the JWT signed ES256 by KEY, for the endpoint's origin, not
// expired, with a contact.
func checkVAPID(h string, origin string, now time.Time) error {
	rest, ok := strings.CutPrefix(h, "vapid ")
	if !ok {
		return errors.New("not a vapid authorization")
	}
	var token, key string
	for _, p := range strings.Split(rest, ",") {
		p = strings.TrimSpace(p)
		if v, ok := strings.CutPrefix(p, "t="); ok {
			token = v
		} else if v, ok := strings.CutPrefix(p, "k="); ok {
			key = v
		}
	}
	raw, err := b64.DecodeString(key)
	if err != nil || len(raw) != 65 {
		return errors.New("k is not an uncompressed P-256 key")
	}
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return errors.New("t is not a JWT")
	}
	var header struct{ Alg, Typ string }
	hb, _ := b64.DecodeString(parts[0])
	json.Unmarshal(hb, &header)
	if header.Alg != "ES256" {
		return fmt.Errorf("alg %q, want ES256", header.Alg)
	}
	sig, err := b64.DecodeString(parts[2])
	if err != nil || len(sig) != 64 {
		return errors.New("signature is not 64 bytes")
	}
	pub, err := ecdsa.ParseUncompressedPublicKey(elliptic.P256(), raw)
	if err != nil {
		return fmt.Errorf("k is not a P-256 point: %v", err)
	}
	digest := sha256.Sum256([]byte(parts[0] + "." + parts[1]))
	if !ecdsa.Verify(pub, digest[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
		return errors.New("the JWT's signature does not verify with k")
	}
	var claims struct {
		Aud string
		Exp int64
		Sub string
	}
	cb, _ := b64.DecodeString(parts[1])
	json.Unmarshal(cb, &claims)
	if claims.Aud != origin {
		return fmt.Errorf("aud %q, want %q", claims.Aud, origin)
	}
	if time.Unix(claims.Exp, 0).Before(now) || time.Unix(claims.Exp, 0).After(now.Add(24*time.Hour)) {
		return errors.New("exp is in the past or more than a day away")
	}
	if !strings.HasPrefix(claims.Sub, "mailto:") && !strings.HasPrefix(claims.Sub, "https:") {
		return fmt.Errorf("sub %q is no contact", claims.Sub)
	}
	return nil
}

// pushService is a local push endpoint: it checks VAPID, decrypts with the
// browser's keys and keeps the plaintext.
type pushService struct {
	t      *testing.T
	b      *browser
	status int // what to answer; 0 for 201
	srv    *httptest.Server

	mu       sync.Mutex
	requests int
	got      [][]byte
	headers  []http.Header
	errs     []error
}

func newPushService(t *testing.T, b *browser) *pushService {
	p := &pushService{t: t, b: b}
	p.srv = httptest.NewTLSServer(p)
	t.Cleanup(p.srv.Close)
	return p
}

func (p *pushService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.requests++
	if p.status != 0 {
		w.WriteHeader(p.status)
		return
	}
	u, _ := url.Parse(p.srv.URL)
	if err := checkVAPID(r.Header.Get("Authorization"), u.Scheme+"://"+u.Host, time.Now()); err != nil {
		p.errs = append(p.errs, err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.Header.Get("Content-Encoding") != "aes128gcm" || r.Header.Get("TTL") == "" {
		p.errs = append(p.errs, fmt.Errorf("headers %v", r.Header))
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	plain, err := p.b.decrypt(body)
	if err != nil {
		p.errs = append(p.errs, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	p.got = append(p.got, plain)
	p.headers = append(p.headers, r.Header.Clone())
	w.WriteHeader(http.StatusCreated)
}

type memSubs struct {
	mu   sync.Mutex
	subs []notify.Subscription
}

func (m *memSubs) PushSubscriptions(ctx context.Context) ([]notify.Subscription, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]notify.Subscription(nil), m.subs...), nil
}

func (m *memSubs) DeletePushSubscription(ctx context.Context, endpoint string, _ time.Time) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, s := range m.subs {
		if s.Endpoint == endpoint {
			m.subs = append(m.subs[:i], m.subs[i+1:]...)
			return nil
		}
	}
	return nil
}

func pushConfig(t *testing.T, allow ...string) *notify.Config {
	return mustConfig(t, `
channels:
  browsers:
    type: push
    subject: mailto:ops@example.com
    allow: ["`+strings.Join(allow, `", "`)+`"]
`, nil)
}

func hostOf(rawURL string) string {
	u, _ := url.Parse(rawURL)
	return u.Host
}

func TestPushIsEncryptedSignedAndHoldsNoArguments(t *testing.T) {
	b := newBrowser(t)
	svc := newPushService(t, b)
	vapid, _ := notify.NewVAPIDKey()
	subs := &memSubs{subs: []notify.Subscription{b.subscription(svc.srv.URL + "/push/abc123")}}
	r := newRig(t, pushConfig(t, hostOf(svc.srv.URL)), notify.BuildOptions{
		Transport: svc.srv.Client().Transport, VAPIDKey: vapid, Subscriptions: subs, Logger: quiet}, 0.5)
	if r.built.Push.PublicKey() == "" {
		t.Fatal("no VAPID public key for browsers")
	}
	c := testCall("call_a", r.clk.Now())
	r.outbox.Enqueue(r.router.Notices(submitted(c))...)
	deliverAll(t, r.disp)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.errs) != 0 || len(svc.got) != 1 {
		t.Fatalf("push service: errors %v, %d messages", svc.errs, len(svc.got))
	}
	var p notify.PushPayload
	if err := json.Unmarshal(svc.got[0], &p); err != nil {
		t.Fatalf("payload %q: %v", svc.got[0], err)
	}
	row := rowsOf(r.outbox, "browsers")[0]
	if p.ID != row.EventID || p.Type != notify.CallSubmitted || p.Title != "Approval needed: payments.refund" || p.Call != "call_a" ||
		p.Tag != "call_a" || p.URL != "https://approvals.example.com/calls/call_a" ||
		p.Body != "invoice:INV-1042 · by agent:billing-bot · decide by 2030-03-04 10:15:00 UTC" {
		t.Fatalf("payload %+v", p)
	}
	for _, secret := range []string{"amount_minor", "9007199254740991", "s3cr3t", "args"} {
		if bytes.Contains(svc.got[0], []byte(secret)) {
			t.Fatalf("the push payload carries arguments (%s): %s", secret, svc.got[0])
		}
	}
	if h := svc.headers[0]; h.Get("Urgency") != "high" || h.Get("Topic") != "call_a" || h.Get("TTL") != "900" {
		t.Fatalf("headers Urgency %q Topic %q TTL %q", h.Get("Urgency"), h.Get("Topic"), h.Get("TTL"))
	}
	if row.State != notify.StateDelivered {
		t.Fatalf("row %s %q", row.State, row.LastError)
	}
}

func TestPushPostsOnlyToAllowlistedServices(t *testing.T) {
	b := newBrowser(t)
	allowed, stranger := newPushService(t, b), newPushService(t, b)
	vapid, _ := notify.NewVAPIDKey()
	subs := &memSubs{subs: []notify.Subscription{
		b.subscription(stranger.srv.URL + "/collect"),                              // not on the list
		b.subscription("http://" + hostOf(allowed.srv.URL) + "/plain-http"),        // on the list, but not https
		b.subscription("https://user:pw@" + hostOf(allowed.srv.URL) + "/userinfo"), // credentials
		b.subscription(allowed.srv.URL + "/push/ok"),
	}}
	r := newRig(t, pushConfig(t, hostOf(allowed.srv.URL)), notify.BuildOptions{
		Transport: allowed.srv.Client().Transport, VAPIDKey: vapid, Subscriptions: subs, Logger: quiet}, 0.5)
	r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
	deliverAll(t, r.disp)
	if stranger.requests != 0 {
		t.Fatalf("the endpoint that is not on the allowlist got %d requests", stranger.requests)
	}
	if allowed.requests != 1 || len(allowed.got) != 1 {
		t.Fatalf("the allowed service got %d requests (%d decrypted), want only the https one", allowed.requests, len(allowed.got))
	}
	if err := r.built.Push.Allowed(stranger.srv.URL + "/collect"); err == nil || !strings.Contains(err.Error(), "not a push service on the allowlist") {
		t.Fatalf("Allowed(stranger) = %v", err)
	}
}

func TestAllowedEndpoint(t *testing.T) {
	allow := notify.DefaultPushServices
	for endpoint, ok := range map[string]bool{
		"https://fcm.googleapis.com/fcm/send/abc":                  true,
		"https://updates.push.services.mozilla.com/wpush/v2/abc":   true,
		"https://web.push.apple.com/QGx":                           true,
		"https://wns2-by3p.notify.windows.com/w/?token=x":          true,
		"https://push.apple.com/x":                                 false, // *. needs a subdomain
		"https://fcm.googleapis.com:8443/fcm/send/abc":             false,
		"http://fcm.googleapis.com/fcm/send/abc":                   false,
		"https://fcm.googleapis.com.evil.example/fcm":              false,
		"https://evilfcm.googleapis.com/":                          false,
		"https://x@fcm.googleapis.com/":                            false,
		"https://169.254.169.254/latest/meta-data":                 false,
		"https://[::1]/":                                           false,
		"fcm.googleapis.com/fcm/send":                              false,
		"https://FCM.GOOGLEAPIS.COM/fcm/send/upper-case-is-a-host": true,
	} {
		if err := notify.AllowedEndpoint(allow, endpoint); (err == nil) != ok {
			t.Errorf("AllowedEndpoint(%s) = %v, want allowed %v", endpoint, err, ok)
		}
	}
	if err := notify.AllowedEndpoint([]string{"127.0.0.1:8443"}, "https://127.0.0.1:8443/x"); err != nil {
		t.Errorf("host:port entry: %v", err)
	}
}

func TestPushForgetsGoneSubscriptionsAndRetriesFailures(t *testing.T) {
	b := newBrowser(t)
	gone, busy := newPushService(t, b), newPushService(t, b)
	gone.status, busy.status = http.StatusGone, http.StatusServiceUnavailable
	vapid, _ := notify.NewVAPIDKey()
	subs := &memSubs{subs: []notify.Subscription{b.subscription(gone.srv.URL + "/a"), b.subscription(busy.srv.URL + "/b")}}
	r := newRig(t, pushConfig(t, hostOf(gone.srv.URL), hostOf(busy.srv.URL)), notify.BuildOptions{
		Transport: gone.srv.Client().Transport, VAPIDKey: vapid, Subscriptions: subs, Logger: quiet}, 0.5)
	r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
	deliverAll(t, r.disp)
	if left, _ := subs.PushSubscriptions(t.Context()); len(left) != 1 || !strings.HasSuffix(left[0].Endpoint, "/b") {
		t.Fatalf("subscriptions left %+v, want the gone one forgotten", left)
	}
	row := rowsOf(r.outbox, "browsers")[0]
	if row.State != notify.StatePending || !strings.Contains(row.LastError, "503") {
		t.Fatalf("row %s %q, want a retry after the 503", row.State, row.LastError)
	}
}

// Each subscription is delivered once: when one push service fails for a
// while, the row's retries go to that subscription alone.
func TestPushRetriesOnlyTheFailedSubscription(t *testing.T) {
	b := newBrowser(t)
	ok, busy := newPushService(t, b), newPushService(t, b)
	busy.status = http.StatusServiceUnavailable
	vapid, _ := notify.NewVAPIDKey()
	subs := &memSubs{subs: []notify.Subscription{b.subscription(ok.srv.URL + "/a"), b.subscription(busy.srv.URL + "/b")}}
	r := newRig(t, pushConfig(t, hostOf(ok.srv.URL), hostOf(busy.srv.URL)), notify.BuildOptions{
		Transport: ok.srv.Client().Transport, VAPIDKey: vapid, Subscriptions: subs, Logger: quiet}, 0.5)
	r.outbox.Enqueue(r.router.Notices(submitted(testCall("call_a", r.clk.Now())))...)
	deliverAll(t, r.disp)
	if row := rowsOf(r.outbox, "browsers")[0]; row.State != notify.StatePending || !strings.Contains(row.LastError, "1 of 2") {
		t.Fatalf("row %s %q, want a retry for the one that failed", row.State, row.LastError)
	}
	for i := 0; i < 2; i++ { // a second failure keeps what the first attempt finished
		r.clk.Advance(time.Hour)
		deliverAll(t, r.disp)
	}
	busy.mu.Lock()
	busy.status = 0
	busy.mu.Unlock()
	r.clk.Advance(time.Hour)
	deliverAll(t, r.disp)
	if row := rowsOf(r.outbox, "browsers")[0]; row.State != notify.StateDelivered {
		t.Fatalf("row %s %q, want delivered", row.State, row.LastError)
	}
	ok.mu.Lock()
	defer ok.mu.Unlock()
	busy.mu.Lock()
	defer busy.mu.Unlock()
	if len(ok.got) != 1 || ok.requests != 1 {
		t.Fatalf("the healthy service got %d messages in %d requests, want 1", len(ok.got), ok.requests)
	}
	if len(busy.got) != 1 || busy.requests != 4 {
		t.Fatalf("the failing service got %d messages in %d requests, want 1 in 4", len(busy.got), busy.requests)
	}
}
