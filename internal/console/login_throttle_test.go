package console

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/server"
)

// countVerifications makes the console count every password it checks.
func countVerifications(e *consoleEnv) *atomic.Int64 {
	var n atomic.Int64
	e.c.verify = func(hash, pw string) error {
		n.Add(1)
		return account.Verify(hash, pw)
	}
	return &n
}

// throttleWait is how long the console's throttle of kind and value waits.
func throttleWait(t *testing.T, e *consoleEnv, kind, value string) time.Duration {
	t.Helper()
	w, err := e.c.accounts.ThrottleWait(context.Background(), kind, value)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// loginForm fetches the login form once and returns its cookie header and
// token, so that many attempts can share them as an attacker's would.
func loginForm(t *testing.T, b *consoleBrowser) (cookie, token string) {
	t.Helper()
	lp := b.get("/login")
	token, _ = lp.doc.Find(`form[data-testid="login-form"] input[name="csrf"]`).Attr("value")
	if token == "" {
		t.Fatal("no login form token")
	}
	return b.cookieHeader(), token
}

// rawLogin posts one login attempt without failing from a goroutine; it
// returns the status, or 0 if the request failed.
func rawLogin(base, cookie, token, name, pw string, headers ...string) int {
	form := url.Values{"csrf": {token}, "name": {name}, "password": {pw}}
	req, _ := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", base)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Cookie", cookie)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := client.Do(req)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestLoginThrottleUnderConcurrency: 100 wrong logins for one account sent
// at once, sharing one form cookie and token, have at most the policy's
// number of passwords checked. The clock does not move, so the policy
// allows its free failures plus the one attempt after them.
func TestLoginThrottleUnderConcurrency(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	checked := countVerifications(e)
	cookie, token := loginForm(t, e.browser())
	const n = 100
	statuses := make([]int, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			statuses[i] = rawLogin(e.url, cookie, token, "olivia", "wrong password")
		}()
	}
	close(start)
	wg.Wait()
	counts := map[int]int{}
	for _, s := range statuses {
		counts[s]++
	}
	allowed := account.AccountPolicy.Free + 1
	if got := checked.Load(); got != int64(allowed) {
		t.Errorf("passwords checked = %d, want %d (the policy's allowance at one instant)", got, allowed)
	}
	if counts[http.StatusUnauthorized] != allowed || counts[http.StatusTooManyRequests] != n-allowed {
		t.Errorf("statuses = %v, want %d × 401 and %d × 429", counts, allowed, n-allowed)
	}
	// The right password waits too, and is not checked.
	before := checked.Load()
	if s := rawLogin(e.url, cookie, token, "olivia", rolePassword); s != http.StatusTooManyRequests {
		t.Errorf("right password while throttled = %d, want 429", s)
	}
	if checked.Load() != before {
		t.Error("a throttled attempt had its password checked")
	}
}

// TestLoginThrottleRefundsSuccess: a successful login gives back the
// address's reserved attempt, so people sharing an address who type their
// passwords right never slow each other down.
func TestLoginThrottleRefundsSuccess(t *testing.T) {
	e := newConsoleEnv(t)
	addRoleUsers(e)
	for range account.AddressPolicy.Free + 5 {
		e.browser().login("olivia", rolePassword)
	}
	if got := throttleWait(t, e, "addr", "127.0.0.1"); got != 0 {
		t.Errorf("address wait after only successful logins = %v, want 0", got)
	}
}

