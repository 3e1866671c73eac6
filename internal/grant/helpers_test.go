package grant

import (
	"crypto/ed25519"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/testkit"
)

const testIssuer = "countersign"

// t0 is the start of every test clock: a whole second, so that iat is
// exactly the clock.
var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// MustKeyring opens a keyring in a fresh directory on clk.
func MustKeyring(tb testing.TB, clk *testkit.Clock) (*Keyring, string) {
	tb.Helper()
	dir := tb.TempDir() + "/keys"
	k, err := OpenKeyring(dir, testIssuer, clk.Now)
	if err != nil {
		tb.Fatalf("OpenKeyring: %v", err)
	}
	return k, dir
}

// MustParseObject parses a JSON object strictly.
func MustParseObject(tb testing.TB, s string) canonical.Object {
	tb.Helper()
	v, err := canonical.Parse([]byte(s))
	if err != nil {
		tb.Fatalf("parse %s: %v", s, err)
	}
	return v.(canonical.Object)
}

// fixture is one approved call and the context that redeems it.
type fixture struct {
	ctx    Context
	call   Presented
	digest string
}

func newFixture(tb testing.TB) fixture {
	tb.Helper()
	f := fixture{
		ctx: Context{Actor: "agent:billing-bot", Audience: "payments-host"},
		call: Presented{Tool: "payments.refund", Target: "cus_42",
			Args: MustParseObject(tb, `{"amount":1250,"currency":"EUR","note":"duplicate charge"}`)},
	}
	d, err := canonical.Envelope{Actor: f.ctx.Actor, Audience: f.ctx.Audience, Tool: f.call.Tool,
		Target: f.call.Target, Args: f.call.Args}.Digest()
	if err != nil {
		tb.Fatal(err)
	}
	f.digest = d
	return f
}

func (f fixture) claims() Claims {
	return Claims{Subject: f.ctx.Actor, Audience: f.ctx.Audience, CallID: "call_01",
		Tool: f.call.Tool, Target: f.call.Target, Digest: f.digest}
}

// MustMint mints the fixture's grant at the keyring's clock.
func MustMint(tb testing.TB, k *Keyring, f fixture) (token, kid string) {
	tb.Helper()
	token, kid, err := k.Mint(f.claims())
	if err != nil {
		tb.Fatalf("Mint: %v", err)
	}
	return token, kid
}

// currentPriv returns the keyring's signing key.
func currentPriv(tb testing.TB, k *Keyring) (string, ed25519.PrivateKey) {
	tb.Helper()
	k.mu.RLock()
	defer k.mu.RUnlock()
	cur := k.current()
	if cur.priv == nil {
		tb.Fatal("no signing key")
	}
	return cur.kid, cur.priv
}

func enc(b []byte) string { return base64.RawURLEncoding.EncodeToString(b) }

func dec(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		tb.Fatalf("decode %q: %v", s, err)
	}
	return b
}

// signRaw signs any header and payload bytes with priv, the way a forger
// holding the key (or a test) would.
func signRaw(header, payload string, priv ed25519.PrivateKey) string {
	return signCompact([]byte(header), []byte(payload), priv)
}

// ourHeader is the header a grant of kid carries.
func ourHeader(kid string) string {
	return `{"alg":"EdDSA","typ":"countersign-grant+jwt","kid":"` + kid + `"}`
}

// payloadOf returns a minted token's claims as a parsed object.
func payloadOf(tb testing.TB, token string) canonical.Object {
	tb.Helper()
	parts := strings.Split(token, ".")
	return MustParseObject(tb, string(dec(tb, parts[1])))
}

// with returns o with the member name set to v (added when missing).
func with(o canonical.Object, name string, v any) canonical.Object {
	out := make(canonical.Object, 0, len(o)+1)
	for _, m := range o {
		if m.Name != name {
			out = append(out, m)
		}
	}
	out = append(out, canonical.Member{Name: name, Value: v})
	o2, err := canonical.NewObject(out...)
	if err != nil {
		panic(err)
	}
	return o2
}

// without returns o without the member name.
func without(o canonical.Object, name string) canonical.Object {
	out := make(canonical.Object, 0, len(o))
	for _, m := range o {
		if m.Name != name {
			out = append(out, m)
		}
	}
	return out
}

func mustEncode(tb testing.TB, v any) string {
	tb.Helper()
	b, err := canonical.Encode(v)
	if err != nil {
		tb.Fatal(err)
	}
	return string(b)
}

// checksString spells a Result's checks and reason in one line, so that a
// test compares the whole list at once.
func checksString(r Result) string {
	var b strings.Builder
	for i, c := range r.Checks {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case c.OK == nil:
			fmt.Fprintf(&b, "%s:null", c.Name)
		default:
			fmt.Fprintf(&b, "%s:%t", c.Name, *c.OK)
		}
	}
	fmt.Fprintf(&b, " reason=%q", r.Reason)
	return b.String()
}

// allChecks is DESIGN §6's list, spelled out here rather than taken from
// the package.
var allChecks = []string{"shape", "signature", "claims", "actor", "audience", "tool", "target",
	"digest", "time", "status", "nonce"}

// wantChecks spells the expected list: the first passed checks true, then
// (when reason is set) one false, the rest null.
func wantChecks(passed int, reason string) string {
	var b strings.Builder
	for i, n := range allChecks {
		if i > 0 {
			b.WriteByte(' ')
		}
		switch {
		case i < passed:
			fmt.Fprintf(&b, "%s:true", n)
		case i == passed && reason != "":
			fmt.Fprintf(&b, "%s:false", n)
		default:
			fmt.Fprintf(&b, "%s:null", n)
		}
	}
	fmt.Fprintf(&b, " reason=%q", reason)
	return b.String()
}
