package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/countersign/countersign/internal/canonical"
)

// chain builds n sealed entries with varied kinds and details.
func chain(tb testing.TB, n int) []*Entry {
	tb.Helper()
	kinds := []string{KindSubmitted, KindApproved, KindGranted, KindRedeemed, KindOutcome, KindDenied}
	var out []*Entry
	prevSeq, prev := int64(0), ""
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	for i := range n {
		e := &Entry{Time: FormatTime(t0.Add(time.Duration(i) * time.Second)), Kind: kinds[i%len(kinds)],
			CallID: fmt.Sprintf("call_%03d", i/3), Principal: "agent:bot", Channel: ChannelAPI,
			Details: map[string]any{"n": int64(i), "note": fmt.Sprintf("entry %d", i), "list": []any{"a", int64(i), true, nil}}}
		if err := e.Seal(prevSeq, prev); err != nil {
			tb.Fatalf("Seal: %v", err)
		}
		prevSeq, prev = e.Seq, e.Hash
		out = append(out, e)
	}
	return out
}

func verifyAll(entries []*Entry, cps ...Checkpoint) (int64, string, error) {
	v := NewVerifier()
	for _, c := range cps {
		if err := v.AddCheckpoint(c); err != nil {
			return 0, "", err
		}
	}
	for _, e := range entries {
		if err := v.Add(e); err != nil {
			return 0, "", err
		}
	}
	return v.Finish()
}

func breakSeq(t *testing.T, err error) int64 {
	t.Helper()
	var be *BreakError
	if !errors.As(err, &be) {
		t.Fatalf("error = %v, want a *BreakError", err)
	}
	if !errors.Is(err, ErrBroken) {
		t.Errorf("error %v does not wrap ErrBroken", err)
	}
	return be.Seq
}

// TestHashContract rebuilds an entry's hash from the documented rule, by
// hand: SHA-256(raw prev_hash || JCS(entry without hash)).
func TestHashContract(t *testing.T) {
	e := &Entry{Time: "2025-03-01T12:00:00.000000000Z", Kind: KindDenied, CallID: "call_x", Principal: "op:ann",
		Channel: ChannelWeb, Details: map[string]any{"reason": "too big \u2028 <&>", "digest": "ab"}}
	if err := e.Seal(6, "11"+GenesisHash[2:]); err != nil {
		t.Fatal(err)
	}
	body := `{"call_id":"call_x","channel":"web","details":{"digest":"ab","reason":"too big ` + "\u2028" + ` <&>"},"kind":"denied",` +
		`"prev_hash":"11` + GenesisHash[2:] + `","principal":"op:ann","seq":7,"time":"2025-03-01T12:00:00.000000000Z"}`
	got, err := e.Body()
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != body {
		t.Fatalf("Body =\n%s\nwant\n%s", got, body)
	}
	prev, _ := hex.DecodeString("11" + GenesisHash[2:])
	sum := sha256.Sum256(append(prev, body...))
	if want := hex.EncodeToString(sum[:]); e.Hash != want {
		t.Errorf("Hash = %s, want %s", e.Hash, want)
	}
	if e.Seq != 7 {
		t.Errorf("Seq = %d, want 7", e.Seq)
	}
}

func TestVerifierAcceptsIntactChain(t *testing.T) {
	for _, n := range []int{0, 1, 2, 50} {
		entries := chain(t, n)
		count, head, err := verifyAll(entries)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		want := GenesisHash
		if n > 0 {
			want = entries[n-1].Hash
		}
		if count != int64(n) || head != want {
			t.Errorf("n=%d: count=%d head=%s, want %d %s", n, count, head, n, want)
		}
	}
}

