package canonical

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"unicode"
	"unicode/utf8"
)

// The seed corpora live in testdata/fuzz/FuzzParse and
// testdata/fuzz/FuzzParseProposal; `go test` runs every seed, and
// scripts/fuzz.sh explores beyond them.

var allCodes = []string{
	CodeMalformedJSON, CodeInvalidUTF8, CodeDuplicateKey, CodeFloatNotAllowed, CodeOutOfRange, CodeTooDeep,
	CodeTooLarge, CodeUnknownField, CodeMissingField, CodeEmptyString, CodeWrongType, CodeInvalidTool,
	CodeInvalidTarget, CodeTooLong, CodePatternMismatch, CodeEnumMismatch, CodeTooManyItems, CodeUnknownTool,
}

// strictnessCodes are the refusals of text that encoding/json accepts.
var strictnessCodes = []string{CodeInvalidUTF8, CodeDuplicateKey, CodeFloatNotAllowed, CodeOutOfRange, CodeTooDeep, CodeTooLarge}

// parseCodes are the problems that stop a parse; ParseProposal reports
// exactly one of them and nothing else.
var parseCodes = append([]string{CodeMalformedJSON}, strictnessCodes...)

func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"tool":"payments.refund","target":"acct:1","args":{"amount_minor":1250}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := Parse(data)
		if err != nil {
			var p *Problem
			if !errors.As(err, &p) {
				t.Fatalf("error %v is %T, want *Problem", err, err)
			}
			if !slices.Contains(parseCodes, p.Code) || p.Message == "" {
				t.Fatalf("problem %+v: unknown code or no message", p)
			}
			if p.Offset < -1 || p.Offset > len(data) {
				t.Fatalf("offset %d outside the %d-byte input", p.Offset, len(data))
			}
			if _, err := SplitPointer(p.Path); err != nil {
				t.Fatalf("path %q: %v", p.Path, err)
			}
			if p.Code == CodeMalformedJSON && json.Valid(data) {
				t.Fatalf("%q refused as %s (%s) but encoding/json finds it valid", data, p.Code, p.Message)
			}
			return
		}
		if !json.Valid(data) {
			t.Fatalf("accepted %q, which encoding/json finds invalid", data)
		}
		b, err := Encode(v)
		if err != nil {
			t.Fatalf("Encode(Parse(%q)): %v", data, err)
		}
		v2, err := Parse(b)
		if err != nil {
			t.Fatalf("canonical bytes %q do not parse: %v", b, err)
		}
		b2, err := Encode(v2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("round trip changed %q to %q (%v)", b, b2, err)
		}
		ref, err := refCanonicalJSON(data)
		if err != nil || ref != string(b) {
			t.Fatalf("canonical bytes of %q: %q, reference encoder says %q (%v)", data, b, ref, err)
		}
	})
}

func FuzzParseProposal(f *testing.F) {
	f.Add([]byte(`{"tool":"payments.refund","target":"acct:1","args":{"amount_minor":1250},"rationale":"twice"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProposal(data)
		if err != nil {
			var ps Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("error %v (%T) is not a non-empty Problems", err, err)
			}
			parsed, perr := Parse(data)
			for _, pr := range ps {
				if !slices.Contains(allCodes, pr.Code) || pr.Message == "" {
					t.Fatalf("problem %+v: unknown code or no message", pr)
				}
				if _, err := SplitPointer(pr.Path); err != nil {
					t.Fatalf("path %q: %v", pr.Path, err)
				}
				if slices.Contains(parseCodes, pr.Code) {
					if len(ps) != 1 || perr == nil {
						t.Fatalf("parse problem %s among %d problems (parse error %v)", pr.Code, len(ps), perr)
					}
					continue
				}
				// A shape problem points at a value that is there, except a
				// missing member.
				if _, found := Lookup(parsed, pr.Path); found == (pr.Code == CodeMissingField) {
					t.Fatalf("%s at %q: value present = %v", pr.Code, pr.Path, found)
				}
			}
			return
		}
		// Accepted: only the four members, and each within its rules.
		v, err := Parse(data)
		if err != nil {
			t.Fatalf("ParseProposal accepted what Parse refuses: %v", err)
		}
		for _, m := range v.(Object) {
			if !slices.Contains([]string{"args", "rationale", "target", "tool"}, m.Name) {
				t.Fatalf("accepted a proposal with member %q", m.Name)
			}
		}
		if !(len(p.Tool) <= MaxToolBytes && toolPattern.MatchString(p.Tool)) && !mirroredPattern.MatchString(p.Tool) {
			t.Fatalf("accepted tool %q", p.Tool)
		}
		if IsBlank(p.Target) || len(p.Target) > MaxTargetBytes || !utf8.ValidString(p.Target) {
			t.Fatalf("accepted target %q", p.Target)
		}
		for _, r := range p.Target {
			if unicode.In(r, unicode.Cc, unicode.Cf) {
				t.Fatalf("accepted target %q with U+%04X", p.Target, r)
			}
		}
		if p.Args == nil || len(p.Rationale) > MaxRationaleBytes {
			t.Fatalf("accepted args %v, rationale of %d bytes", p.Args, len(p.Rationale))
		}
		d, err := p.Envelope("agent:billing-bot", "payments-host").Digest()
		if err != nil || !IsDigest(d) {
			t.Fatalf("Digest = %q, %v", d, err)
		}
		ref, err := refDigest(data, "agent:billing-bot", "payments-host")
		if err != nil || ref != d {
			t.Fatalf("digest %s, reference implementation says %s (%v)", d, ref, err)
		}
		// The canonical spelling of the same proposal has the same digest.
		top := Object{{"args", p.Args}, {"target", p.Target}, {"tool", p.Tool}}
		if _, ok := v.(Object).Get("rationale"); ok {
			top = Object{top[0], {"rationale", p.Rationale}, top[1], top[2]}
		}
		again, err := Encode(top)
		if err != nil {
			t.Fatal(err)
		}
		p2, err := ParseProposal(again)
		if err != nil {
			t.Fatalf("re-encoded proposal %q refused: %v", again, err)
		}
		if d2, _ := p2.Envelope("agent:billing-bot", "payments-host").Digest(); d2 != d || p2.Rationale != p.Rationale {
			t.Fatalf("re-encoded proposal: digest %s rationale %q, want %s %q", d2, p2.Rationale, d, p.Rationale)
		}
	})
}
