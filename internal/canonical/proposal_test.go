package canonical

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// problemKeys returns "code path" for each problem, for comparing lists.
func problemKeys(ps Problems) []string {
	keys := make([]string, len(ps))
	for i, p := range ps {
		keys[i] = p.Code + " " + p.Path
	}
	return keys
}

// mustProblems returns the Problems behind err.
func mustProblems(tb testing.TB, err error) Problems {
	tb.Helper()
	var ps Problems
	if !errors.As(err, &ps) {
		tb.Fatalf("error %v (%T) is not Problems", err, err)
	}
	return ps
}

func TestParseProposalProblems(t *testing.T) {
	long := func(n int) string { return strings.Repeat("a", n) }
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"actor in the body", `{"tool":"payments.refund","target":"acct:1","args":{},"actor":"agent:root"}`,
			[]string{"unknown_field /actor"}},
		{"audience in the body", `{"tool":"payments.refund","target":"acct:1","args":{},"audience":"x"}`,
			[]string{"unknown_field /audience"}},
		{"envelope version in the body", `{"tool":"t","target":"x","args":{},"v":1}`,
			[]string{"unknown_field /v"}},
		{"every unknown member is listed", `{"tool":"t","target":"x","args":{},"z":1,"b/c":2,"actor":"a"}`,
			[]string{"unknown_field /actor", "unknown_field /b~1c", "unknown_field /z"}},
		{"empty object", `{}`,
			[]string{"missing_field /tool", "missing_field /target", "missing_field /args"}},
		{"unknown and missing together", `{"actor":"a","audience":"b"}`,
			[]string{"unknown_field /actor", "unknown_field /audience", "missing_field /tool", "missing_field /target", "missing_field /args"}},
		{"array body", `[]`, []string{"wrong_type "}},
		{"string body", `"payments.refund"`, []string{"wrong_type "}},
		{"null body", `null`, []string{"wrong_type "}},
		{"wrong types", `{"tool":1,"target":null,"args":[],"rationale":false}`,
			[]string{"wrong_type /tool", "wrong_type /target", "wrong_type /args", "wrong_type /rationale"}},
		{"args as a string", `{"tool":"t","target":"x","args":"{}"}`, []string{"wrong_type /args"}},
		{"args null", `{"tool":"t","target":"x","args":null}`, []string{"wrong_type /args"}},
		{"tool upper case", `{"tool":"Payments.refund","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"tool empty", `{"tool":"","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"tool double dot", `{"tool":"payments..refund","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"tool trailing dot", `{"tool":"payments.","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"tool leading digit", `{"tool":"1pay","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"tool word with leading digit", `{"tool":"pay.1x","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"tool with hyphen", `{"tool":"pay-ments","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"tool with space", `{"tool":"pay ments","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"tool 129 bytes", `{"tool":"` + long(129) + `","target":"x","args":{}}`, []string{"invalid_tool /tool"}},
		{"target empty", `{"tool":"t","target":"","args":{}}`, []string{"empty_string /target"}},
		{"target white space", `{"tool":"t","target":" \t\n","args":{}}`, []string{"empty_string /target"}},
		{"target no-break space", `{"tool":"t","target":"\u00a0","args":{}}`, []string{"empty_string /target"}},
		{"target 513 bytes", `{"tool":"t","target":"` + long(513) + `","args":{}}`, []string{"invalid_target /target"}},
		{"target control character", `{"tool":"t","target":"acct\u0007","args":{}}`, []string{"invalid_target /target"}},
		{"target DEL", `{"tool":"t","target":"acct\u007f","args":{}}`, []string{"invalid_target /target"}},
		{"target zero-width space", `{"tool":"t","target":"ac\u200bct","args":{}}`, []string{"invalid_target /target"}},
		{"target bidi override", `{"tool":"t","target":"acct:\u202e1","args":{}}`, []string{"invalid_target /target"}},
		{"target tag character", `{"tool":"t","target":"acct:\udb40\udc41","args":{}}`, []string{"invalid_target /target"}},
		{"rationale too long", `{"tool":"t","target":"x","args":{},"rationale":"` + long(MaxRationaleBytes+1) + `"}`,
			[]string{"too_long /rationale"}},
		{"rationale null", `{"tool":"t","target":"x","args":{},"rationale":null}`, []string{"wrong_type /rationale"}},
		// A syntax or strictness problem stops the parse: exactly one problem.
		{"malformed", `{"tool":"t",}`, []string{"malformed_json "}},
		{"float in args", `{"tool":"t","target":"x","args":{"amount":1.5}}`, []string{"float_not_allowed /args/amount"}},
		{"duplicate actor", `{"tool":"t","target":"x","args":{},"actor":"a","actor":"b"}`, []string{"duplicate_key /actor"}},
		{"duplicate in args", `{"tool":"t","target":"x","args":{"a":1,"a":1}}`, []string{"duplicate_key /args/a"}},
		{"big integer", `{"tool":"t","target":"x","args":{"n":[9007199254740992]}}`, []string{"out_of_range /args/n/0"}},
		{"lone surrogate", `{"tool":"t","target":"\udfff","args":{}}`, []string{"invalid_utf8 /target"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseProposal([]byte(tt.body))
			if err == nil {
				t.Fatalf("ParseProposal accepted %+v, want %q", p, tt.want)
			}
			ps := mustProblems(t, err)
			if got := problemKeys(ps); strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Errorf("problems = %q, want %q", got, tt.want)
			}
			for _, pr := range ps {
				if pr.Message == "" {
					t.Errorf("%s %s has no message", pr.Code, pr.Path)
				}
			}
			if p.Tool != "" || p.Target != "" || p.Args != nil || p.Rationale != "" {
				t.Errorf("a refused proposal came back filled in: %+v", p)
			}
		})
	}
}

func TestParseProposalAccepts(t *testing.T) {
	tests := []struct {
		name string
		body string
		want Proposal
	}{
		{"minimal", `{"tool":"t","target":"x","args":{}}`, Proposal{Tool: "t", Target: "x", Args: Object{}}},
		{"rationale", `{"rationale":"the customer asked","args":{"n":1},"target":"acct:1","tool":"payments.refund"}`,
			Proposal{Tool: "payments.refund", Target: "acct:1", Args: Object{{"n", int64(1)}}, Rationale: "the customer asked"}},
		{"empty rationale", `{"tool":"t","target":"x","args":{},"rationale":""}`, Proposal{Tool: "t", Target: "x", Args: Object{}}},
		{"tool 128 bytes", `{"tool":"` + strings.Repeat("a", 128) + `","target":"x","args":{}}`,
			Proposal{Tool: strings.Repeat("a", 128), Target: "x", Args: Object{}}},
		{"dotted tool", `{"tool":"a_1.b2.c_","target":"x","args":{}}`, Proposal{Tool: "a_1.b2.c_", Target: "x", Args: Object{}}},
		{"target 512 bytes", `{"tool":"t","target":"` + strings.Repeat("é", 256) + `","args":{}}`,
			Proposal{Tool: "t", Target: strings.Repeat("é", 256), Args: Object{}}},
		{"target with inner spaces", `{"tool":"t","target":" a b ","args":{}}`, Proposal{Tool: "t", Target: " a b ", Args: Object{}}},
		{"rationale at the limit", `{"tool":"t","target":"x","args":{},"rationale":"` + strings.Repeat("r", MaxRationaleBytes) + `"}`,
			Proposal{Tool: "t", Target: "x", Args: Object{}, Rationale: strings.Repeat("r", MaxRationaleBytes)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseProposal([]byte(tt.body))
			if err != nil {
				t.Fatalf("ParseProposal: %v", err)
			}
			gb, _ := Encode(got.Args)
			wb, _ := Encode(tt.want.Args)
			if got.Tool != tt.want.Tool || got.Target != tt.want.Target || got.Rationale != tt.want.Rationale || string(gb) != string(wb) {
				t.Errorf("ParseProposal = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// TestRationaleNotHashed: the rationale is shown but never bound.
func TestRationaleNotHashed(t *testing.T) {
	digests := map[string]bool{}
	for _, body := range []string{
		`{"tool":"t","target":"x","args":{"a":1}}`,
		`{"tool":"t","target":"x","args":{"a":1},"rationale":""}`,
		`{"tool":"t","target":"x","args":{"a":1},"rationale":"one reason"}`,
		`{"tool":"t","target":"x","args":{"a":1},"rationale":"another reason"}`,
	} {
		digests[MustDigest(t, body, "agent:a", "host")] = true
	}
	if len(digests) != 1 {
		t.Errorf("%d different digests, want 1", len(digests))
	}
}

// MustDigest parses a proposal body and returns its digest under the context.
func MustDigest(tb testing.TB, body, actor, audience string) string {
	tb.Helper()
	p, err := ParseProposal([]byte(body))
	if err != nil {
		tb.Fatalf("ParseProposal(%q): %v", body, err)
	}
	d, err := p.Envelope(actor, audience).Digest()
	if err != nil {
		tb.Fatalf("Digest: %v", err)
	}
	if !IsDigest(d) {
		tb.Fatalf("Digest = %q, not 64 lowercase hex digits", d)
	}
	return d
}

func TestProposalFrom(t *testing.T) {
	v, err := Parse([]byte(`{"call":{"tool":"t","target":"x","args":{},"rationale":"r"}}`))
	if err != nil {
		t.Fatal(err)
	}
	call, _ := v.(Object).Get("call")
	if _, ps := ProposalFrom(call, "/call", false); strings.Join(problemKeys(ps), "|") != "unknown_field /call/rationale" {
		t.Errorf("ProposalFrom without rationale: %q, want [unknown_field /call/rationale]", problemKeys(ps))
	}
	p, ps := ProposalFrom(call, "/call", true)
	if len(ps) != 0 || p.Rationale != "r" || p.Tool != "t" {
		t.Errorf("ProposalFrom with rationale = %+v, %v", p, ps)
	}
	if _, ps := ProposalFrom(Object{}, "/call", false); strings.Join(problemKeys(ps), "|") != "missing_field /call/tool|missing_field /call/target|missing_field /call/args" {
		t.Errorf("ProposalFrom({}) = %q", problemKeys(ps))
	}
}

// nested returns n containers, alternating objects and arrays, with an
// integer inside the innermost.
func nested(n int) string {
	var open, close string
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			open += `{"a":`
			close = "}" + close
		} else {
			open += "["
			close = "]" + close
		}
	}
	return open + "1" + close
}

func TestArgsDepth(t *testing.T) {
	// args itself counts as the first container.
	body := func(depth int) string { return `{"tool":"t","target":"x","args":` + nested(depth) + `}` }
	if _, err := ParseProposal([]byte(body(MaxArgsDepth))); err != nil {
		t.Errorf("args %d deep: %v", MaxArgsDepth, err)
	}
	_, err := ParseProposal([]byte(body(MaxArgsDepth + 1)))
	if err == nil {
		t.Fatalf("args %d deep accepted", MaxArgsDepth+1)
	}
	ps := mustProblems(t, err)
	// The 33rd container is reached by 32 steps below args: a, 0, a, 0, ...
	var want strings.Builder
	want.WriteString("/args")
	for i := 0; i < MaxArgsDepth; i++ {
		if i%2 == 0 {
			want.WriteString("/a")
		} else {
			want.WriteString("/0")
		}
	}
	if got := problemKeys(ps); len(got) != 1 || got[0] != "too_deep "+want.String() {
		t.Errorf("problems = %q, want [too_deep %s]", got, want.String())
	}
}

func TestBodySizeLimit(t *testing.T) {
	body := func(size int) []byte {
		const head, tail = `{"tool":"t","target":"x","args":{"blob":"`, `"}}`
		return []byte(head + strings.Repeat("é", (size-len(head)-len(tail))/2) + strings.Repeat("z", (size-len(head)-len(tail))%2) + tail)
	}
	ok := body(MaxBodyBytes)
	if len(ok) != 256<<10 {
		t.Fatalf("body is %d bytes, want %d", len(ok), 256<<10)
	}
	if _, err := ParseProposal(ok); err != nil {
		t.Errorf("exactly 256 KiB: %v", err)
	}
	big := append(ok[:len(ok)-3:len(ok)-3], `z"}}`...)
	if len(big) != 256<<10+1 {
		t.Fatalf("body is %d bytes, want %d", len(big), 256<<10+1)
	}
	_, err := ParseProposal(big)
	if err == nil {
		t.Fatal("256 KiB + 1 accepted")
	}
	ps := mustProblems(t, err)
	if got := problemKeys(ps); len(got) != 1 || got[0] != "too_large " {
		t.Errorf("problems = %q, want [too_large]", got)
	}
	if want := fmt.Sprint(256<<10 + 1); !strings.Contains(ps[0].Message, want) {
		t.Errorf("message %q does not give the size %s", ps[0].Message, want)
	}
	// White space counts: the limit is on the body as sent.
	padded := append([]byte(`{"tool":"t","target":"x","args":{}}`), make([]byte, MaxBodyBytes)...)
	for i := len(padded) - MaxBodyBytes; i < len(padded); i++ {
		padded[i] = ' '
	}
	if _, err := ParseProposal(padded); err == nil || mustProblems(t, err)[0].Code != CodeTooLarge {
		t.Errorf("padded body: %v, want too_large", err)
	}
}

// toolPattern is DESIGN §4's rule for tool names.
var toolPattern = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$`)

// mirroredPattern is DESIGN §4's rule for a tool mirrored from an MCP
// upstream: {server}/{tool}.
var mirroredPattern = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}/[A-Za-z0-9_.-]{1,128}$`)

// TestToolNameRule checks ParseProposal's tool check against the pattern on
// random names drawn from the characters that matter.
func TestToolNameRule(t *testing.T) {
	name := rapid.OneOf(
		rapid.StringOfN(rapid.RuneFrom([]rune("az09_.A-é ")), 0, 12, -1),
		rapid.StringMatching(`[a-z][a-z0-9_]{0,70}(\.[a-z][a-z0-9_]{0,70}){0,3}`),
	)
	rapid.Check(t, func(t *rapid.T) {
		s := name.Draw(t, "tool")
		want := len(s) <= MaxToolBytes && toolPattern.MatchString(s)
		_, err := ParseProposal(fmt.Appendf(nil, `{"tool":%q,"target":"x","args":{}}`, s))
		if got := err == nil; got != want {
			t.Fatalf("tool %q accepted = %v, want %v (%v)", s, got, want, err)
		}
	})
}
