package tools

import (
	"slices"
	"strings"
	"testing"
)

const consoleArgs = `    informational: [/notes]
    args:
      type: object
      additionalProperties: false
      properties:
        amount_minor: {type: integer}
        environment: {type: string}
        notes: {type: string}
`

func TestConsoleFields(t *testing.T) {
	r, err := Parse([]byte(toolFile(consoleArgs + `    summary: [/amount_minor, /environment]
    confirm: target
    deny_reasons: [Duplicate request, Needs a change ticket]
`)))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ := r.Tool("demo.tool")
	if !slices.Equal(tool.Summary, []string{"/amount_minor", "/environment"}) {
		t.Errorf("summary %v", tool.Summary)
	}
	if tool.Confirm == nil || !tool.Confirm.Target || tool.Confirm.Expected("demo:x") != "demo:x" || tool.Confirm.Describe() != "the target" {
		t.Errorf("confirm %+v", tool.Confirm)
	}
	if !slices.Equal(tool.DenyReasons, []string{"Duplicate request", "Needs a change ticket"}) {
		t.Errorf("deny reasons %v", tool.DenyReasons)
	}
	r, err = Parse([]byte(toolFile(consoleArgs + "    confirm: {word: DELETE}\n")))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ = r.Tool("demo.tool")
	if tool.Confirm == nil || tool.Confirm.Target || tool.Confirm.Expected("demo:x") != "DELETE" || tool.Confirm.Describe() != "the word DELETE" {
		t.Errorf("confirm word %+v", tool.Confirm)
	}
	// A tool that says none of it asks for nothing.
	r, err = Parse([]byte(toolFile(consoleArgs)))
	if err != nil {
		t.Fatal(err)
	}
	tool, _ = r.Tool("demo.tool")
	if tool.Summary != nil || tool.Confirm != nil || tool.DenyReasons != nil {
		t.Errorf("defaults %v %+v %v", tool.Summary, tool.Confirm, tool.DenyReasons)
	}
}

func TestConsoleFieldRefusals(t *testing.T) {
	tests := []struct {
		name, fields, want string
	}{
		{"summary of an undeclared member", "    summary: [/nope]\n", "summary: /nope: nope is not a declared property"},
		{"summary of an informational member", "    summary: [/notes]\n", "/notes is informational"},
		{"summary listed twice", "    summary: [/environment, /environment]\n", "listed twice"},
		{"summary too long", "    summary: [/amount_minor, /environment, /amount_minor/a, /b, /c, /d, /e]\n", "at most 6 members"},
		{"summary not a list", "    summary: /environment\n", "must be a list of JSON Pointers"},
		{"confirm of something else", "    confirm: actor\n", "must be target, none or {word: WORD}"},
		{"confirm word with a space", "    confirm: {word: 'DELETE IT'}\n", "must be one word"},
		{"confirm word missing", "    confirm: {}\n", "word is required"},
		{"confirm unknown field", "    confirm: {word: X, phrase: Y}\n", "unknown field phrase"},
		{"unknown risk", "    risk: severe\n", "risk: must be low, medium or high, not severe"},
		{"unknown effect", "    effects: [money, fire]\n", "unknown effect fire"},
		{"effect twice", "    effects: [money, money]\n", "money is listed twice"},
		{"read-only with another effect", "    effects: [read-only, money]\n", "read-only cannot be listed with other effects"},
		{"effects not a list", "    effects: money\n", "must be a list of money, destructive"},
		{"deny reasons not a list", "    deny_reasons: Duplicate\n", "must be a list of reasons"},
		{"empty deny reason", "    deny_reasons: ['']\n", "non-empty text"},
		{"deny reason twice", "    deny_reasons: [Dup, Dup]\n", "listed twice"},
		{"deny reason with a control", "    deny_reasons: [\"a\\u200bb\"]\n", "invisible characters"},
		{"deny reason too long", "    deny_reasons: [" + strings.Repeat("x", MaxDenyReasonBytes+1) + "]\n", "at most 200 bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ps := lintProblems(t, toolFile(consoleArgs+tc.fields))
			var all []string
			for _, p := range ps {
				all = append(all, p.String())
			}
			if !strings.Contains(strings.Join(all, "\n"), tc.want) {
				t.Errorf("problems %q, want one containing %q", all, tc.want)
			}
		})
	}
}

func TestRiskAndEffects(t *testing.T) {
	parse := func(fields string) *Tool {
		t.Helper()
		r, err := Parse([]byte(toolFile(consoleArgs + fields)))
		if err != nil {
			t.Fatal(err)
		}
		tool, _ := r.Tool("demo.tool")
		return tool
	}
	tool := parse("    risk: medium\n    effects: [money, external]\n")
	if tool.Risk != RiskMedium || !slices.Equal(tool.Effects, []string{"money", "external"}) || tool.Confirm != nil {
		t.Errorf("medium: risk %q effects %v confirm %+v", tool.Risk, tool.Effects, tool.Confirm)
	}
	// A high-risk tool asks for the target unless it says otherwise.
	tool = parse("    risk: high\n    effects: [destructive]\n")
	if tool.Confirm == nil || !tool.Confirm.Target {
		t.Errorf("high risk without confirm: %+v, want the target asked for", tool.Confirm)
	}
	tool = parse("    risk: high\n    confirm: {word: DROP}\n")
	if tool.Confirm == nil || tool.Confirm.Word != "DROP" {
		t.Errorf("high risk with a word: %+v", tool.Confirm)
	}
	tool = parse("    risk: high\n    confirm: none\n")
	if tool.Confirm != nil {
		t.Errorf("high risk with confirm: none asks for %+v", tool.Confirm)
	}
	// The declaration is part of the tool's definition.
	if parse("    risk: low\n").DefinitionDigest == parse("    risk: high\n").DefinitionDigest {
		t.Error("risk does not change the definition digest")
	}
	if RiskRank(RiskHigh) <= RiskRank(RiskMedium) || RiskRank(RiskMedium) <= RiskRank(RiskLow) || RiskRank("") != 0 {
		t.Error("risk ranks out of order")
	}
}

// The example tools file declares a risk and effects for every tool, so a
// reader copying any entry copies both.
func TestExampleToolsDeclareRiskAndEffects(t *testing.T) {
	r, err := Load(examplesFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range r.Names() {
		tool, _ := r.Tool(name)
		if tool.Risk == "" || len(tool.Effects) == 0 {
			t.Errorf("%s: risk %q effects %v", name, tool.Risk, tool.Effects)
		}
	}
}
