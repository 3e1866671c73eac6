package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// digestRun runs the console in-process with stdin as standard input.
func digestRun(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	getenv := func(string) string { return "" }
	code = run(context.Background(), append([]string{"digest"}, args...), getenv, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

const (
	refundProposal = `{
  "tool": "payments.refund",
  "target": "acct:1",
  "rationale": "charged twice",
  "args": {"currency": "EUR", "amount_minor": 1250, "note": "caf\u00e9 \/ <ok>"}
}`
	refundCanonical = `{"actor":"agent:billing-bot","args":{"amount_minor":1250,"currency":"EUR","note":"café / <ok>"},"audience":"payments-host","target":"acct:1","tool":"payments.refund","v":1}`
)

func refundDigest() string {
	sum := sha256.Sum256([]byte("countersign/v1/call:" + refundCanonical))
	return hex.EncodeToString(sum[:])
}

func TestDigestCommand(t *testing.T) {
	file := filepath.Join(t.TempDir(), "proposal.json")
	if err := os.WriteFile(file, []byte(refundProposal), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  string
	}{
		{"stdin", refundProposal, []string{"--actor", "agent:billing-bot", "--audience", "payments-host"}, refundDigest() + "\n"},
		{"dash for stdin", refundProposal, []string{"-actor=agent:billing-bot", "-audience=payments-host", "-"}, refundDigest() + "\n"},
		{"file", "", []string{"--actor", "agent:billing-bot", "--audience", "payments-host", file}, refundDigest() + "\n"},
		{"flags after the file", "", []string{file, "--audience", "payments-host", "--actor", "agent:billing-bot"}, refundDigest() + "\n"},
		{"canonical", refundProposal, []string{"--canonical", "--actor", "agent:billing-bot", "--audience", "payments-host"}, refundCanonical},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := digestRun(t, tt.stdin, tt.args...)
			if code != 0 || stdout != tt.want {
				t.Errorf("exit %d, stdout %q (stderr %q), want 0 and %q", code, stdout, stderr, tt.want)
			}
		})
	}
}

func TestDigestCommandContextMatters(t *testing.T) {
	_, a, _ := digestRun(t, refundProposal, "--actor", "agent:billing-bot", "--audience", "payments-host")
	_, b, _ := digestRun(t, refundProposal, "--actor", "agent:other", "--audience", "payments-host")
	_, c, _ := digestRun(t, refundProposal, "--actor", "agent:billing-bot", "--audience", "other-host")
	if a == b || a == c || b == c {
		t.Errorf("digests under three contexts: %q %q %q, want all different", a, b, c)
	}
}

type errorBody struct {
	Error struct {
		Code     string `json:"code"`
		Message  string `json:"message"`
		Problems []struct {
			Code    string `json:"code"`
			Path    string `json:"path"`
			Message string `json:"message"`
		} `json:"problems"`
	} `json:"error"`
}

func TestDigestCommandRefuses(t *testing.T) {
	tests := []struct {
		name     string
		stdin    string
		code     string
		message  string
		problems []string // "code path"
	}{
		{"actor in the body", `{"tool":"payments.refund","target":"acct:1","args":{},"actor":"agent:root"}`,
			"invalid_arguments", "1 problem in the proposal", []string{"unknown_field /actor"}},
		{"several problems", `{"tool":"Pay","args":[],"audience":"x"}`,
			"invalid_arguments", "4 problems in the proposal", []string{"unknown_field /audience", "invalid_tool /tool", "missing_field /target", "wrong_type /args"}},
		{"float", `{"tool":"t","target":"x","args":{"amount":12.5}}`,
			"float_not_allowed", "has a fraction or exponent", []string{"float_not_allowed /args/amount"}},
		{"malformed", `{"tool":"t",`,
			"malformed_json", "line 1, column 13 (byte 12)", []string{"malformed_json "}},
		{"empty input", ``, "malformed_json", "end of input", []string{"malformed_json "}},
		{"duplicate", `{"tool":"t","tool":"t","target":"x","args":{}}`,
			"duplicate_key", "appears more than once", []string{"duplicate_key /tool"}},
		{"too large", `{"tool":"t","target":"x","args":{"blob":"` + strings.Repeat("a", 256<<10) + `"}}`,
			"too_large", "at most 262144", []string{"too_large "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := digestRun(t, tt.stdin, "--actor", "agent:billing-bot", "--audience", "payments-host")
			if code != 2 {
				t.Fatalf("exit %d (stderr %q), want 2", code, stderr)
			}
			if !strings.HasSuffix(stdout, "}\n") || strings.Count(stdout, "\n") != 1 {
				t.Errorf("stdout %q is not one line of JSON", stdout)
			}
			var body errorBody
			dec := json.NewDecoder(strings.NewReader(stdout))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&body); err != nil {
				t.Fatalf("stdout %q: %v", stdout, err)
			}
			if body.Error.Code != tt.code || !strings.Contains(body.Error.Message, tt.message) {
				t.Errorf("error = %s %q, want %s with %q", body.Error.Code, body.Error.Message, tt.code, tt.message)
			}
			var got []string
			for _, p := range body.Error.Problems {
				got = append(got, p.Code+" "+p.Path)
				if p.Message == "" {
					t.Errorf("problem %s %s has no message", p.Code, p.Path)
				}
			}
			if strings.Join(got, "|") != strings.Join(tt.problems, "|") {
				t.Errorf("problems = %q, want %q", got, tt.problems)
			}
		})
	}
}

