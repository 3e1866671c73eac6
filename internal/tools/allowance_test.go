package tools

import (
	"strings"
	"testing"
	"time"
)

// refundArgs is an args schema with a money display and members of every
// kind an allowance's vary list may or may not name.
const refundArgs = `    args:
      type: object
      additionalProperties: false
      required: [amount_minor, currency, reason]
      properties:
        amount_minor: {type: integer, minimum: 1, maximum: 500000}
        currency: {type: string, enum: [USD, EUR]}
        reason: {type: string, enum: [duplicate, fraud, other]}
        note: {type: string}
        flag: {type: boolean}
        count: {type: integer, maximum: 50}
        lines: {type: array, items: {type: integer}}
        kind: {const: refund}
        meta:
          type: object
          additionalProperties: false
          properties: {n: {type: integer, minimum: 0}}
    display: {money: {amount: /amount_minor, currency: /currency}}
    informational: [/note]
`

func TestAllowanceParsed(t *testing.T) {
	r, err := Parse([]byte(toolFile(refundArgs + "    allowance: {max_uses: 20, max_for: 1h, vary: [target, /amount_minor, /reason, /meta/n]}\n")))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("demo.tool")
	a := tool.Allowance
	if a == nil || a.MaxUses != 20 || a.MaxFor != time.Hour || strings.Join(a.Vary, ",") != "target,/amount_minor,/reason,/meta/n" {
		t.Fatalf("Allowance = %+v", a)
	}
	if k, m, ok, _ := tool.VaryOf("/amount_minor"); k != VaryInteger || m != 500000 || !ok {
		t.Errorf("VaryOf(/amount_minor) = %v %d %v, want integer 500000", k, m, ok)
	}
	if k, _, _, e := tool.VaryOf("/reason"); k != VaryEnum || strings.Join(e, ",") != "duplicate,fraud,other" {
		t.Errorf("VaryOf(/reason) = %v %v", k, e)
	}
	if !tool.IsRequired("/reason") || tool.IsRequired("/flag") || tool.IsRequired("/meta/n") {
		t.Error("IsRequired wrong")
	}

	// Default off.
	r, err = Parse([]byte(toolFile(refundArgs)))
	if err != nil {
		t.Fatal(err)
	}
	if tool, _ := r.Tool("demo.tool"); tool.Allowance != nil {
		t.Errorf("Allowance = %+v without the block, want nil", tool.Allowance)
	}
}

