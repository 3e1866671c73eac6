package grant

import (
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/testkit"
)

func BenchmarkMint(b *testing.B) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(b, clk)
	f := newFixture(b)
	c := f.claims()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := k.Mint(c); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkVerify(b *testing.B) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(b, clk)
	f := newFixture(b)
	token, _ := MustMint(b, k, f)
	now := t0.Add(10 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if r := k.Verify(token, f.ctx, f.call, now); r.Reason != "" {
			b.Fatal(r.Reason)
		}
	}
}

// BenchmarkVerifyMalformed is the cost of turning away garbage.
func BenchmarkVerifyMalformed(b *testing.B) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(b, clk)
	f := newFixture(b)
	token, _ := MustMint(b, k, f)
	bad := strings.Replace(token, ".", "..", 1)
	now := t0.Add(10 * time.Second)
	b.ReportAllocs()
	for b.Loop() {
		if r := k.Verify(bad, f.ctx, f.call, now); r.Reason != ReasonMalformed {
			b.Fatal(r.Reason)
		}
	}
}

// BenchmarkDirectoryCheck is what Mint spends looking for a rotation:
// opening and locking the lock file and a stat of the index.
func BenchmarkDirectoryCheck(b *testing.B) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(b, clk)
	b.ReportAllocs()
	for b.Loop() {
		unlock, err := k.lock(lockShared)
		if err != nil {
			b.Fatal(err)
		}
		if err := k.refresh(); err != nil {
			b.Fatal(err)
		}
		unlock()
	}
}

// BenchmarkEd25519 is the floor: the signature alone.
func BenchmarkEd25519(b *testing.B) {
	clk := testkit.NewClock(t0)
	k, _ := MustKeyring(b, clk)
	f := newFixture(b)
	token, _ := MustMint(b, k, f)
	i := strings.LastIndexByte(token, '.')
	input, sig := []byte(token[:i]), dec(b, token[i+1:])
	_, priv := currentPriv(b, k)
	pub := priv.Public().(ed25519.PublicKey)
	b.Run("sign", func(b *testing.B) {
		for b.Loop() {
			ed25519.Sign(priv, input)
		}
	})
	b.Run("verify", func(b *testing.B) {
		for b.Loop() {
			if !ed25519.Verify(pub, input, sig) {
				b.Fatal("bad signature")
			}
		}
	})
}
