package tools

import (
	"strings"
	"testing"
)

func TestCounterParsed(t *testing.T) {
	r, err := Parse([]byte(toolFile(refundArgs + "    counter: {edit: [/amount_minor, target, /meta/n], forward: true}\n")))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("demo.tool")
	c := tool.Counter
	if c == nil || !c.Forward || strings.Join(c.Edit, ",") != "/amount_minor,target,/meta/n" {
		t.Fatalf("Counter = %+v", c)
	}
	if !c.Edits("/amount_minor") || !c.Edits(CounterTarget) || c.Edits("/reason") {
		t.Error("Edits wrong")
	}

	// Default off; forward defaults to false.
	r, err = Parse([]byte(toolFile(refundArgs)))
	if err != nil {
		t.Fatal(err)
	}
	if tool, _ := r.Tool("demo.tool"); tool.Counter != nil || tool.Counter.Edits("/amount_minor") {
		t.Errorf("Counter = %+v without the block, want nil", tool.Counter)
	}
	r, err = Parse([]byte(toolFile(refundArgs + "    counter: {edit: [/amount_minor]}\n")))
	if err != nil {
		t.Fatal(err)
	}
	if tool, _ := r.Tool("demo.tool"); tool.Counter == nil || tool.Counter.Forward {
		t.Errorf("Counter = %+v, want forward off", tool.Counter)
	}
}

func TestCounterLintRefusals(t *testing.T) {
	tests := []struct{ name, block, path, fragment string }{
		{"unknown pointer", "    counter: {edit: [/amount]}\n", "counter/edit/0", "amount is not a declared property of args"},
		{"not a pointer", "    counter: {edit: [amount_minor]}\n", "counter/edit/0", "neither target nor a JSON Pointer"},
		{"informational", "    counter: {edit: [/note]}\n", "counter/edit/0", "is informational"},
		{"twice", "    counter: {edit: [/reason, /reason]}\n", "counter/edit/1", "listed twice"},
		{"empty", "    counter: {edit: []}\n", "counter/edit", "non-empty list"},
		{"missing edit", "    counter: {forward: true}\n", "counter", "edit is required"},
		{"forward not bool", "    counter: {edit: [target], forward: yes please}\n", "counter/forward", ""},
		{"unknown field", "    counter: {edit: [target], fields: [target]}\n", "counter", "unknown field fields"},
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

// The definition digest a call records covers the counter block.
func TestCounterChangesDefinitionDigest(t *testing.T) {
	seen := map[string]string{}
	for _, block := range []string{
		"",
		"    counter: {edit: [target]}\n",
		"    counter: {edit: [target, /amount_minor]}\n",
		"    counter: {edit: [target, /amount_minor], forward: true}\n",
	} {
		r, err := Parse([]byte(toolFile(refundArgs + block)))
		if err != nil {
			t.Fatal(err)
		}
		tool, _ := r.Tool("demo.tool")
		if other, dup := seen[tool.DefinitionDigest]; dup {
			t.Errorf("%q and %q share the definition digest", block, other)
		}
		seen[tool.DefinitionDigest] = block
	}
}
