package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/countersign/countersign/internal/canonical"
)

// TestSealTextIsTheHashedText: SealText returns the details as the text
// that was hashed, and hashes as the documented rule does (by hand:
// SHA-256(raw prev_hash || JCS(entry without hash)), the whole entry
// encoded as a map), for details given as values, as stored text and as
// none; prev_hash in uppercase hex reads as lowercase does.
func TestSealTextIsTheHashedText(t *testing.T) {
	prev := "A1" + GenesisHash[2:]
	for _, tc := range []struct {
		name    string
		details any
		want    string
	}{
		{"none", nil, `{}`},
		{"object", canonical.Object{{Name: "digest", Value: "ab"}, {Name: "reason", Value: "too big \u2028 \x01 <&>"}},
			`{"digest":"ab","reason":"too big ` + "\u2028" + ` \u0001 <&>"}`},
		{"map", map[string]any{"z": []any{int64(1), "é"}, "a": true}, `{"a":true,"z":[1,"é"]}`},
		{"stored text", RawDetails(`{"b":[],"c":null}`), `{"b":[],"c":null}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := &Entry{Time: "2025-03-01T12:00:00.000000000Z", Kind: KindRedeemed, CallID: "call_\"x\"", Principal: "agent:ä",
				Channel: ChannelAPI, Details: tc.details}
			details, err := e.SealText(41, prev)
			if err != nil {
				t.Fatal(err)
			}
			if details != tc.want {
				t.Errorf("details = %s, want %s", details, tc.want)
			}
			var value any = canonical.Object{}
			if tc.details != nil {
				value = tc.details
			}
			if raw, ok := value.(RawDetails); ok {
				if value, err = canonical.Parse(raw); err != nil {
					t.Fatal(err)
				}
			}
			body, err := canonical.Encode(map[string]any{"seq": int64(42), "time": e.Time, "kind": e.Kind, "call_id": e.CallID,
				"principal": e.Principal, "channel": e.Channel, "details": value, "prev_hash": prev})
			if err != nil {
				t.Fatal(err)
			}
			raw, _ := hex.DecodeString(prev)
			sum := sha256.Sum256(append(raw, body...))
			if want := hex.EncodeToString(sum[:]); e.Seq != 42 || e.Hash != want {
				t.Errorf("sealed %d %s, want 42 %s", e.Seq, e.Hash, want)
			}
			if h, err := e.ComputeHash(); err != nil || h != e.Hash {
				t.Errorf("ComputeHash = %s, %v; want %s", h, err, e.Hash)
			}
		})
	}
	for _, bad := range []string{"11", GenesisHash[1:] + "g", GenesisHash + "00"} {
		e := &Entry{Kind: KindRedeemed}
		if _, err := e.SealText(1, bad); err == nil {
			t.Errorf("SealText after prev_hash %q: no error", bad)
		}
	}
}

// maxSealAllocs budgets sealing one entry whose details are an object of
// three members: the hashed body's buffer, the hash's text and the
// details' text. Each intermediate string or buffer added to sealing (an
// entry is sealed three times per flow) fails TestSealAllocations.
const maxSealAllocs = 3

// TestSealAllocations counts the heap allocations of SealText.
func TestSealAllocations(t *testing.T) {
	details := canonical.Object{{Name: "digest", Value: GenesisHash}, {Name: "jti", Value: "jti_abc"}, {Name: "token", Value: "tok_1"}}
	e := &Entry{Time: "2025-03-01T12:00:00.000000000Z", Kind: KindRedeemed, CallID: "call_abcdefghijklmnopqrstuvwx",
		Principal: "agent:billing", Channel: ChannelAPI, Details: details}
	var err error
	n := testing.AllocsPerRun(100, func() { _, err = e.SealText(1000, GenesisHash) })
	if err != nil {
		t.Fatal(err)
	}
	if n > maxSealAllocs {
		t.Errorf("sealing an entry made %.0f allocations, more than %d", n, maxSealAllocs)
	}
}
