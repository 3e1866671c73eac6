package grant

import (
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
)

// A grant this keyring signed is accepted at redemption without checking
// its signature with Ed25519 again; the same grant presented to another
// keyring on the same keys (another process, or this one after a restart)
// is checked in full and accepted too.
func TestVerifyRemembersWhatItSigned(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, dir := MustKeyring(t, clk)
	f := newFixture(t)
	token, _ := MustMint(t, k, f)
	at := t0.Add(10 * time.Second)

	before := k.fullChecks.Load()
	if r := k.Verify(token, f.ctx, f.call, at); checksString(r) != wantChecks(9, "") {
		t.Fatalf("checks %s", checksString(r))
	}
	if n := k.fullChecks.Load() - before; n != 0 {
		t.Errorf("%d signatures checked with Ed25519 for a grant this keyring signed, want 0", n)
	}

	other, err := OpenKeyring(dir, testIssuer, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if r := other.Verify(token, f.ctx, f.call, at); checksString(r) != wantChecks(9, "") {
		t.Fatalf("another keyring on the same keys: checks %s", checksString(r))
	}
	if n := other.fullChecks.Load(); n != 1 {
		t.Errorf("another keyring checked %d signatures, want 1", n)
	}
}

// Only the exact bytes signed are remembered: a grant with its signature,
// payload or header changed is checked in full and refused, and one whose
// key may no longer verify is refused as unknown_key although it was
// signed here.
func TestVerifyMemoIsOnlyForTheBytesSigned(t *testing.T) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, kid := MustMint(t, k, f)
	at := t0.Add(10 * time.Second)
	parts := strings.Split(token, ".")

	flip := func(s string, i int) string {
		c := byte('A')
		if s[i] == 'A' {
			c = 'B'
		}
		return s[:i] + string(c) + s[i+1:]
	}
	otherToken, _ := MustMint(t, k, f) // another jti
	otherParts := strings.Split(otherToken, ".")
	for _, tc := range []struct{ name, token, reason string }{
		{"signature changed", parts[0] + "." + parts[1] + "." + flip(parts[2], 10), ReasonBadSignature},
		{"another grant's payload", parts[0] + "." + otherParts[1] + "." + parts[2], ReasonBadSignature},
		{"another grant's signature", parts[0] + "." + parts[1] + "." + otherParts[2], ReasonBadSignature},
		{"header of an unknown key id", b64.EncodeToString([]byte(ourHeader(kid+"x"))) + "." + parts[1] + "." + parts[2], ReasonUnknownKey},
	} {
		before := k.fullChecks.Load()
		r := k.Verify(tc.token, f.ctx, f.call, at)
		if got, want := checksString(r), wantChecks(1, tc.reason); got != want {
			t.Errorf("%s: checks\n got %s\nwant %s", tc.name, got, want)
		}
		if tc.reason == ReasonBadSignature && k.fullChecks.Load() != before+1 {
			t.Errorf("%s: not checked with Ed25519", tc.name)
		}
	}

	// The key rotated and retired: refused although this keyring signed it.
	if _, err := k.Rotate(); err != nil {
		t.Fatal(err)
	}
	if got, want := checksString(k.Verify(token, f.ctx, f.call, clk.Now().Add(MaxTTL))), wantChecks(1, ReasonUnknownKey); got != want {
		t.Errorf("a grant of a retired key: checks\n got %s\nwant %s", got, want)
	}
}

// The memo keeps at most two generations of memoSize grants; a grant
// forgotten is verified in full and still accepted.
func TestVerifyMemoIsBounded(t *testing.T) {
	defer func(n int) { memoSize = n }(memoSize)
	memoSize = 4
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(t, clk)
	f := newFixture(t)
	first, _ := MustMint(t, k, f)
	for range 3 * memoSize {
		MustMint(t, k, f)
	}
	if n := len(k.signedHere.cur) + len(k.signedHere.prev); n > 2*memoSize {
		t.Fatalf("the memo holds %d grants, want at most %d", n, 2*memoSize)
	}
	before := k.fullChecks.Load()
	if r := k.Verify(first, f.ctx, f.call, t0.Add(time.Second)); checksString(r) != wantChecks(9, "") {
		t.Fatalf("a forgotten grant: checks %s", checksString(r))
	}
	if k.fullChecks.Load() != before+1 {
		t.Error("a forgotten grant was not checked with Ed25519")
	}
}
