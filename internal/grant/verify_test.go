package grant

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/json"
	"fmt"
	"hash"
	"strings"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/testkit"
)

// verifyCase is one token presented in one context at one time, and the
// full list of checks it must produce.
type verifyCase struct {
	name   string
	token  string
	ctx    *Context   // nil: the fixture's
	call   *Presented // nil: the fixture's
	now    time.Time  // zero: t0 + 10 s
	passed int        // checks that pass before the failing one
	reason string     // "" when all checks up to time pass
}

func runVerifyCases(t *testing.T, k *Keyring, f fixture, cases []verifyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx, call, now := f.ctx, f.call, tc.now
			if tc.ctx != nil {
				ctx = *tc.ctx
			}
			if tc.call != nil {
				call = *tc.call
			}
			if now.IsZero() {
				now = t0.Add(10 * time.Second)
			}
			r := k.Verify(tc.token, ctx, call, now)
			if got, want := checksString(r), wantChecks(tc.passed, tc.reason); got != want {
				t.Errorf("checks\n got %s\nwant %s", got, want)
			}
			if r.Accepted() {
				t.Error("Accepted() = true before status and nonce ran")
			}
			if got, want := r.Claims != nil, tc.passed >= 3; got != want {
				t.Errorf("Claims set = %v, want %v", got, want)
			}
		})
	}
}

func TestVerifyAcceptsTheMintedGrant(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, kid := MustMint(t, k, f)

	r := k.Verify(token, f.ctx, f.call, t0.Add(10*time.Second))
	if got, want := checksString(r), wantChecks(9, ""); got != want {
		t.Fatalf("checks\n got %s\nwant %s", got, want)
	}
	want := f.claims()
	want.Issuer, want.IssuedAt, want.ExpiresAt = testIssuer, t0.Unix(), t0.Unix()+300
	want.JTI = r.Claims.JTI
	if *r.Claims != want {
		t.Errorf("Claims = %+v, want %+v", *r.Claims, want)
	}
	if !isJTI(r.Claims.JTI) {
		t.Errorf("jti = %q, want 32 lowercase hex digits", r.Claims.JTI)
	}
	parts := strings.Split(token, ".")
	if got, want := string(dec(t, parts[0])), ourHeader(kid); got != want {
		t.Errorf("header = %s, want %s", got, want)
	}

	// The ledger completes the list.
	r.Set(StepStatus, true, "")
	if r.Accepted() {
		t.Error("Accepted() = true with nonce not reached")
	}
	accepted := r
	accepted.Checks = append([]Check(nil), r.Checks...)
	accepted.Set(StepNonce, true, "")
	if !accepted.Accepted() {
		t.Errorf("Accepted() = false with %s", checksString(accepted))
	}
	r.Set(StepNonce, false, ReasonReplayed)
	if got, want := checksString(r), wantChecks(10, ReasonReplayed); got != want {
		t.Errorf("checks\n got %s\nwant %s", got, want)
	}
	if r.Accepted() {
		t.Error("Accepted() = true for a replay")
	}
	r2 := k.Verify(token, f.ctx, f.call, t0.Add(10*time.Second))
	r2.Set(StepStatus, false, ReasonRevoked)
	if got, want := checksString(r2), wantChecks(9, ReasonRevoked); got != want {
		t.Errorf("checks\n got %s\nwant %s", got, want)
	}
}

