package mcp

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/tools"
)

// FuzzParseCall reads arbitrary tools/call arguments as the gateway does:
// it never panics; what it refuses it refuses with problems under /args or
// /target; what it accepts encodes to canonical bytes that read back, under
// the same number paths, to the very same bytes (what is hashed is what is
// forwarded, and what a stored call reads back as).
func FuzzParseCall(f *testing.F) {
	tool, err := tools.Mirror(tools.MirrorSpec{Server: "demo", Name: "echo", InputSchema: []byte(
		`{"type":"object","properties":{"n":{"type":"integer"},"x":{"type":"number"},"s":{"type":"string"},` +
			`"xs":{"type":"array","items":{"type":"number"}},"inner":{"type":"object","properties":{"k":{"type":"number"}}}},"additionalProperties":false}`)})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{``, `{}`, `{"x":0.1}`, `{"x":2.50e0,"n":9007199254740991}`, `{"xs":[1e-7,5e-324,1e21]}`,
		`{"inner":{"k":-0.0}}`, `{"n":1.5}`, `{"x":0.1000000000000000055}`, `{"s":"\ud800"}`, `{"a":1,"a":2}`, `null`, `[1]`, `{"x":1e400}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		p, err := parseCall(tool, raw)
		if err != nil {
			var ps canonical.Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("refused without problems: %v", err)
			}
			for _, pr := range ps {
				if !strings.HasPrefix(pr.Path, "/args") && pr.Path != "/target" {
					t.Fatalf("problem %s at %q, outside the arguments", pr.Code, pr.Path)
				}
			}
			return
		}
		if p.Tool != "demo/echo" || p.Target != "mcp:demo" {
			t.Fatalf("proposal %s at %s", p.Tool, p.Target)
		}
		enc, err := canonical.Encode(p.Args)
		if err != nil {
			t.Fatalf("accepted arguments do not encode: %v", err)
		}
		back, err := canonical.ParseWith(enc, canonical.Options{MaxDepth: canonical.MaxArgsDepth, Numbers: tool.Mirror.ArgsNumbers()})
		if err != nil {
			t.Fatalf("the canonical bytes %s do not read back: %v", enc, err)
		}
		again, err := canonical.Encode(back)
		if err != nil || !bytes.Equal(again, enc) {
			t.Fatalf("read back as %s, want %s (%v)", again, enc, err)
		}
	})
}
