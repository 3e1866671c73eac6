package grant

import (
	"crypto/ed25519"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
)

// reasonsOf lists the reasons each check may give.
var reasonsOf = map[string][]string{
	"shape":     {ReasonMalformed},
	"signature": {ReasonUnknownKey, ReasonBadSignature},
	"claims":    {ReasonBadClaims},
	"actor":     {ReasonActorMismatch},
	"audience":  {ReasonAudienceMismatch},
	"tool":      {ReasonToolMismatch},
	"target":    {ReasonTargetMismatch},
	"digest":    {ReasonDigestMismatch},
	"time":      {ReasonNotYetValid, ReasonExpired},
}

// FuzzVerify feeds arbitrary strings to Verify. It must not panic, must
// report the checks in order (passes, then at most one failure with a
// reason of that check, then not reached), must leave status and nonce to
// the ledger, never accept, and never pass the signature check for a token
// it did not mint.
func FuzzVerify(f *testing.F) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(f, clk)
	fx := newFixture(f)
	minted := map[string]bool{}
	mint := func(c Claims) string {
		token, _, err := k.Mint(c)
		if err != nil {
			f.Fatal(err)
		}
		minted[token] = true
		return token
	}
	valid := mint(fx.claims())
	other := fx.claims()
	other.Subject = "agent:other-bot"
	mint(other)
	parts := strings.Split(valid, ".")
	kid, priv := currentPriv(f, k)
	_, foreign, _ := ed25519.GenerateKey(nil)
	payload := string(dec(f, parts[1]))
	// Tokens signed here with our key count as minted too.
	ours := func(token string) string {
		minted[token] = true
		return token
	}

	for _, s := range []string{
		valid,
		mint(other),
		parts[0] + "." + parts[1],
		valid + "." + parts[2],
		parts[0] + "." + parts[1] + ".",
		enc([]byte(`{"alg":"none","typ":"countersign-grant+jwt","kid":"`+kid+`"}`)) + "." + parts[1] + ".",
		signRaw(ourHeader(kid), payload, foreign),
		signRaw(ourHeader("../../x"), payload, foreign),
		ours(signRaw(`{"alg":"EdDSA","typ":"countersign-grant+jwt","kid":"`+kid+`","jwk":{}}`, payload, priv)),
		ours(signRaw(ourHeader(kid), `{"iss":"countersign"}`, priv)),
		"", ".", "..", "a.b.c", "====.====.====",
	} {
		f.Add(s)
	}
	now := t0.Add(10 * time.Second)
	names := CheckNames()

	f.Fuzz(func(t *testing.T, token string) {
		r := k.Verify(token, fx.ctx, fx.call, now)
		if r.Accepted() {
			t.Fatalf("Verify accepted %q", token)
		}
		if len(r.Checks) != len(names) {
			t.Fatalf("%d checks, want %d", len(r.Checks), len(names))
		}
		phase, failed := 0, false // phase 0 passing, 1 failed, 2 not reached
		for i, c := range r.Checks {
			if c.Name != names[i] {
				t.Fatalf("check %d is %q, want %q", i, c.Name, names[i])
			}
			switch {
			case c.OK != nil && *c.OK && phase == 0:
			case c.OK != nil && !*c.OK && phase == 0:
				phase, failed = 1, true
				if !slices.Contains(reasonsOf[c.Name], r.Reason) {
					t.Fatalf("check %s failed with reason %q", c.Name, r.Reason)
				}
			case c.OK == nil:
				phase = 2
			default:
				t.Fatalf("checks out of order: %s", checksString(r))
			}
		}
		if failed != (r.Reason != "") {
			t.Fatalf("reason %q with %s", r.Reason, checksString(r))
		}
		if r.Get(StepStatus) != nil || r.Get(StepNonce) != nil {
			t.Fatalf("status or nonce set by Verify: %s", checksString(r))
		}
		if ok := r.Get(StepSignature); ok != nil && *ok && !minted[token] {
			t.Fatalf("signature check passed for a token that was never minted: %q", token)
		}
		if ok := r.Get(StepClaims); (ok != nil && *ok) != (r.Claims != nil) {
			t.Fatalf("Claims = %v with %s", r.Claims, checksString(r))
		}
	})
}