func TestVerifierFindsFirstBadEntry(t *testing.T) {
	signer := testSigner(t)
	tests := []struct {
		name   string
		mutate func(es []*Entry) []*Entry
		cp     int64 // checkpoint seq signed over the intact chain, 0 for none
		want   int64
	}{
		{"details value", func(es []*Entry) []*Entry { es[4].Details = map[string]any{"n": int64(5)}; return es }, 0, 5},
		{"kind", func(es []*Entry) []*Entry { es[2].Kind = KindDenied; return es }, 0, 3},
		{"time", func(es []*Entry) []*Entry { es[9].Time = "2025-03-01T12:00:09.000000001Z"; return es }, 0, 10},
		{"principal", func(es []*Entry) []*Entry { es[0].Principal = "op:eve"; return es }, 0, 1},
		{"channel", func(es []*Entry) []*Entry { es[6].Channel = ChannelWeb; return es }, 0, 7},
		{"call id", func(es []*Entry) []*Entry { es[7].CallID = "call_999"; return es }, 0, 8},
		{"hash", func(es []*Entry) []*Entry { es[3].Hash = es[4].Hash; return es }, 0, 4},
		{"prev_hash", func(es []*Entry) []*Entry { es[3].PrevHash = GenesisHash; return es }, 0, 4},
		{"resealed entry", func(es []*Entry) []*Entry {
			es[5].Details = map[string]any{"forged": true}
			_ = es[5].Seal(es[4].Seq, es[4].Hash)
			return es
		}, 0, 7},
		{"deleted", func(es []*Entry) []*Entry { return append(es[:5:5], es[6:]...) }, 0, 6},
		{"reordered", func(es []*Entry) []*Entry { es[10], es[11] = es[11], es[10]; return es }, 0, 11},
		{"seq renumbered", func(es []*Entry) []*Entry { es[12].Seq = 14; return es }, 0, 13},
		{"first deleted", func(es []*Entry) []*Entry { return es[1:] }, 0, 1},
		{"tail after checkpoint", func(es []*Entry) []*Entry { return es[:15] }, 18, 16},
		{"all after checkpoint", func(es []*Entry) []*Entry { return nil }, 3, 1},
		{"rewritten before checkpoint", func(es []*Entry) []*Entry {
			es[16].Details = map[string]any{"forged": true}
			for i := 16; i < len(es); i++ {
				_ = es[i].Seal(es[i-1].Seq, es[i-1].Hash)
			}
			return es
		}, 18, 18},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			es := chain(t, 20)
			var cps []Checkpoint
			if tt.cp > 0 {
				c, err := signer.Sign(tt.cp, es[tt.cp-1].Hash, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				cps = append(cps, c)
			}
			_, _, err := verifyAll(tt.mutate(es), cps...)
			if got := breakSeq(t, err); got != tt.want {
				t.Errorf("first bad entry = %d, want %d (%v)", got, tt.want, err)
			}
		})
	}
}

// TestVerifierProperty: any single change to a chain is found at the entry
// changed, and an intact chain always verifies.
func TestVerifierProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(rt, "n")
		es := chain(t, n)
		i := rapid.IntRange(0, n-1).Draw(rt, "i")
		op := rapid.SampledFrom([]string{"none", "details", "kind", "time", "delete", "swap", "truncate"}).Draw(rt, "op")
		want := int64(i + 1)
		var cps []Checkpoint
		switch op {
		case "details":
			// The original details have three members; this has one.
			es[i].Details = map[string]any{"n": rapid.Int64Range(-1000, 1000).Draw(rt, "v")}
		case "kind":
			es[i].Kind += "x"
		case "time":
			es[i].Time = FormatTime(time.Unix(rapid.Int64Range(0, 1<<31).Draw(rt, "t"), 1))
		case "delete":
			es = append(es[:i:i], es[i+1:]...)
		case "swap":
			if i == n-1 {
				rt.Skip("nothing to swap with")
			}
			es[i], es[i+1] = es[i+1], es[i]
		case "truncate":
			c, err := testSigner(t).Sign(int64(n), es[n-1].Hash, time.Now())
			if err != nil {
				rt.Fatal(err)
			}
			cps = append(cps, c)
			es = es[:i]
		}
		_, _, err := verifyAll(es, cps...)
		if op == "delete" && i == n-1 {
			// Removing the newest entry leaves a shorter valid chain: only a
			// checkpoint (the "truncate" case) can expose it.
			if err != nil {
				rt.Fatalf("chain without its newest entry: %v", err)
			}
			return
		}
		if op == "none" {
			if err != nil {
				rt.Fatalf("intact chain: %v", err)
			}
			return
		}
		var be *BreakError
		if !errors.As(err, &be) {
			rt.Fatalf("%s at %d: error = %v, want a BreakError", op, i, err)
		}
		if be.Seq != want {
			rt.Fatalf("%s at %d: first bad entry = %d, want %d (%v)", op, i, be.Seq, want, err)
		}
	})
}