// TestTrustedProxyForwardedFor: X-Forwarded-For is read only from a trusted
// proxy, right to left; behind the proxy each client has its own address
// key, and a client cannot pick its key by prepending addresses.
func TestTrustedProxyForwardedFor(t *testing.T) {
	proxies, err := server.ParseTrustedProxies([]string{"127.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	e := newConsoleEnvWith(t, func(c *envConfig) { c.TrustedProxies = proxies })
	addRoleUsers(e)
	cookie, token := loginForm(t, e.browser())
	// A client behind the proxy at 203.0.113.7 fails as many times as its
	// address allows, each time claiming to be someone else on the left.
	for i := range account.AddressPolicy.Free + 1 {
		xff := "198.51.100." + string(rune('0'+i%10)) + ", 203.0.113.7"
		if s := rawLogin(e.url, cookie, token, "guess"+string(rune('a'+i)), "wrong password", "X-Forwarded-For", xff); s != http.StatusUnauthorized {
			t.Fatalf("failure %d = %d, want 401", i+1, s)
		}
	}
	if s := rawLogin(e.url, cookie, token, "olivia", rolePassword, "X-Forwarded-For", "10.9.9.9, 203.0.113.7"); s != http.StatusTooManyRequests {
		t.Errorf("the throttled client with a new left-hand address = %d, want 429", s)
	}
	// Another client behind the same proxy is not affected.
	b := e.browser()
	c2, t2 := loginForm(t, b)
	if s := rawLogin(e.url, c2, t2, "olivia", rolePassword, "X-Forwarded-For", "203.0.113.8"); s != http.StatusSeeOther {
		t.Errorf("another client behind the proxy = %d, want 303", s)
	}
	if throttleWait(t, e, "addr", "203.0.113.7") == 0 {
		t.Error("the failing client's own address is not throttled")
	}
	if throttleWait(t, e, "addr", "127.0.0.1") != 0 {
		t.Error("the proxy's address was throttled: every client would share it")
	}

	// Without trusted proxies the header is ignored: the peer is the client.
	plain := newConsoleEnv(t)
	addRoleUsers(plain)
	pc, pt := loginForm(t, plain.browser())
	for i := range account.AddressPolicy.Free + 1 {
		rawLogin(plain.url, pc, pt, "guess"+string(rune('a'+i)), "wrong password", "X-Forwarded-For", "203.0.113."+string(rune('0'+i%10)))
	}
	if s := rawLogin(plain.url, pc, pt, "olivia", rolePassword, "X-Forwarded-For", "192.0.2.1"); s != http.StatusTooManyRequests {
		t.Errorf("spoofed X-Forwarded-For without a trusted proxy = %d, want 429 (the peer is throttled)", s)
	}
}

func TestParseTrustedProxies(t *testing.T) {
	got, err := server.ParseTrustedProxies([]string{"10.0.0.0/8", "192.0.2.1", "2001:db8::/32", " "})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[1].String() != "192.0.2.1/32" {
		t.Errorf("parsed = %v", got)
	}
	for _, bad := range []string{"nonsense", "10.0.0.0/33", "host.example"} {
		if _, err := server.ParseTrustedProxies([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if !got[0].Contains(net.ParseIP("10.1.2.3")) {
		t.Error("10.0.0.0/8 does not contain 10.1.2.3")
	}
}

// TestKnownDeviceCookie: an account whose backoff an attacker tripped from
// elsewhere stays usable from a browser that logged in to it before; the
// device has its own allowance, and a forged, foreign or locked-out device
// cookie counts for nothing.
func TestKnownDeviceCookie(t *testing.T) {
	proxies, _ := server.ParseTrustedProxies([]string{"127.0.0.1"})
	e := newConsoleEnvWith(t, func(c *envConfig) { c.TrustedProxies = proxies })
	addRoleUsers(e)
	owner := e.browser()
	owner.login("olivia", rolePassword)
	var device *http.Cookie
	u, _ := url.Parse(e.url)
	for _, c := range owner.jar.Cookies(u) {
		if c.Name == e.c.deviceCookieName {
			device = c
		}
	}
	if device == nil {
		t.Fatal("a successful login set no device cookie")
	}
	if p := owner.post("/logout", url.Values{"csrf": {owner.csrf()}}); p.status != http.StatusSeeOther {
		t.Fatalf("logout = %d", p.status)
	}
	// The attacker fails from many addresses until the account backs off.
	cookie, token := loginForm(t, e.browser())
	for i := range account.AccountPolicy.Free + 1 {
		for _, name := range []string{"olivia", "aude"} {
			rawLogin(e.url, cookie, token, name, "guess", "X-Forwarded-For", "198.51.100."+string(rune('1'+i)))
		}
	}
	if s := rawLogin(e.url, cookie, token, "olivia", rolePassword, "X-Forwarded-For", "198.51.100.99"); s != http.StatusTooManyRequests {
		t.Fatalf("unknown browser after the attack = %d, want 429", s)
	}
	// The owner's browser still logs in.
	if p := owner.tryLogin("olivia", rolePassword); p.status != http.StatusSeeOther {
		t.Fatalf("known device during the attack = %d, want 303", p.status)
	}
	if p := owner.post("/logout", url.Values{"csrf": {owner.csrf()}}); p.status != http.StatusSeeOther {
		t.Fatalf("logout = %d", p.status)
	}
	// A forged device cookie, or one for another account, is an unknown browser.
	oc, ot := loginForm(t, e.browser())
	for _, v := range []string{"forged", device.Value[:len(device.Value)-2] + "xx"} {
		if s := rawLogin(e.url, oc+"; "+e.c.deviceCookieName+"="+v, ot, "olivia", rolePassword); s != http.StatusTooManyRequests {
			t.Errorf("forged device cookie %q = %d, want 429", v[:6], s)
		}
	}
	ownerCookie, ownerToken := loginForm(t, owner)
	if s := rawLogin(e.url, ownerCookie, ownerToken, "aude", rolePassword); s != http.StatusTooManyRequests {
		t.Errorf("olivia's device cookie used for aude's throttled account = %d, want 429", s)
	}
	// A stolen device cookie has only the device's allowance: its failures
	// lock the device out, and then it is an unknown browser again.
	for i := range account.DevicePolicy.Free + 1 {
		if s := rawLogin(e.url, ownerCookie, ownerToken, "olivia", "guess"); s != http.StatusUnauthorized {
			t.Fatalf("device failure %d = %d, want 401", i+1, s)
		}
	}
	if s := rawLogin(e.url, ownerCookie, ownerToken, "olivia", rolePassword); s != http.StatusTooManyRequests {
		t.Errorf("device in backoff with the account in backoff = %d, want 429", s)
	}
}

// TestLoginThrottleFull: when the throttle keeps as many keys as it may
// and every one it could evict is needed, a login for a name that is no
// account, which would add a key, is refused with 429 before its password
// is checked, while attempts on keys it keeps go on. An account that logs
// in with a password is never refused for want of room: its own key is
// kept beyond the bound (there are as many as there are accounts) and a
// new address is then not counted. Else whoever fills the table with
// throttled keys of made-up names, six failures each from a wide IPv6
// range, shuts every person out of the console until they stop.
func TestLoginThrottleFull(t *testing.T) {
	proxies, _ := server.ParseTrustedProxies([]string{"127.0.0.1"})
	e := newConsoleEnvWith(t, func(c *envConfig) {
		c.TrustedProxies = proxies
		c.Accounts.SetThrottleRows(2)
	})
	addRoleUsers(e)
	checked := countVerifications(e)
	cookie, token := loginForm(t, e.browser())
	// A made-up name, used up from one address: two keys, one throttled.
	for i := range account.AccountPolicy.Free + 1 {
		if s := rawLogin(e.url, cookie, token, "made-up", "wrong password", "X-Forwarded-For", "203.0.113.7"); s != http.StatusUnauthorized {
			t.Fatalf("failure %d = %d, want 401", i+1, s)
		}
	}
	before := checked.Load()
	form := url.Values{"csrf": {token}, "name": {"made-up-too"}, "password": {rolePassword}}
	req, _ := http.NewRequest(http.MethodPost, e.url+"/login", strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", e.url)
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set("Cookie", cookie)
	req.Header.Set("X-Forwarded-For", "198.51.100.9")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a new name that is no account from a new address on a full throttle = %d (Retry-After %q), want 429 with Retry-After",
			resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if checked.Load() != before {
		t.Error("a refused attempt had its password checked")
	}
	// adam, a real account, from a new address: admitted, and still
	// throttled as an account is.
	if s := rawLogin(e.url, cookie, token, "adam", rolePassword, "X-Forwarded-For", "198.51.100.10"); s != http.StatusSeeOther {
		t.Errorf("adam's right password from a new address on a full throttle = %d, want 303", s)
	}
	for i := range account.AccountPolicy.Free {
		if s := rawLogin(e.url, cookie, token, "olivia", "wrong password", "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", 20+i)); s != http.StatusUnauthorized {
			t.Fatalf("olivia's failure %d on a full throttle = %d, want 401", i+1, s)
		}
	}
	if s := rawLogin(e.url, cookie, token, "olivia", "wrong password", "X-Forwarded-For", "198.51.100.30"); s != http.StatusUnauthorized {
		t.Fatalf("olivia's failure after her free ones = %d, want 401", s)
	}
	if s := rawLogin(e.url, cookie, token, "olivia", rolePassword, "X-Forwarded-For", "198.51.100.31"); s != http.StatusTooManyRequests {
		t.Errorf("olivia after her free failures, from yet another address = %d, want 429: her key is kept", s)
	}
	// The made-up name's throttled key was never evicted to make room.
	if w, err := e.c.cfg.Accounts.ThrottleWait(context.Background(), "account", "made-up"); err != nil || w <= 0 {
		t.Errorf("the made-up name waits %v (%v), want its backoff kept", w, err)
	}
}