func TestDigestCommandUsage(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"no actor", []string{"--audience", "payments-host"}, 2, "--actor and --audience are required"},
		{"no audience", []string{"--actor", "agent:billing-bot"}, 2, "--actor and --audience are required"},
		{"empty actor", []string{"--actor", "", "--audience", "payments-host"}, 2, "usage: console digest"},
		{"unknown flag", []string{"--actor", "a", "--audience", "b", "--sha1"}, 2, "flag provided but not defined: -sha1"},
		{"two files", []string{"--actor", "a", "--audience", "b", "x.json", "y.json"}, 2, "one proposal at a time"},
		{"missing file", []string{"--actor", "a", "--audience", "b", filepath.Join(dir, "absent.json")}, 1, "absent.json"},
		{"help", []string{"-h"}, 0, "usage: console digest"},
		{"actor not UTF-8", []string{"--actor", "agent:\xff", "--audience", "b"}, 2, "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := digestRun(t, refundProposal, tt.args...)
			if code != tt.code || !strings.Contains(stderr, tt.stderr) {
				t.Errorf("exit %d, stderr %q, want %d mentioning %q", code, stderr, tt.code, tt.stderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing", stdout)
			}
		})
	}
}

// TestDigestDocError checks the error example of docs/canonical.md against
// the command's output for the body shown beside it.
func TestDigestDocError(t *testing.T) {
	raw, err := os.ReadFile(filepath.FromSlash("../../docs/canonical.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	block := func(name string) string {
		marker := "<!-- example:" + name + " -->\n```json\n"
		i := strings.Index(doc, marker)
		if i < 0 {
			t.Fatalf("docs/canonical.md: no %q block", name)
		}
		rest := doc[i+len(marker):]
		return rest[:strings.Index(rest, "```")]
	}
	code, stdout, stderr := digestRun(t, block("error-input"), "--actor", "agent:billing-bot", "--audience", "payments-host")
	if want := block("error"); code != 2 || stdout != want {
		t.Errorf("exit %d, stdout\n%s(stderr %q)\nthe page shows\n%s", code, stdout, stderr, want)
	}
}

// With --tools the digest leaves out the tool's informational members, so
// it is the digest the console shows; without it, a note says they are in.
func TestDigestWithTools(t *testing.T) {
	const proposal = `{"tool":"payments.refund","target":"invoice:INV-1042","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate","notes":"not bound"}}`
	bound := `{"actor":"agent:billing-bot","args":{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"},"audience":"payments-host","target":"invoice:INV-1042","tool":"payments.refund","v":1}`
	sum := sha256.Sum256([]byte("countersign/v1/call:" + bound))
	want := hex.EncodeToString(sum[:]) + "\n"
	ctx := []string{"--actor", "agent:billing-bot", "--audience", "payments-host"}
	code, stdout, stderr := digestRun(t, proposal, append(ctx, "--tools", "../../examples/tools.yaml")...)
	if code != 0 || stdout != want || stderr != "" {
		t.Errorf("with --tools: exit %d, %q (stderr %q), want %q", code, stdout, stderr, want)
	}
	code, stdout, _ = digestRun(t, proposal, append(ctx, "--tools", "../../examples/tools.yaml", "--canonical")...)
	if code != 0 || stdout != bound {
		t.Errorf("--canonical with --tools: %q, want %q", stdout, bound)
	}
	code, stdout, stderr = digestRun(t, proposal, ctx...)
	if code != 0 || stdout == want || !strings.Contains(stderr, "informational members are included") {
		t.Errorf("without --tools: exit %d, %q, stderr %q; want another digest and the note", code, stdout, stderr)
	}
	code, stdout, _ = digestRun(t, strings.Replace(proposal, "payments.refund", "payments.nope", 1), append(ctx, "--tools", "../../examples/tools.yaml")...)
	if code != 2 || !strings.Contains(stdout, `"unknown_tool"`) {
		t.Errorf("an unknown tool: exit %d, %s", code, stdout)
	}
}
