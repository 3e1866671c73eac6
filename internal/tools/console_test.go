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
		{"confirm of something else", "    confirm: actor\n", "must be target or {word: WORD}"},
		{"confirm word with a space", "    confirm: {word: 'DELETE IT'}\n", "must be one word"},
		{"confirm word missing", "    confirm: {}\n", "word is required"},
		{"confirm unknown field", "    confirm: {word: X, phrase: Y}\n", "unknown field phrase"},
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
