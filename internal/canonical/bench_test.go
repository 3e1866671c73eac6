package canonical

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"testing"
)

// benchProposal returns a proposal body whose args member encodes to at
// most argsBytes bytes: a payment-like object with as many line items as
// fit, some with non-ASCII text and escapes.
func benchProposal(tb testing.TB, argsBytes int) []byte {
	tb.Helper()
	const head = `{"amount_minor":1250075,"currency":"EUR","customer":{"id":"cus_8f2a","name":"Zoë Åkesson","tier":3},"items":[`
	const tail = `],"notify":true,"reason":"duplicate charge \"#4411\" reported by the customer\n"}`
	args := []byte(head)
	for i := 0; ; i++ {
		item := fmt.Sprintf(`{"note":"Line %d – café crème, 2× 😀","qty":%d,"sku":"SKU-%06d","tags":["a","b",null,false],"unit_minor":%d}`,
			i, i%7+1, i*7919, -i*131)
		sep := ""
		if i > 0 {
			sep = ","
		}
		if len(args)+len(sep)+len(item)+len(tail) > argsBytes {
			break
		}
		args = append(append(args, sep...), item...)
	}
	args = append(args, tail...)
	body := `{"tool":"payments.refund","target":"acct:DE89 3704 0044 0532 0130 00","rationale":"The customer was charged twice.","args":` + string(args) + `}`
	return []byte(body)
}

var benchSizes = []struct {
	name string
	size int
}{{"200B", 200}, {"4KiB", 4 << 10}, {"64KiB", 64 << 10}}

// BenchmarkDigest measures parse, canonical encoding and hashing of a whole
// proposal, beside a floor (validate and hash the raw bytes) and the common
// alternative (encoding/json into any, re-marshal with sorted keys, hash).
func BenchmarkDigest(b *testing.B) {
	for _, s := range benchSizes {
		b.Run("canonical/"+s.name, func(b *testing.B) {
			body := benchProposal(b, s.size)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				p, err := ParseProposal(body)
				if err != nil {
					b.Fatal(err)
				}
				d, err := p.Envelope("agent:billing-bot", "payments-host").Digest()
				if err != nil || len(d) != 64 {
					b.Fatal(d, err)
				}
			}
		})
		b.Run("floor/"+s.name, func(b *testing.B) {
			body := benchProposal(b, s.size)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				if !json.Valid(body) {
					b.Fatal("invalid")
				}
				sum := sha256.Sum256(body)
				if hex.EncodeToString(sum[:]) == "" {
					b.Fatal("empty")
				}
			}
		})
		b.Run("encodingjson/"+s.name, func(b *testing.B) {
			body := benchProposal(b, s.size)
			b.SetBytes(int64(len(body)))
			b.ReportAllocs()
			for b.Loop() {
				var p map[string]any
				if err := json.Unmarshal(body, &p); err != nil {
					b.Fatal(err)
				}
				env := map[string]any{"v": 1, "actor": "agent:billing-bot", "audience": "payments-host",
					"tool": p["tool"], "target": p["target"], "args": p["args"]}
				out, err := json.Marshal(env) // map keys are marshalled in sorted order
				if err != nil {
					b.Fatal(err)
				}
				h := sha256.New()
				h.Write([]byte(DigestPrefix))
				h.Write(out)
				if hex.EncodeToString(h.Sum(nil)) == "" {
					b.Fatal("empty")
				}
			}
		})
	}
}

// TestBenchProposalSizes keeps the benchmark inputs what their names say.
func TestBenchProposalSizes(t *testing.T) {
	for _, s := range benchSizes {
		body := benchProposal(t, s.size)
		p, err := ParseProposal(body)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		args, _ := Encode(p.Args)
		if n := len(args); n > s.size || n < s.size*9/10 {
			t.Errorf("%s: args encode to %d bytes, want %d or a little less", s.name, n, s.size)
		}
	}
}
