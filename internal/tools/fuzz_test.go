package tools

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/canonical"
)

// knownCodes are the problem codes of the API contract (DESIGN §5).
var knownCodes = []string{
	canonical.CodeMalformedJSON, canonical.CodeInvalidUTF8, canonical.CodeDuplicateKey,
	canonical.CodeFloatNotAllowed, canonical.CodeOutOfRange, canonical.CodeTooDeep,
	canonical.CodeTooLarge, canonical.CodeUnknownField, canonical.CodeMissingField,
	canonical.CodeEmptyString, canonical.CodeWrongType, canonical.CodeInvalidTool,
	canonical.CodeInvalidTarget, canonical.CodeTooLong, canonical.CodePatternMismatch,
	canonical.CodeEnumMismatch, canonical.CodeTooManyItems, canonical.CodeUnknownTool,
}

// FuzzValidate feeds arbitrary proposal bytes through the strict parser and
// the registry of examples/tools.yaml. Seeds: testdata/fuzz/FuzzValidate and
// every fixture of validate_test.go.
func FuzzValidate(f *testing.F) {
	r := MustLoad(f, examplesFile)
	for tool, cases := range fixtures {
		for _, c := range cases {
			target := legalTargets[tool]
			if c.target != "" {
				target = c.target
			}
			f.Add([]byte(proposal(tool, target, c.args)))
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := canonical.ParseProposal(data)
		if err != nil {
			var ps canonical.Problems
			if !errors.As(err, &ps) || len(ps) == 0 {
				t.Fatalf("ParseProposal error %T %v, want Problems", err, err)
			}
			for _, pr := range ps {
				if !slices.Contains(knownCodes, pr.Code) {
					t.Errorf("parse problem with unknown code %q", pr.Code)
				}
			}
			return
		}
		before, err := canonical.Encode(p.Args)
		if err != nil {
			t.Fatalf("Encode(args): %v", err)
		}
		tool, ps := r.Check(p)
		for _, pr := range ps {
			if !slices.Contains(knownCodes, pr.Code) {
				t.Errorf("problem with unknown code %q at %q", pr.Code, pr.Path)
			}
			if !strings.HasPrefix(pr.Path, "/") {
				t.Errorf("problem %s has path %q, want a pointer starting with /", pr.Code, pr.Path)
			}
			if strings.TrimSpace(pr.Message) == "" {
				t.Errorf("problem %s at %s has no message", pr.Code, pr.Path)
			}
			if pr.Code != canonical.CodeUnknownTool && pr.Code != canonical.CodePatternMismatch && !strings.HasPrefix(pr.Path, "/args") {
				t.Errorf("problem %s at %s, want args problems under /args", pr.Code, pr.Path)
			}
			if _, ok := canonical.Lookup(canonical.Object{{Name: "args", Value: p.Args}}, pr.Path); !ok &&
				pr.Code != canonical.CodeMissingField && pr.Path != "/tool" && pr.Path != "/target" {
				t.Errorf("problem %s at %s names no value of the proposal", pr.Code, pr.Path)
			}
		}
		if len(ps) > MaxProblems {
			t.Errorf("%d problems, more than MaxProblems", len(ps))
		}
		after, _ := canonical.Encode(p.Args)
		if string(before) != string(after) {
			t.Fatalf("Check modified args: %s became %s", before, after)
		}
		if tool == nil {
			if len(ps) != 1 || ps[0].Code != canonical.CodeUnknownTool {
				t.Fatalf("no tool with problems %v, want exactly unknown_tool", ps)
			}
			return
		}
		again := tool.Validate(p)
		if !slices.Equal(again, ps) {
			t.Fatalf("validation is not deterministic:\n%v\n%v", ps, again)
		}
		if len(ps) == 0 {
			env := p.Envelope("agent:fuzz", tool.Audience)
			env.Args = tool.Bound(p.Args)
			if _, err := env.Digest(); err != nil {
				t.Fatalf("digest of a valid proposal: %v", err)
			}
		}
	})
}