func TestAllowanceLintRefusals(t *testing.T) {
	tests := []struct {
		name, block, path, fragment string
		line                        int
	}{
		{"unknown pointer", "    allowance: {max_uses: 5, max_for: 1h, vary: [/amount]}\n", "allowance/vary/0", "amount is not a declared property of args", 0},
		{"not a pointer", "    allowance: {max_uses: 5, max_for: 1h, vary: [amount_minor]}\n", "allowance/vary/0", "neither target nor a JSON Pointer", 0},
		{"free string", "    allowance: {max_uses: 5, max_for: 1h, vary: [/meta]}\n", "allowance/vary/0", "only integers (with a minimum, bounded by a maximum) and string enums", 0},
		{"no minimum", "    allowance: {max_uses: 5, max_for: 1h, vary: [/count]}\n", "allowance/vary/0", "/count is an integer without a minimum", 0},
		{"boolean", "    allowance: {max_uses: 5, max_for: 1h, vary: [/flag]}\n", "allowance/vary/0", "/flag is a boolean", 0},
		{"array", "    allowance: {max_uses: 5, max_for: 1h, vary: [/lines]}\n", "allowance/vary/0", "/lines is an array", 0},
		{"const", "    allowance: {max_uses: 5, max_for: 1h, vary: [/kind]}\n", "allowance/vary/0", "/kind is a constant", 0},
		{"informational", "    allowance: {max_uses: 5, max_for: 1h, vary: [/note]}\n", "allowance/vary/0", "is informational", 0},
		{"currency", "    allowance: {max_uses: 5, max_for: 1h, vary: [/amount_minor, /currency]}\n", "allowance/vary/1", "may vary only while its currency is fixed", 0},
		{"twice", "    allowance: {max_uses: 5, max_for: 1h, vary: [target, target]}\n", "allowance/vary/1", "listed twice", 0},
		{"max_uses zero", "    allowance: {max_uses: 0, max_for: 1h}\n", "allowance/max_uses", "between 1 and 1000, not 0", 0},
		{"max_uses over", "    allowance: {max_uses: 1001, max_for: 1h}\n", "allowance/max_uses", "between 1 and 1000, not 1001", 0},
		{"max_for short", "    allowance: {max_uses: 5, max_for: 59s}\n", "allowance/max_for", "from 1m to 24h, not 59s", 0},
		{"max_for long", "    allowance: {max_uses: 5, max_for: 25h}\n", "allowance/max_for", "from 1m to 24h, not 25h", 0},
		{"missing max_uses", "    allowance: {max_for: 1h}\n", "allowance", "max_uses is required", 0},
		{"missing max_for", "    allowance: {max_uses: 3}\n", "allowance", "max_for is required", 0},
		{"unknown field", "    allowance: {max_uses: 3, max_for: 1h, uses: 3}\n", "allowance", "unknown field uses", 0},
		{"passkey tool", "    approve_with: passkey\n    allowance: {max_uses: 3, max_for: 1h}\n", "allowance", "never covered by an allowance", 0},
		{"passkey rule", "    rules:\n      - {id: big, when: 'args.amount_minor > 100', then: ask, approve_with: passkey}\n    allowance: {max_uses: 3, max_for: 1h}\n", "allowance", "never covered by an allowance", 0},
		{"line of a bad pointer", "    allowance:\n      max_uses: 3\n      max_for: 1h\n      vary:\n        - target\n        - /nope\n", "allowance/vary/1", "nope", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := toolFile(refundArgs + tt.block)
			if tt.line < 0 { // the line of the last line of the block
				tt.line = strings.Count(file, "\n")
			}
			var got []string
			for _, p := range lintProblems(t, file) {
				if p.Tool == "demo.tool" && p.Path == tt.path && strings.Contains(p.Message, tt.fragment) && p.Line > 0 &&
					(tt.line == 0 || p.Line == tt.line) {
					return
				}
				got = append(got, p.String())
			}
			t.Errorf("no problem at %s containing %q (line %d); got %q", tt.path, tt.fragment, tt.line, got)
		})
	}
}

// The definition digest a call records covers the allowance block: any
// change to it ends allowances given under the old definition.
func TestAllowanceChangesDefinitionDigest(t *testing.T) {
	digest := func(block string) string {
		t.Helper()
		r, err := Parse([]byte(toolFile(refundArgs + block)))
		if err != nil {
			t.Fatal(err)
		}
		tool, _ := r.Tool("demo.tool")
		return tool.DefinitionDigest
	}
	seen := map[string]string{}
	for _, block := range []string{
		"",
		"    allowance: {max_uses: 20, max_for: 1h}\n",
		"    allowance: {max_uses: 21, max_for: 1h}\n",
		"    allowance: {max_uses: 20, max_for: 2h}\n",
		"    allowance: {max_uses: 20, max_for: 1h, vary: [target]}\n",
		"    allowance: {max_uses: 20, max_for: 1h, vary: [target, /amount_minor]}\n",
	} {
		d := digest(block)
		if other, dup := seen[d]; dup {
			t.Errorf("%q and %q share the definition digest %s", block, other, d)
		}
		seen[d] = block
	}
	if digest("    allowance: {max_uses: 20, max_for: 1h}\n") != digest("    allowance:\n      max_uses: 20 # twenty\n      max_for: 1h\n") {
		t.Error("layout and comments changed the definition digest")
	}
}
