package grant

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/testkit"
)

// TestMintVerifyProperty: for any call and any lifetime up to MaxTTL, the
// grant minted for it passes every check up to time exactly while
// iat ≤ now < exp, and a context or call differing in one member fails at
// that member's check.
func TestMintVerifyProperty(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	text := rapid.StringMatching(`[\PC]{1,40}`)
	rapid.Check(t, func(rt *rapid.T) {
		ctx := Context{Actor: text.Draw(rt, "actor"), Audience: text.Draw(rt, "audience")}
		call := Presented{Tool: rapid.StringMatching(`[a-z][a-z0-9_]{0,10}(\.[a-z][a-z0-9_]{0,10}){0,2}`).Draw(rt, "tool"),
			Target: text.Draw(rt, "target")}
		n := rapid.Int64Range(-canonical.MaxInt, canonical.MaxInt).Draw(rt, "n")
		call.Args = canonical.Object{{Name: "n", Value: n}, {Name: "s", Value: text.Draw(rt, "s")}}
		digest, err := canonical.Envelope{Actor: ctx.Actor, Audience: ctx.Audience, Tool: call.Tool,
			Target: call.Target, Args: call.Args}.Digest()
		if err != nil {
			rt.Fatal(err)
		}
		ttl := rapid.Int64Range(1, 300).Draw(rt, "ttl")
		iat := t0.Unix() - rapid.Int64Range(0, 300-ttl).Draw(rt, "age")
		token, _, err := k.Mint(Claims{Subject: ctx.Actor, Audience: ctx.Audience, CallID: "call_x",
			IssuedAt: iat, ExpiresAt: iat + ttl, Tool: call.Tool, Target: call.Target, Digest: digest})
		if err != nil {
			rt.Fatal(err)
		}
		offset := time.Duration(rapid.Int64Range(-5e9, 305e9).Draw(rt, "offset"))
		now := time.Unix(iat, 0).Add(offset)
		r := k.Verify(token, ctx, call, now)
		want := wantChecks(9, "")
		switch {
		case now.Before(time.Unix(iat, 0)):
			want = wantChecks(8, ReasonNotYetValid)
		case !now.Before(time.Unix(iat+ttl, 0)):
			want = wantChecks(8, ReasonExpired)
		}
		if got := checksString(r); got != want {
			rt.Fatalf("at iat%+v (ttl %d s)\n got %s\nwant %s", offset, ttl, got, want)
		}

		inTime := time.Unix(iat, 0)
		other := Context{Actor: ctx.Actor + "x", Audience: ctx.Audience}
		if got, want := checksString(k.Verify(token, other, call, inTime)), wantChecks(3, ReasonActorMismatch); got != want {
			rt.Fatalf("other actor\n got %s\nwant %s", got, want)
		}
		moved := call
		moved.Args = canonical.Object{{Name: "n", Value: n ^ 1}, call.Args[1]}
		if got, want := checksString(k.Verify(token, ctx, moved, inTime)), wantChecks(7, ReasonDigestMismatch); got != want {
			rt.Fatalf("other args\n got %s\nwant %s", got, want)
		}
	})
}
