package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/canonical"
	"github.com/countersign/countersign/internal/policy"
)

const exampleTools = "../../examples/tools.yaml"

// runConsole runs the console in-process and returns exit code, stdout and
// stderr.
func runConsole(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := run(context.Background(), args, func(string) string { return "" }, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

type validOutput struct {
	Valid    bool   `json:"valid"`
	Tool     string `json:"tool"`
	Actor    string `json:"actor"`
	Audience string `json:"audience"`
	Digest   string `json:"digest"`
}

type refusalOutput struct {
	Error struct {
		Code     string              `json:"code"`
		Message  string              `json:"message"`
		Problems []canonical.Problem `json:"problems"`
	} `json:"error"`
}

// wantDigest computes a digest independently of the tools package: the
// envelope over args as given (informational members already removed).
func wantDigest(t *testing.T, actor, audience, tool, target, args string) string {
	t.Helper()
	v, err := canonical.Parse([]byte(args))
	if err != nil {
		t.Fatal(err)
	}
	d, err := canonical.Envelope{Actor: actor, Audience: audience, Tool: tool, Target: target, Args: v.(canonical.Object)}.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestValidateCommandAccepts(t *testing.T) {
	refund := `{"tool":"payments.refund","target":"invoice:INV-1001","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate","notes":"called twice"},"rationale":"charged twice"}`
	bound := `{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}`
	file := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(file, []byte(refund), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		stdin  string
		args   []string
		actor  string
		aud    string
		stderr string
	}{
		{"stdin", refund, []string{"validate", "--tools", exampleTools}, "cli", "payments-host", ""},
		{"stdin dash", refund, []string{"validate", "--tools", exampleTools, "-"}, "cli", "payments-host", ""},
		{"file", "", []string{"validate", file, "--tools", exampleTools}, "cli", "payments-host", ""},
		{"inline", "", []string{"validate", "--tools", exampleTools, refund}, "cli", "payments-host", ""},
		{"actor", refund, []string{"validate", "--tools", exampleTools, "--actor", "agent:billing-bot"}, "agent:billing-bot", "payments-host", ""},
		{"other audience", refund, []string{"validate", "--tools", exampleTools, "--audience", "mail-host"}, "cli", "mail-host", "audience_not_allowed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runConsole(t, tt.stdin, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d, want 0; stdout %s stderr %s", code, stdout, stderr)
			}
			var got validOutput
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("stdout %q: %v", stdout, err)
			}
			want := validOutput{Valid: true, Tool: "payments.refund", Actor: tt.actor, Audience: tt.aud,
				Digest: wantDigest(t, tt.actor, tt.aud, "payments.refund", "invoice:INV-1001", bound)}
			if got != want {
				t.Errorf("output %+v, want %+v", got, want)
			}
			if tt.stderr == "" && stderr != "" || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr %q, want %q", stderr, tt.stderr)
			}
		})
	}
}

func TestValidateCommandInformationalNotBound(t *testing.T) {
	digest := func(notes string) string {
		body := `{"tool":"payments.refund","target":"invoice:INV-7","args":{"amount_minor":5,"currency":"EUR","reason_code":"fraud","notes":"` + notes + `"}}`
		code, stdout, stderr := runConsole(t, body, "validate", "--tools", exampleTools)
		if code != 0 {
			t.Fatalf("exit %d: %s %s", code, stdout, stderr)
		}
		var got validOutput
		if err := json.Unmarshal([]byte(stdout), &got); err != nil {
			t.Fatal(err)
		}
		return got.Digest
	}
	if a, b := digest("first"), digest("second"); a != b {
		t.Errorf("digest changed with the informational notes: %s vs %s", a, b)
	}
}