func TestResultJSON(t *testing.T) {
	r := NewResult()
	r.Set(StepShape, true, "")
	r.Set(StepSignature, false, ReasonUnknownKey)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"checks":[{"name":"shape","ok":true},{"name":"signature","ok":false},{"name":"claims","ok":null},` +
		`{"name":"actor","ok":null},{"name":"audience","ok":null},{"name":"tool","ok":null},{"name":"target","ok":null},` +
		`{"name":"digest","ok":null},{"name":"time","ok":null},{"name":"status","ok":null},{"name":"nonce","ok":null}],` +
		`"reason":"unknown_key"}`
	if string(b) != want {
		t.Errorf("JSON\n got %s\nwant %s", b, want)
	}
	if got, want := CheckNames(), allChecks; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("CheckNames() = %v, want %v", got, want)
	}
}

func TestVerifyTamperedClaimsBreakTheSignature(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, _ := MustMint(t, k, f)
	parts := strings.Split(token, ".")
	claims := payloadOf(t, token)

	var cases []verifyCase
	for _, m := range claims {
		var v any
		switch x := m.Value.(type) {
		case int64:
			v = x + 1
		case string:
			// Keep the claim well-formed, so that only the signature can
			// tell: flip the last character within its alphabet.
			last := x[len(x)-1]
			nl := byte('0')
			if last == '0' {
				nl = '1'
			}
			v = x[:len(x)-1] + string(nl)
		}
		payload := mustEncode(t, with(claims, m.Name, v))
		cases = append(cases, verifyCase{name: "claim " + m.Name,
			token: parts[0] + "." + enc([]byte(payload)) + "." + parts[2], passed: 1, reason: ReasonBadSignature})
	}
	if len(cases) != 10 {
		t.Fatalf("minted %d claims, want 10", len(cases))
	}
	sig := dec(t, parts[2])
	sig[0] ^= 1
	cases = append(cases,
		verifyCase{name: "flipped signature bit", token: parts[0] + "." + parts[1] + "." + enc(sig),
			passed: 1, reason: ReasonBadSignature},
		verifyCase{name: "same claims, other spacing",
			token:  parts[0] + "." + enc([]byte(strings.Replace(string(dec(t, parts[1])), ",", ", ", 1))) + "." + parts[2],
			passed: 1, reason: ReasonBadSignature},
	)
	runVerifyCases(t, k, f, cases)
}

func TestVerifyForeignKeysAndAlgorithms(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, kid := MustMint(t, k, f)
	parts := strings.Split(token, ".")
	payload := string(dec(t, parts[1]))
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := k.keys[0].pub
	hmacToken := func(alg string, sum func() hash.Hash) string {
		input := enc([]byte(`{"alg":"`+alg+`","typ":"countersign-grant+jwt","kid":"`+kid+`"}`)) + "." + parts[1]
		m := hmac.New(sum, pub)
		m.Write([]byte(input))
		return input + "." + enc(m.Sum(nil))
	}

	runVerifyCases(t, k, f, []verifyCase{
		{name: "unknown kid, other key", token: signRaw(ourHeader("AAAAAAAAAAAAAAAA"), payload, other),
			passed: 1, reason: ReasonUnknownKey},
		{name: "our kid, other key", token: signRaw(ourHeader(kid), payload, other),
			passed: 1, reason: ReasonBadSignature},
		{name: "kid ../../x", token: signRaw(ourHeader("../../x"), payload, other),
			passed: 1, reason: ReasonUnknownKey},
		{name: "kid path to our key", token: signRaw(ourHeader("../keys/"+kid), payload, other),
			passed: 1, reason: ReasonUnknownKey},
		{name: "empty kid", token: signRaw(ourHeader(""), payload, other), passed: 1, reason: ReasonUnknownKey},
		{name: "kid with a space", token: signRaw(ourHeader(kid+" "), payload, other), passed: 1, reason: ReasonUnknownKey},
		{name: "kid of 65 characters", token: signRaw(ourHeader(strings.Repeat("a", 65)), payload, other),
			passed: 1, reason: ReasonUnknownKey},
		{name: "alg none, empty signature",
			token:  enc([]byte(`{"alg":"none","typ":"countersign-grant+jwt","kid":"`+kid+`"}`)) + "." + parts[1] + ".",
			reason: ReasonMalformed},
		{name: "alg none, no kid", token: enc([]byte(`{"alg":"none"}`)) + "." + parts[1] + ".", reason: ReasonMalformed},
		{name: "alg none, our signature",
			token:  enc([]byte(`{"alg":"none","typ":"countersign-grant+jwt","kid":"`+kid+`"}`)) + "." + parts[1] + "." + parts[2],
			reason: ReasonMalformed},
		{name: "HS256 with the public key as secret", token: hmacToken("HS256", sha256.New), reason: ReasonMalformed},
		// HS512 has a 64-byte MAC, the size of an Ed25519 signature: only
		// the pinned algorithm stops it.
		{name: "HS512 with the public key as secret", token: hmacToken("HS512", sha512.New), reason: ReasonMalformed},
		{name: "alg Ed25519", token: signRaw(`{"alg":"Ed25519","typ":"countersign-grant+jwt","kid":"`+kid+`"}`, payload, k.keys[0].priv),
			reason: ReasonMalformed},
		{name: "alg ES256", token: signRaw(`{"alg":"ES256","typ":"countersign-grant+jwt","kid":"`+kid+`"}`, payload, k.keys[0].priv),
			reason: ReasonMalformed},
	})
}

func TestVerifyHeaderMembers(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, kid := MustMint(t, k, f)
	payload := string(dec(t, strings.Split(token, ".")[1]))
	_, priv := currentPriv(t, k)
	otherPub, _, _ := ed25519.GenerateKey(rand.Reader)
	jwk := `{"kty":"OKP","crv":"Ed25519","x":"` + enc(otherPub) + `"}`
	base := `"alg":"EdDSA","typ":"countersign-grant+jwt","kid":"` + kid + `"`

	// Every header here is validly signed by our own key: only the header
	// rule refuses them.
	var cases []verifyCase
	for _, extra := range []string{
		`"jwk":` + jwk,
		`"jku":"https://attacker.example/keys"`,
		`"x5u":"https://attacker.example/cert"`,
		`"x5c":["MIIB"]`,
		`"crit":["exp"]`,
		`"b64":false`,
		`"cty":"JWT"`,
		`"zip":"DEF"`,
		`"foo":"bar"`,
		`"kid":"` + kid + `"`, // duplicate
		`"alg":"none"`,        // duplicate
	} {
		name := "extra " + extra
		if len(name) > 40 {
			name = name[:40]
		}
		cases = append(cases, verifyCase{name: name, token: signRaw("{"+base+","+extra+"}", payload, priv),
			reason: ReasonMalformed})
	}
	cases = append(cases,
		verifyCase{name: "typ JWT", token: signRaw(`{"alg":"EdDSA","typ":"JWT","kid":"`+kid+`"}`, payload, priv),
			reason: ReasonMalformed},
		verifyCase{name: "no typ", token: signRaw(`{"alg":"EdDSA","kid":"`+kid+`"}`, payload, priv),
			reason: ReasonMalformed},
		verifyCase{name: "no kid", token: signRaw(`{"alg":"EdDSA","typ":"countersign-grant+jwt"}`, payload, priv),
			reason: ReasonMalformed},
		verifyCase{name: "no alg", token: signRaw(`{"typ":"countersign-grant+jwt","kid":"`+kid+`"}`, payload, priv),
			reason: ReasonMalformed},
		verifyCase{name: "kid a number", token: signRaw(`{"alg":"EdDSA","typ":"countersign-grant+jwt","kid":7}`, payload, priv),
			reason: ReasonMalformed},
		verifyCase{name: "alg an array", token: signRaw(`{"alg":["EdDSA"],"typ":"countersign-grant+jwt","kid":"`+kid+`"}`, payload, priv),
			reason: ReasonMalformed},
		verifyCase{name: "header an array", token: signRaw(`["EdDSA"]`, payload, priv), reason: ReasonMalformed},
		verifyCase{name: "header not JSON", token: signRaw(`alg=EdDSA`, payload, priv), reason: ReasonMalformed},
		verifyCase{name: "header invalid UTF-8", token: signRaw("{\"alg\":\"EdDSA\",\"typ\":\"countersign-grant+jwt\",\"kid\":\""+kid+"\xff\"}", payload, priv),
			reason: ReasonMalformed},
		// Member order and white space are not part of the rule.
		verifyCase{name: "members reordered, spaced",
			token:  signRaw(`{ "kid" : "`+kid+`", "typ":"countersign-grant+jwt", "alg":"EdDSA" }`, payload, priv),
			passed: 9},
	)
	runVerifyCases(t, k, f, cases)
}

func TestVerifyClaims(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, kid := MustMint(t, k, f)
	claims := payloadOf(t, token)
	_, priv := currentPriv(t, k)
	signed := func(payload string) string { return signRaw(ourHeader(kid), payload, priv) }
	signedObj := func(o canonical.Object) string { return signed(mustEncode(t, o)) }
	iat := t0.Unix()
	iats := fmt.Sprintf(`"iat":%d`, iat)
	exps := fmt.Sprintf(`"exp":%d`, iat+300)

	cases := []verifyCase{
		{name: "re-signed unchanged", token: signedObj(claims), passed: 9},
		{name: "extra claim nbf", token: signedObj(with(claims, "nbf", iat)), passed: 2, reason: ReasonBadClaims},
		{name: "extra claim rationale", token: signedObj(with(claims, "rationale", "trust me")), passed: 2, reason: ReasonBadClaims},
		{name: "iat a string", token: signedObj(with(claims, "iat", "1893553445")), passed: 2, reason: ReasonBadClaims},
		{name: "exp a boolean", token: signedObj(with(claims, "exp", true)), passed: 2, reason: ReasonBadClaims},
		{name: "sub a number", token: signedObj(with(claims, "sub", int64(5))), passed: 2, reason: ReasonBadClaims},
		{name: "aud an array", token: signedObj(with(claims, "aud", []any{f.ctx.Audience})), passed: 2, reason: ReasonBadClaims},
		{name: "tool null", token: signedObj(with(claims, "tool", nil)), passed: 2, reason: ReasonBadClaims},
		{name: "target an object", token: signedObj(with(claims, "target", canonical.Object{})), passed: 2, reason: ReasonBadClaims},
		{name: "exp with exponent", token: signed(strings.Replace(mustEncode(t, claims), exps, exps+"e0", 1)), passed: 2, reason: ReasonBadClaims},
		{name: "iat with fraction", token: signed(strings.Replace(mustEncode(t, claims), iats, iats+".0", 1)), passed: 2, reason: ReasonBadClaims},
		{name: "duplicate sub", token: signed(strings.Replace(mustEncode(t, claims), `"sub":`, `"sub":"operator:alice","sub":`, 1)), passed: 2, reason: ReasonBadClaims},
		{name: "lifetime 301 s", token: signedObj(with(claims, "exp", iat+301)), passed: 2, reason: ReasonBadClaims},
		{name: "lifetime 300 s", token: signedObj(with(claims, "exp", iat+300)), passed: 9},
		{name: "lifetime 0 s", token: signedObj(with(claims, "exp", iat)), passed: 2, reason: ReasonBadClaims},
		{name: "exp before iat", token: signedObj(with(claims, "exp", iat-1)), passed: 2, reason: ReasonBadClaims},
		{name: "other issuer", token: signedObj(with(claims, "iss", "someone-else")), passed: 2, reason: ReasonBadClaims},
		{name: "jti too short", token: signedObj(with(claims, "jti", "0123456789abcdef")), passed: 2, reason: ReasonBadClaims},
		{name: "jti upper case", token: signedObj(with(claims, "jti", strings.Repeat("AB", 16))), passed: 2, reason: ReasonBadClaims},
		{name: "digest upper case", token: signedObj(with(claims, "digest", strings.ToUpper(f.digest))), passed: 2, reason: ReasonBadClaims},
		{name: "empty sub", token: signedObj(with(claims, "sub", "")), passed: 2, reason: ReasonBadClaims},
		{name: "payload an array", token: signed(`[1,2]`), passed: 2, reason: ReasonBadClaims},
		{name: "payload not JSON", token: signed(`iss=countersign`), passed: 2, reason: ReasonBadClaims},
		{name: "payload two objects", token: signed(mustEncode(t, claims) + "{}"), passed: 2, reason: ReasonBadClaims},
	}
	for _, m := range claims {
		cases = append(cases, verifyCase{name: "missing " + m.Name, token: signedObj(without(claims, m.Name)),
			passed: 2, reason: ReasonBadClaims})
	}
	runVerifyCases(t, k, f, cases)
}

func TestVerifyBindsTheCall(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, _ := MustMint(t, k, f)
	exp := t0.Add(MaxTTL)
	call := func(edit func(*Presented)) *Presented {
		c := f.call
		edit(&c)
		return &c
	}

	runVerifyCases(t, k, f, []verifyCase{
		{name: "other actor", token: token, ctx: &Context{Actor: "agent:other-bot", Audience: f.ctx.Audience},
			passed: 3, reason: ReasonActorMismatch},
		{name: "actor differs in case", token: token, ctx: &Context{Actor: "Agent:billing-bot", Audience: f.ctx.Audience},
			passed: 3, reason: ReasonActorMismatch},
		{name: "other audience", token: token, ctx: &Context{Actor: f.ctx.Actor, Audience: "crm-host"},
			passed: 4, reason: ReasonAudienceMismatch},
		{name: "other tool", token: token, call: call(func(c *Presented) { c.Tool = "payments.charge" }),
			passed: 5, reason: ReasonToolMismatch},
		{name: "other target", token: token, call: call(func(c *Presented) { c.Target = "cus_43" }),
			passed: 6, reason: ReasonTargetMismatch},
		{name: "changed argument", token: token,
			call:   call(func(c *Presented) { c.Args = with(c.Args, "amount", int64(1251)) }),
			passed: 7, reason: ReasonDigestMismatch},
		{name: "extra argument", token: token,
			call:   call(func(c *Presented) { c.Args = with(c.Args, "reverse_fee", true) }),
			passed: 7, reason: ReasonDigestMismatch},
		{name: "missing argument", token: token,
			call:   call(func(c *Presented) { c.Args = without(c.Args, "note") }),
			passed: 7, reason: ReasonDigestMismatch},
		{name: "nil args", token: token, call: call(func(c *Presented) { c.Args = nil }),
			passed: 7, reason: ReasonDigestMismatch},
		{name: "argument not encodable", token: token,
			call:   call(func(c *Presented) { c.Args = with(c.Args, "amount", 12.5) }),
			passed: 7, reason: ReasonDigestMismatch},
		{name: "before iat", token: token, now: t0.Add(-time.Second), passed: 8, reason: ReasonNotYetValid},
		{name: "1 ns before iat", token: token, now: t0.Add(-time.Nanosecond), passed: 8, reason: ReasonNotYetValid},
		{name: "at iat", token: token, now: t0, passed: 9},
		{name: "at exp - 1 s", token: token, now: exp.Add(-time.Second), passed: 9},
		{name: "at exp - 1 ns", token: token, now: exp.Add(-time.Nanosecond), passed: 9},
		{name: "at exp", token: token, now: exp, passed: 8, reason: ReasonExpired},
		{name: "long after exp", token: token, now: exp.Add(time.Hour), passed: 8, reason: ReasonExpired},
	})
}

func TestCheckTime(t *testing.T) {
	c := &Claims{IssuedAt: 1000, ExpiresAt: 1300}
	tests := []struct {
		now    time.Time
		ok     bool
		reason string
	}{
		{time.Unix(999, 999999999), false, ReasonNotYetValid},
		{time.Unix(1000, 0), true, ""},
		{time.Unix(1299, 999999999), true, ""},
		{time.Unix(1300, 0), false, ReasonExpired},
	}
	for _, tt := range tests {
		ok, reason := CheckTime(c, tt.now)
		if ok != tt.ok || reason != tt.reason {
			t.Errorf("CheckTime(%v) = %v, %q, want %v, %q", tt.now, ok, reason, tt.ok, tt.reason)
		}
	}
}

func TestVerifyMalformed(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, kid := MustMint(t, k, f)
	parts := strings.Split(token, ".")
	h, p, s := parts[0], parts[1], parts[2]
	_, priv := currentPriv(t, k)
	payload := string(dec(t, p))
	sig := dec(t, s)

	// A signature segment whose unused trailing bits are not zero decodes
	// to the same bytes under a lax decoder.
	last := s[len(s)-1]
	laxLast := strings.IndexByte(b64Alphabet, last) | 1
	if b64Alphabet[laxLast] == last {
		laxLast ^= 2
	}

	runVerifyCases(t, k, f, []verifyCase{
		{name: "empty", token: "", reason: ReasonMalformed},
		{name: "two segments", token: h + "." + p, reason: ReasonMalformed},
		{name: "four segments", token: token + "." + s, reason: ReasonMalformed},
		{name: "trailing dot", token: token + ".", reason: ReasonMalformed},
		{name: "empty header", token: "." + p + "." + s, reason: ReasonMalformed},
		{name: "empty payload", token: h + ".." + s, reason: ReasonMalformed},
		{name: "empty signature", token: h + "." + p + ".", reason: ReasonMalformed},
		{name: "bad base64 +", token: h + "." + p[:4] + "+" + p[5:] + "." + s, reason: ReasonMalformed},
		{name: "bad base64 /", token: h + "." + p + "." + s[:4] + "/" + s[5:], reason: ReasonMalformed},
		{name: "bad base64 *", token: h[:3] + "*" + h[4:] + "." + p + "." + s, reason: ReasonMalformed},
		{name: "padding", token: h + "." + p + "." + s + "==", reason: ReasonMalformed},
		{name: "padded header", token: h + "=." + p + "." + s, reason: ReasonMalformed},
		{name: "newline in payload", token: h + "." + p[:8] + "\n" + p[8:] + "." + s, reason: ReasonMalformed},
		{name: "leading space", token: " " + token, reason: ReasonMalformed},
		{name: "trailing newline", token: token + "\n", reason: ReasonMalformed},
		{name: "non-zero trailing bits", token: h + "." + p + "." + s[:len(s)-1] + string(b64Alphabet[laxLast]), reason: ReasonMalformed},
		{name: "signature 63 bytes", token: h + "." + p + "." + enc(sig[:63]), reason: ReasonMalformed},
		{name: "signature 65 bytes", token: h + "." + p + "." + enc(append(sig, 0)), reason: ReasonMalformed},
		{name: "duplicate member in header",
			token:  signRaw(`{"alg":"EdDSA","typ":"countersign-grant+jwt","kid":"`+kid+`","kid":"`+kid+`"}`, payload, priv),
			reason: ReasonMalformed},
		{name: "duplicate member spelled with an escape",
			token:  signRaw(`{"alg":"EdDSA","typ":"countersign-grant+jwt","kid":"`+kid+`","\u006bid":"x"}`, payload, priv),
			reason: ReasonMalformed},
		{name: "too long", token: h + "." + enc(make([]byte, MaxTokenBytes)) + "." + s, reason: ReasonMalformed},
		{name: "JSON instead of compact", token: `{"protected":"` + h + `","payload":"` + p + `","signature":"` + s + `"}`,
			reason: ReasonMalformed},
	})
}

const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

// TestJWKSVerifiesWithGoJose checks a grant the way an executor in another
// runtime would: with a stock JOSE library, the published key set and
// EdDSA pinned.
func TestJWKSVerifiesWithGoJose(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, _ := MustMint(t, k, f)

	var set jose.JSONWebKeySet
	if err := json.Unmarshal(k.JWKS(), &set); err != nil {
		t.Fatalf("JWKS does not parse as a JSON Web Key Set: %v", err)
	}
	jws, err := jose.ParseSignedCompact(token, []jose.SignatureAlgorithm{jose.EdDSA})
	if err != nil {
		t.Fatal(err)
	}
	payload, err := jws.Verify(&set)
	if err != nil {
		t.Fatalf("Verify with the JWKS: %v", err)
	}
	if got, want := string(payload), string(dec(t, strings.Split(token, ".")[1])); got != want {
		t.Errorf("payload = %s, want %s", got, want)
	}
}
