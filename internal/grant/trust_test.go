package grant

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
)

func writeTrust(tb testing.TB, path string, sets ...*TrustSet) {
	tb.Helper()
	b, err := json.Marshal(Merge(sets...))
	if err != nil {
		tb.Fatal(err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		tb.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		tb.Fatal(err)
	}
}

// A replica verifies another replica's grants only once the trust file
// deployed with it lists the other's key, lists that key in its JWKS, and
// stops trusting it when the file drops it.
func TestTrustFileAcrossReplicas(t *testing.T) {
	clk := testkit.NewClock(t0)
	a, _ := MustKeyring(t, clk)
	b, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, kidA := MustMint(t, a, f)
	if r := b.Verify(token, f.ctx, f.call, clk.Now()); r.Reason != ReasonUnknownKey {
		t.Fatalf("B verifies A's grant without trust: %q, want %s", r.Reason, ReasonUnknownKey)
	}
	path := filepath.Join(t.TempDir(), "trusted-keys.json")
	writeTrust(t, path, &TrustSet{Keys: a.OwnJWKs()}, &TrustSet{Keys: b.OwnJWKs()})
	if err := b.Trust(path); err != nil {
		t.Fatal(err)
	}
	if r := b.Verify(token, f.ctx, f.call, clk.Now()); r.Reason != "" {
		t.Fatalf("B with A's key in the trust file: %q, want accepted", r.Reason)
	}
	if jwks := string(b.JWKS()); !strings.Contains(jwks, kidA) || strings.Count(jwks, `"kid"`) != 2 {
		t.Fatalf("B's JWKS = %s, want its own key and A's once each", jwks)
	}
	// A forged grant under A's kid signed by another key is refused.
	c, _ := MustKeyring(t, clk)
	forged, _ := MustMint(t, c, f)
	parts := strings.SplitN(forged, ".", 2)
	hdr, _ := json.Marshal(map[string]string{"alg": Algorithm, "typ": "countersign-grant+jwt", "kid": kidA})
	if r := b.Verify(enc(hdr)+"."+parts[1], f.ctx, f.call, clk.Now()); r.Reason == "" {
		t.Fatal("a grant re-labelled with a trusted kid verified")
	}

	// The file changes: A's key is dropped, and B stops trusting it.
	writeTrust(t, path, &TrustSet{Keys: b.OwnJWKs()})
	untilReread(t, "B refuses A's grant once A's key left the trust file", func() bool {
		return b.Verify(token, f.ctx, f.call, clk.Now()).Reason == ReasonUnknownKey
	})
	// A file that no longer parses leaves the keys read before in force.
	if err := os.WriteFile(path, []byte(`{"keys":[{"kty":"RSA"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	untilReread(t, "B reports the broken trust file", func() bool { return b.TrustSet() != nil && b.TrustError() != nil })
	if b.TrustSet() == nil || len(b.TrustSet().Keys) != len(b.OwnJWKs()) {
		t.Fatalf("a broken trust file: set %v; want the set read before", b.TrustSet())
	}
	if r := b.Verify(token, f.ctx, f.call, clk.Now()); r.Reason != ReasonUnknownKey {
		t.Errorf("B with the broken file: %q, want still %s", r.Reason, ReasonUnknownKey)
	}
}

// A key of the keyring's own is judged by its own state: retired stays
// retired even when a trust file still lists it.
func TestTrustFileDoesNotRevivePrivateRetiredKeys(t *testing.T) {
	clk := testkit.NewClock(t0)
	a, _ := MustKeyring(t, clk)
	f := newFixture(t)
	token, _ := MustMint(t, a, f)
	old := a.OwnJWKs()
	if _, err := a.Rotate(); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "trusted-keys.json")
	writeTrust(t, path, &TrustSet{Keys: old})
	if err := a.Trust(path); err != nil {
		t.Fatal(err)
	}
	clk.Advance(MaxTTL + time.Second)
	if r := a.Verify(token, f.ctx, f.call, clk.Now()); r.Reason != ReasonUnknownKey {
		t.Fatalf("a retired own key listed in the trust file: %q, want %s", r.Reason, ReasonUnknownKey)
	}
}

func TestParseTrustRefuses(t *testing.T) {
	clk := testkit.NewClock(t0)
	a, _ := MustKeyring(t, clk)
	good := a.OwnJWKs()[0]
	mk := func(keys, audit []JWK) []byte {
		b, _ := json.Marshal(TrustSet{Keys: keys, AuditKeys: audit})
		return b
	}
	rsa := good
	rsa.KTY = "RSA"
	short := good
	short.X = "AAAA"
	hs := good
	hs.ALG = "HS256"
	badAudit := good // its kid is a grant kid, not the id its key implies
	for name, data := range map[string][]byte{
		"not JSON":           []byte(`{`),
		"unknown member":     []byte(`{"keys":[],"extra":1}`),
		"RSA key":            mk([]JWK{rsa}, nil),
		"short key":          mk([]JWK{short}, nil),
		"alg HS256":          mk([]JWK{hs}, nil),
		"kid twice":          mk([]JWK{good, good}, nil),
		"audit kid mismatch": mk(nil, []JWK{badAudit}),
		"two values":         []byte(`{"keys":[]} {"keys":[]}`),
	} {
		if _, err := ParseTrust(data); err == nil {
			t.Errorf("%s: ParseTrust accepted %s", name, data)
		}
	}
	aj, err := AuditJWK(good.X)
	if err != nil {
		t.Fatal(err)
	}
	ts, err := ParseTrust(mk([]JWK{good}, []JWK{aj}))
	if err != nil || len(ts.Keys) != 1 || len(ts.AuditKIDs()) != 1 {
		t.Fatalf("ParseTrust of a good file = %+v, %v", ts, err)
	}
}

// A rotation in two steps leaves no window: the next key, prepared on A
// and published in the trust file before A activates it, verifies on B
// from A's first grant under it; A's grants under the old key keep
// verifying on both.
func TestPrepareActivateAcrossReplicas(t *testing.T) {
	clk := testkit.NewClock(t0)
	a, dirA := MustKeyring(t, clk)
	b, _ := MustKeyring(t, clk)
	f := newFixture(t)
	path := filepath.Join(t.TempDir(), "trusted-keys.json")
	writeTrust(t, path, &TrustSet{Keys: a.OwnJWKs()}, &TrustSet{Keys: b.OwnJWKs()})
	if err := b.Trust(path); err != nil {
		t.Fatal(err)
	}
	before, oldKID := MustMint(t, a, f)

	next, err := a.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if next.State != StateNext || next.KID == oldKID {
		t.Fatalf("prepared key %+v, want state %s and a new kid", next, StateNext)
	}
	if again, err := a.Prepare(); err != nil || again.KID != next.KID {
		t.Fatalf("preparing again = %+v, %v; want the same key %s", again, err, next.KID)
	}
	if ks := a.Keys(); len(ks) != 2 || ks[0].KID != next.KID || ks[1].KID != oldKID || ks[1].State != StateCurrent {
		t.Fatalf("Keys after Prepare = %+v, want the next key, then the current one", ks)
	}
	if _, kid := MustMint(t, a, f); kid != oldKID {
		t.Fatalf("a grant minted while a key is prepared names %s, want the current %s", kid, oldKID)
	}
	if _, err := a.Rotate(); !errors.Is(err, ErrNextKeyPrepared) {
		t.Fatalf("Rotate while a key is prepared = %v, want ErrNextKeyPrepared", err)
	}
	if got := dirNames(t, dirA); !slices.Contains(got, next.KID+seedExt) || !slices.Contains(got, oldKID+seedExt) {
		t.Fatalf("key directory while prepared = %v, want both private keys", got)
	}
	// Another process on A's directory, and A reopened, see the prepared key.
	a2, err := OpenKeyring(dirA, testIssuer, clk.Now)
	if err != nil {
		t.Fatal(err)
	}
	if ki, ok := a2.NextKey(); !ok || ki.KID != next.KID {
		t.Fatalf("reopened: next key %+v %v", ki, ok)
	}

	// Published: the trust file now lists the next key, then A activates.
	if !strings.Contains(string(a.JWKS()), next.KID) {
		t.Fatal("A's JWKS lacks the prepared key")
	}
	writeTrust(t, path, &TrustSet{Keys: a.OwnJWKs()}, &TrustSet{Keys: b.OwnJWKs()})
	untilReread(t, "B lists the next key of the new trust file", func() bool { return strings.Contains(string(b.JWKS()), next.KID) })
	clk.Advance(time.Second)
	cur, err := a.Activate()
	if err != nil {
		t.Fatal(err)
	}
	if cur.KID != next.KID || cur.State != StateCurrent {
		t.Fatalf("Activate = %+v, want %s current", cur, next.KID)
	}
	after, kid := MustMint(t, a, f)
	if kid != next.KID {
		t.Fatalf("after Activate A signs with %s, want %s", kid, next.KID)
	}
	for name, tok := range map[string]string{"before": before, "after": after} {
		if r := b.Verify(tok, f.ctx, f.call, clk.Now()); r.Reason != "" {
			t.Errorf("B verifies A's grant from %s the activation: %q, want accepted", name, r.Reason)
		}
		if r := a.Verify(tok, f.ctx, f.call, clk.Now()); r.Reason != "" {
			t.Errorf("A verifies its grant from %s the activation: %q, want accepted", name, r.Reason)
		}
	}
	ks := a.Keys()
	if len(ks) != 2 || ks[1].KID != oldKID || ks[1].State != StateVerifying || !ks[1].RetiredAt.Equal(clk.Now().Add(MaxTTL)) {
		t.Fatalf("Keys after Activate = %+v, want the old key verifying until %v", ks, clk.Now().Add(MaxTTL))
	}
	if got := dirNames(t, dirA); slices.Contains(got, oldKID+seedExt) || !slices.Contains(got, next.KID+seedExt) {
		t.Fatalf("key directory after Activate = %v, want only the new private key", got)
	}
	if _, err := a.Activate(); !errors.Is(err, ErrNoNextKey) {
		t.Fatalf("Activate with nothing prepared = %v, want ErrNoNextKey", err)
	}
	// The other process on the directory signs with the new key too.
	if _, kid := MustMint(t, a2, f); kid != next.KID {
		t.Fatalf("another process on A's directory signs with %s, want %s", kid, next.KID)
	}
}

// untilReread waits until cond holds: the trust file is read again on the
// first look after RefreshInterval, so this takes that long at least. The
// deadline only stops a test that would never see it, however loaded the
// machine.
func untilReread(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(RefreshInterval + 30*time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("30 s after the refresh interval (%v): still waiting until %s", RefreshInterval, what)
		}
	}
}
