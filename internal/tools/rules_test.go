package tools

import (
	"strings"
	"testing"
)

func TestRulesShape(t *testing.T) {
	tests := []struct {
		name, fields, path, fragment string
	}{
		{"not a list", "    rules: {id: x}\n", "rules", "must be a list of rules"},
		{"unknown field", "    rules:\n      - {id: a, when: 'true', then: ask, because: x}\n", "rules/0", "unknown rule field because"},
		{"missing id", "    rules:\n      - {when: 'true', then: ask}\n", "rules/0", "id is required"},
		{"bad id", "    rules:\n      - {id: Small Refunds, when: 'true', then: ask}\n", "rules/0/id", "rule ids are lower-case"},
		{"duplicate id", "    rules:\n      - {id: a, when: 'true', then: ask}\n      - {id: a, when: 'false', then: ask}\n", "rules/1/id", "used twice"},
		{"missing when", "    rules:\n      - {id: a, then: ask}\n", "rules/a", "when is required"},
		{"blank when", "    rules:\n      - {id: a, when: '  ', then: ask}\n", "rules/a/when", "not empty"},
		{"when not a string", "    rules:\n      - {id: a, when: true, then: ask}\n", "rules/a/when", "must be a string"},
		{"missing then", "    rules:\n      - {id: a, when: 'true'}\n", "rules/a", "then is required"},
		{"bad then", "    rules:\n      - {id: a, when: 'true', then: allow}\n", "rules/a/then", "approve, deny or ask"},
		{"approvals out of range", "    rules:\n      - {id: a, when: 'true', then: ask, approvals: 11}\n", "rules/a/approvals", "between 1 and 10"},
		{"reason with a control", "    rules:\n      - {id: a, when: 'true', then: deny, reason: \"a\\u202eb\"}\n", "rules/a/reason", "invisible"},
		{"auto_approve value", "    auto_approve: yes-please\n", "auto_approve", "must be allowed or never"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range lintProblems(t, toolFile(tt.fields)) {
				if p.Path == tt.path && strings.Contains(p.Message, tt.fragment) {
					if p.Line == 0 {
						t.Errorf("problem %+v has no line", p)
					}
					return
				}
			}
			t.Fatalf("no problem at %s with %q in %v", tt.path, tt.fragment, lintProblems(t, toolFile(tt.fields)))
		})
	}
}

func TestRulesRead(t *testing.T) {
	r, err := Parse([]byte(toolFile(`    auto_approve: allowed
    rules:
      - id: small
        when: args.n < 3
        then: approve
        reason: '  small  '
      - id: more
        when: "true"
        then: ask
        approvals: 2
`)))
	if err != nil {
		t.Fatal(err)
	}
	tl, _ := r.Tool("demo.tool")
	if !tl.AutoApprove || len(tl.Rules) != 2 {
		t.Fatalf("AutoApprove %v, rules %+v", tl.AutoApprove, tl.Rules)
	}
	a, b := tl.Rules[0], tl.Rules[1]
	if a.ID != "small" || a.When != "args.n < 3" || a.Then != ThenApprove || a.Reason != "small" || a.Line == 0 || a.WhenLine != a.Line+1 {
		t.Errorf("rule 0 = %+v", a)
	}
	if b.Approvals != 2 || b.Then != ThenAsk {
		t.Errorf("rule 1 = %+v", b)
	}
	if len(a.Digest) != 64 || a.Digest == b.Digest {
		t.Errorf("digests %q %q", a.Digest, b.Digest)
	}
	if len(tl.AutoApproveBlockers()) != 0 {
		t.Errorf("blockers %v", tl.AutoApproveBlockers())
	}
}

func TestAutoApproveBlockers(t *testing.T) {
	for _, tt := range []struct {
		fields string
		want   []string
	}{
		{"", []string{"does not opt in"}},
		{"    auto_approve: never\n", []string{"does not opt in"}},
		{"    auto_approve: allowed\n    approvals: 2\n", []string{"needs 2 approvals"}},
		{"    approvals: 3\n", []string{"does not opt in", "needs 3 approvals"}},
	} {
		r, err := Parse([]byte(toolFile(tt.fields)))
		if err != nil {
			t.Fatal(err)
		}
		tl, _ := r.Tool("demo.tool")
		got := tl.AutoApproveBlockers()
		if len(got) != len(tt.want) {
			t.Fatalf("%q: blockers %v, want %v", tt.fields, got, tt.want)
		}
		for i := range got {
			if !strings.Contains(got[i], tt.want[i]) {
				t.Errorf("%q: blocker %q, want %q", tt.fields, got[i], tt.want[i])
			}
		}
	}
}

func TestDefinitionDigest(t *testing.T) {
	digest := func(src string) (tool, file string) {
		t.Helper()
		r, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%v\n%s", err, src)
		}
		tl, _ := r.Tool("demo.tool")
		return tl.DefinitionDigest, r.Digest()
	}
	base := toolFile("    approvals: 1\n")
	d0, f0 := digest(base)
	if len(d0) != 64 || len(f0) != 64 || d0 == f0 {
		t.Fatalf("digests %q %q", d0, f0)
	}
	// Layout, comments and key order do not change what the tool is.
	same := "# a comment\ntools:\n  demo.tool:\n    approvals:    1   # one\n    args: {additionalProperties: false, type: object}\n    target: '^demo:[a-z]+$'\n    audience: demo-host\n"
	if d, f := digest(same); d != d0 || f != f0 {
		t.Errorf("a re-laid-out file changed the digests: %s %s, want %s %s", d, f, d0, f)
	}
	// Any change of a value does, for that tool and for the file.
	for _, change := range []string{
		toolFile("    approvals: 2\n"),
		toolFile("    approvals: 1\n    description: now with words\n"),
		toolFile("    approvals: 1\n    grant_ttl: 30s\n"),
		toolFile("    approvals: 1\n    rules:\n      - {id: a, when: 'true', then: ask}\n"),
		strings.Replace(base, "'^demo:[a-z]+$'", "'^demo:[a-z0-9]+$'", 1),
	} {
		if d, f := digest(change); d == d0 || f == f0 {
			t.Errorf("the digests did not change for\n%s", change)
		}
	}
	// A change of another tool changes the file's digest only.
	other := base + "  other.tool:\n    audience: x\n    target: '.+'\n    args: {type: object, additionalProperties: false}\n"
	if d, f := digest(other); d != d0 || f == f0 {
		t.Errorf("adding another tool: tool digest changed %v, file digest unchanged %v", d != d0, f == f0)
	}
}