func TestValidateCommandRefuses(t *testing.T) {
	tests := []struct {
		name     string
		body     string
		code     string
		message  string
		problems []string
	}{
		{"two problems", `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":1299,"reason_code":"fraud","sql":"x"}}`,
			"invalid_arguments", "2 problems in the proposal", []string{"unknown_field /args/sql", "missing_field /args/currency"}},
		{"one problem", `{"tool":"payments.refund","target":"invoice:INV-1","args":{"amount_minor":5000001,"currency":"USD","reason_code":"fraud"}}`,
			"invalid_arguments", "1 problem in the proposal", []string{"out_of_range /args/amount_minor"}},
		{"unknown tool", `{"tool":"payments.refnd","target":"invoice:INV-1","args":{}}`,
			"unknown_tool", "payments.refnd is not a tool of this console", []string{"unknown_tool /tool"}},
		{"float", `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Paris","limit":5.0}}`,
			"float_not_allowed", "", []string{"float_not_allowed /args/limit"}},
		{"duplicate key", `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Paris","city":"Rome"}}`,
			"duplicate_key", "", []string{"duplicate_key /args/city"}},
		{"malformed", `{"tool":`, "malformed_json", "", []string{"malformed_json /tool"}},
		{"actor in the body", `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Paris"},"actor":"root"}`,
			"invalid_arguments", "1 problem in the proposal", []string{"unknown_field /actor"}},
		{"target pattern", `{"tool":"files.delete","target":"file:/srv/shared/../../etc/passwd","args":{"reason":"x"}}`,
			"invalid_arguments", "1 problem in the proposal", []string{"pattern_mismatch /target"}},
		{"weather sql", `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Paris","sql":"x"}}`,
			"invalid_arguments", "1 problem in the proposal", []string{"unknown_field /args/sql"}},
		{"weather no city", `{"tool":"weather.search","target":"weather:forecast","args":{"limit":5}}`,
			"invalid_arguments", "1 problem in the proposal", []string{"missing_field /args/city"}},
		{"weather blank city", `{"tool":"weather.search","target":"weather:forecast","args":{"city":"  "}}`,
			"invalid_arguments", "1 problem in the proposal", []string{"empty_string /args/city"}},
		{"weather null city and boolean limit", `{"tool":"weather.search","target":"weather:forecast","args":{"city":null,"limit":true}}`,
			"invalid_arguments", "2 problems in the proposal", []string{"wrong_type /args/city", "wrong_type /args/limit"}},
		{"too large", `{"tool":"weather.search","target":"weather:forecast","args":{"city":"` + strings.Repeat("a", canonical.MaxBodyBytes) + `"}}`,
			"too_large", "", []string{"too_large "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runConsole(t, tt.body, "validate", "--tools", exampleTools)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stdout %s stderr %s", code, stdout, stderr)
			}
			var got refusalOutput
			if err := json.Unmarshal([]byte(stdout), &got); err != nil {
				t.Fatalf("stdout %q: %v", stdout, err)
			}
			if got.Error.Code != tt.code {
				t.Errorf("code %q, want %q", got.Error.Code, tt.code)
			}
			if !strings.Contains(got.Error.Message, tt.message) || got.Error.Message == "" {
				t.Errorf("message %q, want it to contain %q", got.Error.Message, tt.message)
			}
			var problems []string
			for _, p := range got.Error.Problems {
				problems = append(problems, p.Code+" "+p.Path)
				if p.Message == "" {
					t.Errorf("problem %s at %s has no message", p.Code, p.Path)
				}
			}
			if !slices.Equal(problems, tt.problems) {
				t.Errorf("problems %q, want %q", problems, tt.problems)
			}
		})
	}
}

func TestValidateCommandUsage(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("tools:\n  a.b: {target: x, args: {type: object}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no tools flag", []string{"validate"}, 2, "--tools FILE is required"},
		{"two proposals", []string{"validate", "--tools", exampleTools, "a.json", "b.json"}, 2, "one proposal at a time"},
		{"unknown flag", []string{"validate", "--tool", exampleTools}, 2, "flag provided but not defined"},
		{"help", []string{"validate", "-h"}, 0, "usage: console validate"},
		{"refused tools file", []string{"validate", "--tools", bad}, 1, "a.b: audience is required"},
		{"missing tools file", []string{"validate", "--tools", filepath.Join(t.TempDir(), "none.yaml")}, 1, "no such file"},
		{"missing proposal file", []string{"validate", "--tools", exampleTools, filepath.Join(t.TempDir(), "none.json")}, 1, "no such file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runConsole(t, `{"tool":"weather.search","target":"weather:forecast","args":{"city":"Paris"}}`, tt.args...)
			if code != tt.code {
				t.Errorf("exit %d, want %d; stdout %s", code, tt.code, stdout)
			}
			if !strings.Contains(stderr, tt.stderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr, tt.stderr)
			}
		})
	}
}