func TestRangeVerifier(t *testing.T) {
	es := chain(t, 30)
	signer := testSigner(t)
	before, _ := signer.Sign(5, es[4].Hash, time.Now())
	inside, _ := signer.Sign(20, es[19].Hash, time.Now())
	v := NewRangeVerifier()
	for _, c := range []Checkpoint{before, inside} {
		if err := v.AddCheckpoint(c); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range es[10:25] {
		if err := v.Add(e); err != nil {
			t.Fatal(err)
		}
	}
	count, head, err := v.Finish()
	if err != nil {
		t.Fatal(err)
	}
	first, prev := v.First()
	if count != 15 || head != es[24].Hash || first != 11 || prev != es[9].Hash {
		t.Errorf("count=%d head=%s first=%d prev=%s, want 15 %s 11 %s", count, head, first, prev, es[24].Hash, es[9].Hash)
	}
	if n, newest := v.Checkpoints(); n != 1 || newest != 20 {
		t.Errorf("Checkpoints = %d, %d; want 1, 20", n, newest)
	}

	// A range starting at 1 must start from the genesis hash.
	v = NewRangeVerifier()
	bad := *es[0]
	bad.PrevHash = es[5].Hash
	if got := breakSeq(t, v.Add(&bad)); got != 1 {
		t.Errorf("first bad entry = %d, want 1", got)
	}
}

func TestParseDetails(t *testing.T) {
	tests := []struct {
		text string
		ok   bool
	}{
		{`{}`, true},
		{`{"a":1,"b":[true,null,"x"]}`, true},
		{`{"b":1,"a":2}`, false},               // members out of order
		{`{"a": 1}`, false},                    // white space
		{`{"a":"\u0041"}`, false},              // needless escape
		{`{"a":1.0}`, false},                   // an integer written as a float
		{`{"a":1.5}`, true},                    // a number of a mirrored tool's call, canonical
		{`{"a":1.50}`, false},                  // the same, not canonical
		{`{"a":0.1000000000000000055}`, false}, // inexact
		{`{"a":1,"a":1}`, false},               // duplicate
		{`{"a":1}x`, false},                    // trailing bytes
		{`{"a":"\u00e9"}`, false},              // escaped non-ASCII
		{"{\"a\":\"\u00e9\"}", true},
	}
	for _, tt := range tests {
		_, err := ParseDetails([]byte(tt.text))
		if (err == nil) != tt.ok {
			t.Errorf("ParseDetails(%s) error = %v, want ok=%v", tt.text, err, tt.ok)
		}
	}
	// What an entry stores is exactly what its hash covers.
	e := chain(t, 1)[0]
	stored, err := canonical.Encode(e.Details)
	if err != nil {
		t.Fatal(err)
	}
	v, err := ParseDetails(stored)
	if err != nil {
		t.Fatal(err)
	}
	back := *e
	back.Details = v
	if h, _ := back.ComputeHash(); h != e.Hash {
		t.Errorf("hash after a round trip through storage = %s, want %s", h, e.Hash)
	}
}

// TestRawDetailsBody: hashing the stored text gives the same hash as
// hashing the value, and any change to the text changes it.
func TestRawDetailsBody(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		e := &Entry{Time: FormatTime(time.Unix(rapid.Int64Range(0, 1<<33).Draw(rt, "t"), 0)),
			Kind: rapid.String().Draw(rt, "kind"), CallID: rapid.String().Draw(rt, "call"),
			Principal: rapid.String().Draw(rt, "who"), Channel: rapid.String().Draw(rt, "ch"),
			Details: map[string]any{rapid.String().Draw(rt, "k"): rapid.String().Draw(rt, "v"),
				"list": []any{rapid.Int64Range(-1<<53+1, 1<<53-1).Draw(rt, "n"), nil, false}}}
		if err := e.Seal(rapid.Int64Range(0, 1<<40).Draw(rt, "seq"), ""); err != nil {
			rt.Fatal(err)
		}
		text, err := canonical.Encode(e.Details)
		if err != nil {
			rt.Fatal(err)
		}
		raw := *e
		raw.Details = RawDetails(text)
		if h, err := raw.ComputeHash(); err != nil || h != e.Hash {
			rt.Fatalf("hash over the stored text = %s, %v; want %s", h, err, e.Hash)
		}
		i := rapid.IntRange(0, len(text)-1).Draw(rt, "i")
		changed := append([]byte(nil), text...)
		changed[i] ^= byte(rapid.IntRange(1, 255).Draw(rt, "x"))
		raw.Details = RawDetails(changed)
		if h, _ := raw.ComputeHash(); h == e.Hash {
			rt.Fatalf("byte %d of the details changed and the hash did not", i)
		}
	})
}
