package tools

import (
	"strings"
	"testing"
	"time"
)

func TestPlanParsed(t *testing.T) {
	r, err := Parse([]byte(toolFile(refundArgs + "    plan: {max_for: 2h}\n")))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("demo.tool")
	if tool.Plan == nil || tool.Plan.MaxFor != 2*time.Hour {
		t.Fatalf("Plan = %+v, want max_for 2h", tool.Plan)
	}
	r, err = Parse([]byte(toolFile(refundArgs)))
	if err != nil {
		t.Fatal(err)
	}
	if tool, _ := r.Tool("demo.tool"); tool.Plan != nil {
		t.Fatalf("a tool without a plan block may be a plan item: %+v", tool.Plan)
	}
}

func TestPlanLint(t *testing.T) {
	tests := []struct{ name, block, path, fragment string }{
		{"short", "    plan: {max_for: 59s}\n", "plan/max_for", "from 1m to 24h, not 59s"},
		{"long", "    plan: {max_for: 25h}\n", "plan/max_for", "from 1m to 24h, not 25h"},
		{"missing", "    plan: {}\n", "plan", "max_for is required"},
		{"unknown", "    plan: {max_for: 1h, ordered: true}\n", "plan", "unknown field ordered"},
		{"passkey tool", "    approve_with: passkey\n    plan: {max_for: 1h}\n", "plan", "never a plan item"},
		{"passkey rule", "    rules:\n      - {id: big, when: 'args.amount_minor > 100', then: ask, approve_with: passkey}\n    plan: {max_for: 1h}\n", "plan", "never a plan item"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range lintProblems(t, toolFile(refundArgs+tt.block)) {
				if p.Tool == "demo.tool" && p.Path == tt.path && strings.Contains(p.Message, tt.fragment) && p.Line > 0 {
					return
				}
				got = append(got, p.String())
			}
			t.Errorf("no problem at %s containing %q; got %q", tt.path, tt.fragment, got)
		})
	}
}

// The definition digest a call records covers the plan block, so a plan
// approved under one definition is not minted under another.
func TestPlanChangesDefinitionDigest(t *testing.T) {
	digest := func(block string) string {
		t.Helper()
		r, err := Parse([]byte(toolFile(refundArgs + block)))
		if err != nil {
			t.Fatal(err)
		}
		tool, _ := r.Tool("demo.tool")
		return tool.DefinitionDigest
	}
	none, hour, two := digest(""), digest("    plan: {max_for: 1h}\n"), digest("    plan: {max_for: 2h}\n")
	if none == hour || hour == two {
		t.Errorf("plan block does not change the definition digest: %s %s %s", none, hour, two)
	}
}