func TestToolsLintCommand(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte(`tools:
  payments.refund:
    audience: payments-host
    target: '^invoice:INV-[0-9]+$'
    grant_ttl: 600s
    args:
      type: object
      additionalProperties: false
      properties:
        filter: {type: object, properties: {q: {type: string}}}
        amount: {type: number}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runConsole(t, "", "tools", "lint", exampleTools)
	if code != 0 {
		t.Fatalf("lint %s: exit %d, stdout %s stderr %s", exampleTools, code, stdout, stderr)
	}
	pol, err := policy.Load(exampleTools)
	if err != nil {
		t.Fatal(err)
	}
	rules := 0
	for _, n := range pol.Registry().Names() {
		rules += len(pol.Rules(n))
	}
	if want := fmt.Sprintf("%s: ok, 7 tools (email.send, files.delete, payments.refund, releases.deploy, reports.read, search.query, weather.search), %d rules; digest %s\n",
		exampleTools, rules, pol.ToolsDigest()); stdout != want {
		t.Errorf("stdout %q, want %q", stdout, want)
	}

	code, stdout, stderr = runConsole(t, "", "tools", "lint", bad)
	if code != 2 {
		t.Fatalf("lint bad file: exit %d, want 2", code)
	}
	want := []string{
		bad + ":5: payments.refund: grant_ttl: 600s is over the 300s limit",
		bad + ":10: payments.refund: args/properties/filter: object schema without additionalProperties: false",
		bad + ":11: payments.refund: args/properties/amount/type: number allows fractions",
	}
	lines := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), stdout)
	}
	for i := range want {
		if !strings.HasPrefix(lines[i], want[i]) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], want[i])
		}
	}
	if !strings.Contains(stderr, "3 problems") {
		t.Errorf("stderr %q, want the count", stderr)
	}

	for _, tt := range []struct {
		args []string
		code int
	}{
		{[]string{"tools"}, 2},
		{[]string{"tools", "check", exampleTools}, 2},
		{[]string{"tools", "lint"}, 2},
		{[]string{"tools", "lint", exampleTools, bad}, 2},
		{[]string{"tools", "lint", filepath.Join(dir, "none.yaml")}, 1},
		{[]string{"tools", "-h"}, 0},
	} {
		if code, _, _ := runConsole(t, "", tt.args...); code != tt.code {
			t.Errorf("%q: exit %d, want %d", tt.args, code, tt.code)
		}
	}
}

// Each problem of the notifications section is a line of its own, and
// counts as one, however many one part of the section has.
func TestToolsLintNotificationProblemsOnePerLine(t *testing.T) {
	file := filepath.Join(t.TempDir(), "tools.yaml")
	if err := os.WriteFile(file, []byte(`tools:
  reports.read:
    audience: reports-host
    target: '.+'
    args: {type: object, additionalProperties: false}
notifications:
  bogus: 1
  lease: notaduration
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := runConsole(t, "", "tools", "lint", file)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stdout %s stderr %s", code, stdout, stderr)
	}
	want := []string{
		file + ": notifications: line 7: unknown field bogus (fields: public_url, channels, routes, retry, lease, keep)",
		file + `: notifications: line 8: "notaduration" is not a duration like 30s or 10m`,
	}
	if got := strings.Split(strings.TrimSuffix(stdout, "\n"), "\n"); !slices.Equal(got, want) {
		t.Fatalf("stdout lines\n%q\nwant\n%q", got, want)
	}
	if !strings.Contains(stderr, "2 problems") {
		t.Errorf("stderr %q, want 2 problems", stderr)
	}
}
