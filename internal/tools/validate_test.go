package tools

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/countersign/countersign/internal/canonical"
)

const examplesFile = "../../examples/tools.yaml"

// MustLoad loads a tools file or fails the test.
func MustLoad(tb testing.TB, path string) *Registry {
	tb.Helper()
	r, err := Load(path)
	if err != nil {
		tb.Fatalf("Load(%s): %v", path, err)
	}
	return r
}

// proposalProblems parses body as a proposal and checks it against r, the
// way the API does: parse problems first, then the registry's.
func proposalProblems(tb testing.TB, r *Registry, body string) canonical.Problems {
	tb.Helper()
	p, err := canonical.ParseProposal([]byte(body))
	if err != nil {
		var ps canonical.Problems
		if !errors.As(err, &ps) {
			tb.Fatalf("ParseProposal error %T %v, want Problems", err, err)
		}
		return ps
	}
	_, ps := r.Check(p)
	return ps
}

// summary renders problems as "code path" lines for exact comparison.
func summary(ps canonical.Problems) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Code + " " + p.Path
	}
	return out
}

func proposal(tool, target, args string) string {
	return fmt.Sprintf(`{"tool":%q,"target":%q,"args":%s}`, tool, target, args)
}

type fixture struct {
	name string
	args string
	// target overrides the tool's legal target when not empty.
	target string
	want   []string
}

var legalTargets = map[string]string{
	"payments.refund": "invoice:INV-1001",
	"files.delete":    "file:/srv/shared/reports/q1.csv",
	"releases.deploy": "service:billing-api",
	"reports.read":    "report:revenue",
	"email.send":      "mailbox:support@example.com",
	"search.query":    "index:tickets",
	"weather.search":  "weather:forecast",
}

var fixtures = map[string][]fixture{
	"payments.refund": {
		{name: "legal", args: `{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}`},
		{name: "legal with notes", args: `{"amount_minor":5000000,"currency":"JPY","reason_code":"fraud","notes":"customer called"}`},
		{name: "sql and proto", args: `{"amount_minor":1299,"currency":"USD","reason_code":"duplicate","sql":"x","__proto__":1}`,
			want: []string{"unknown_field /args/__proto__", "unknown_field /args/sql"}},
		{name: "missing currency", args: `{"amount_minor":1299,"reason_code":"duplicate"}`,
			want: []string{"missing_field /args/currency"}},
		{name: "white space reason", args: `{"amount_minor":1299,"currency":"USD","reason_code":" \t"}`,
			want: []string{"empty_string /args/reason_code"}},
		{name: "white space notes", args: `{"amount_minor":1299,"currency":"USD","reason_code":"fraud","notes":"\u00a0\n"}`,
			want: []string{"empty_string /args/notes"}},
		{name: "float amount", args: `{"amount_minor":12.5,"currency":"USD","reason_code":"duplicate"}`,
			want: []string{"float_not_allowed /args/amount_minor"}},
		{name: "float with zero fraction", args: `{"amount_minor":1299.0,"currency":"USD","reason_code":"duplicate"}`,
			want: []string{"float_not_allowed /args/amount_minor"}},
		{name: "amount zero", args: `{"amount_minor":0,"currency":"USD","reason_code":"duplicate"}`,
			want: []string{"out_of_range /args/amount_minor"}},
		{name: "amount over ceiling", args: `{"amount_minor":5000001,"currency":"USD","reason_code":"duplicate"}`,
			want: []string{"out_of_range /args/amount_minor"}},
		{name: "amount as string", args: `{"amount_minor":"1299","currency":"USD","reason_code":"duplicate"}`,
			want: []string{"wrong_type /args/amount_minor"}},
		{name: "amount as boolean", args: `{"amount_minor":true,"currency":"USD","reason_code":"duplicate"}`,
			want: []string{"wrong_type /args/amount_minor"}},
		{name: "currency null", args: `{"amount_minor":1,"currency":null,"reason_code":"duplicate"}`,
			want: []string{"wrong_type /args/currency"}},
		{name: "currency not listed", args: `{"amount_minor":1,"currency":"usd","reason_code":"duplicate"}`,
			want: []string{"enum_mismatch /args/currency"}},
		{name: "notes too long", args: `{"amount_minor":1,"currency":"USD","reason_code":"duplicate","notes":"` + strings.Repeat("é", 501) + `"}`,
			want: []string{"too_long /args/notes"}},
		{name: "notes at limit counts characters", args: `{"amount_minor":1,"currency":"USD","reason_code":"duplicate","notes":"` + strings.Repeat("é", 500) + `"}`},
		{name: "args empty", args: `{}`,
			want: []string{"missing_field /args/amount_minor", "missing_field /args/currency", "missing_field /args/reason_code"}},
		{name: "args not an object", args: `[]`,
			want: []string{"wrong_type /args"}},
		{name: "escaped member name", args: `{"amount_minor":1,"currency":"USD","reason_code":"fraud","a/b~c":1}`,
			want: []string{"unknown_field /args/a~1b~0c"}},
		{name: "several at once", target: "invoice:abc",
			args: `{"amount_minor":0,"currency":"GBP","sql":"DROP TABLE","notes":7}`,
			want: []string{
				"pattern_mismatch /target",
				"out_of_range /args/amount_minor",
				"enum_mismatch /args/currency",
				"wrong_type /args/notes",
				"unknown_field /args/sql",
				"missing_field /args/reason_code",
			}},
	},
	"files.delete": {
		{name: "legal", args: `{"reason":"obsolete export"}`},
		{name: "legal with backup false", args: `{"reason":"obsolete export","backup":false}`},
		{name: "traversal target", target: "file:/srv/shared/../../etc/passwd", args: `{"reason":"x"}`,
			want: []string{"pattern_mismatch /target"}},
		{name: "hidden file target", target: "file:/srv/shared/.ssh", args: `{"reason":"x"}`,
			want: []string{"pattern_mismatch /target"}},
		{name: "target outside", target: "file:/etc/passwd", args: `{"reason":"x"}`,
			want: []string{"pattern_mismatch /target"}},
		{name: "sql and proto", args: `{"reason":"x","sql":"x","__proto__":1}`,
			want: []string{"unknown_field /args/__proto__", "unknown_field /args/sql"}},
		{name: "missing reason", args: `{"backup":true}`,
			want: []string{"missing_field /args/reason"}},
		{name: "white space reason", args: `{"reason":"   "}`,
			want: []string{"empty_string /args/reason"}},
		{name: "empty reason", args: `{"reason":""}`,
			want: []string{"empty_string /args/reason"}},
		{name: "backup as string", args: `{"reason":"x","backup":"yes"}`,
			want: []string{"wrong_type /args/backup"}},
		{name: "backup as integer", args: `{"reason":"x","backup":1}`,
			want: []string{"wrong_type /args/backup"}},
		{name: "several at once", args: `{"backup":null,"recursive":true,"reason":""}`,
			want: []string{"wrong_type /args/backup", "empty_string /args/reason", "unknown_field /args/recursive"}},
	},
	"releases.deploy": {
		{name: "legal", args: `{"version":"v1.4.2","environment":"production","change_ticket":"CHG-12345"}`},
		{name: "legal with canary 0", args: `{"version":"v1.4.2","environment":"staging","change_ticket":"CHG-1234","canary_percent":0}`},
		{name: "sql and proto", args: `{"version":"v1.4.2","environment":"production","change_ticket":"CHG-12345","sql":"x","__proto__":1}`,
			want: []string{"unknown_field /args/__proto__", "unknown_field /args/sql"}},
		{name: "missing ticket", args: `{"version":"v1.4.2","environment":"production"}`,
			want: []string{"missing_field /args/change_ticket"}},
		{name: "version pattern", args: `{"version":"1.4","environment":"production","change_ticket":"CHG-12345"}`,
			want: []string{"pattern_mismatch /args/version"}},
		{name: "version pattern is searched, anchors in the pattern hold", args: `{"version":"v1.4.2; rm -rf /","environment":"production","change_ticket":"CHG-12345"}`,
			want: []string{"pattern_mismatch /args/version"}},
		{name: "white space version", args: `{"version":" ","environment":"production","change_ticket":"CHG-12345"}`,
			want: []string{"empty_string /args/version"}},
		{name: "float canary", args: `{"version":"v1.4.2","environment":"production","change_ticket":"CHG-12345","canary_percent":2.5}`,
			want: []string{"float_not_allowed /args/canary_percent"}},
		{name: "exponent canary", args: `{"version":"v1.4.2","environment":"production","change_ticket":"CHG-12345","canary_percent":1e1}`,
			want: []string{"float_not_allowed /args/canary_percent"}},
		{name: "canary over 100", args: `{"version":"v1.4.2","environment":"production","change_ticket":"CHG-12345","canary_percent":101}`,
			want: []string{"out_of_range /args/canary_percent"}},
		{name: "several at once", target: "service:Billing",
			args: `{"version":"latest","environment":"prod","canary_percent":-1,"force":true}`,
			want: []string{
				"pattern_mismatch /target",
				"out_of_range /args/canary_percent",
				"enum_mismatch /args/environment",
				"unknown_field /args/force",
				"pattern_mismatch /args/version",
				"missing_field /args/change_ticket",
			}},
	},
	"reports.read": {
		{name: "legal", args: `{"period":"2024-05"}`},
		{name: "legal with format", args: `{"period":"2024-12","format":"pdf"}`},
		{name: "sql and proto", args: `{"period":"2024-05","sql":"x","__proto__":1}`,
			want: []string{"unknown_field /args/__proto__", "unknown_field /args/sql"}},
		{name: "missing period", args: `{"format":"csv"}`,
			want: []string{"missing_field /args/period"}},
		{name: "month 13", args: `{"period":"2024-13"}`,
			want: []string{"pattern_mismatch /args/period"}},
		{name: "white space format", args: `{"period":"2024-01","format":"\t"}`,
			want: []string{"empty_string /args/format"}},
		{name: "several at once", target: "report:",
			args: `{"period":2024,"format":"xlsx","columns":["a"]}`,
			want: []string{"pattern_mismatch /target", "unknown_field /args/columns", "enum_mismatch /args/format", "wrong_type /args/period"}},
	},
	"email.send": {
		{name: "legal", args: `{"to":[{"address":"ana@example.org","name":"Ana"}],"subject":"Invoice","body":"Attached."}`},
		{name: "empty body allowed", args: `{"to":[{"address":"ana@example.org"}],"subject":"Ping","body":""}`},
		{name: "sql and proto", args: `{"to":[{"address":"ana@example.org"}],"subject":"s","body":"b","sql":"x","__proto__":1}`,
			want: []string{"unknown_field /args/__proto__", "unknown_field /args/sql"}},
		{name: "missing subject", args: `{"to":[{"address":"ana@example.org"}],"body":"b"}`,
			want: []string{"missing_field /args/subject"}},
		{name: "array item with an extra key", args: `{"to":[{"address":"ana@example.org"},{"address":"bo@example.org","bcc":true}],"subject":"s","body":"b"}`,
			want: []string{"unknown_field /args/to/1/bcc"}},
		{name: "array item missing address", args: `{"to":[{"name":"Ana"}],"subject":"s","body":"b"}`,
			want: []string{"missing_field /args/to/0/address"}},
		{name: "array item not an object", args: `{"to":["ana@example.org"],"subject":"s","body":"b"}`,
			want: []string{"wrong_type /args/to/0"}},
		{name: "no recipients", args: `{"to":[],"subject":"s","body":"b"}`,
			want: []string{"out_of_range /args/to"}},
		{name: "too many recipients", args: `{"to":[` + recipients(11) + `],"subject":"s","body":"b"}`,
			want: []string{"too_many_items /args/to"}},
		{name: "repeated recipient", args: `{"to":[{"address":"a@b.c"},{"address":"x@y.z"},{"address":"a@b.c"}],"subject":"s","body":"b"}`,
			want: []string{"duplicate_key /args/to/2"}},
		{name: "white space subject", args: `{"to":[{"address":"ana@example.org"}],"subject":"\u3000","body":"b"}`,
			want: []string{"empty_string /args/subject"}},
		{name: "white space name inside an item", args: `{"to":[{"address":"ana@example.org","name":" "}],"subject":"s","body":"b"}`,
			want: []string{"empty_string /args/to/0/name"}},
		{name: "several at once", target: "mailbox:ceo@evil.com",
			args: `{"to":[{"address":"not-an-address","cc":"x"},{"address":"bo@example.org","name":null,"reply_to":"z"}],"subject":"","attachments":[]}`,
			want: []string{
				"pattern_mismatch /target",
				"unknown_field /args/attachments",
				"empty_string /args/subject",
				"pattern_mismatch /args/to/0/address",
				"unknown_field /args/to/0/cc",
				"wrong_type /args/to/1/name",
				"unknown_field /args/to/1/reply_to",
				"missing_field /args/body",
			}},
	},
	"search.query": {
		{name: "legal", args: `{"query":"refund","filter":{"status":"open","tags":["billing","eu"]},"limit":10}`},
		{name: "legal minimal", args: `{"query":"refund"}`},
		{name: "sql and proto", args: `{"query":"q","sql":"x","__proto__":1}`,
			want: []string{"unknown_field /args/__proto__", "unknown_field /args/sql"}},
		{name: "missing query", args: `{"limit":5}`,
			want: []string{"missing_field /args/query"}},
		{name: "extra key inside nested object", args: `{"query":"q","filter":{"status":"open","sql":"x"}}`,
			want: []string{"unknown_field /args/filter/sql"}},
		{name: "two extra keys at two depths", args: `{"query":"q","filter":{"where":"1=1","__proto__":{}},"raw":true}`,
			want: []string{"unknown_field /args/filter/__proto__", "unknown_field /args/filter/where", "unknown_field /args/raw"}},
		{name: "tag item wrong type", args: `{"query":"q","filter":{"tags":["a",5,null]}}`,
			want: []string{"wrong_type /args/filter/tags/1", "wrong_type /args/filter/tags/2"}},
		{name: "too many tags", args: `{"query":"q","filter":{"tags":[` + strings.TrimSuffix(strings.Repeat(`"t",`, 21), ",") + `]}}`,
			want: []string{"too_many_items /args/filter/tags"}},
		{name: "white space query", args: `{"query":"\n\n"}`,
			want: []string{"empty_string /args/query"}},
		{name: "float limit", args: `{"query":"q","limit":10.0}`,
			want: []string{"float_not_allowed /args/limit"}},
		{name: "filter not an object", args: `{"query":"q","filter":"status=open"}`,
			want: []string{"wrong_type /args/filter"}},
		{name: "several at once", target: "index:",
			args: `{"query":"","filter":{"status":"deleted","created_after":"yesterday","tags":[" "],"or":[]},"limit":0}`,
			want: []string{
				"pattern_mismatch /target",
				"pattern_mismatch /args/filter/created_after",
				"unknown_field /args/filter/or",
				"enum_mismatch /args/filter/status",
				"empty_string /args/filter/tags/0",
				"out_of_range /args/limit",
				"empty_string /args/query",
			}},
	},
	"weather.search": {
		{name: "city", args: `{"city":"Paris"}`},
		{name: "city and limit", args: `{"city":"Paris","limit":5}`},
		{name: "sql", args: `{"city":"Paris","sql":"x"}`, want: []string{"unknown_field /args/sql"}},
		{name: "sql and proto", args: `{"city":"Paris","sql":"x","__proto__":1}`,
			want: []string{"unknown_field /args/__proto__", "unknown_field /args/sql"}},
		{name: "limit without city", args: `{"limit":5}`, want: []string{"missing_field /args/city"}},
		{name: "blank city", args: `{"city":"  "}`, want: []string{"empty_string /args/city"}},
		{name: "limit 5.0", args: `{"city":"Paris","limit":5.0}`, want: []string{"float_not_allowed /args/limit"}},
		{name: "null city", args: `{"city":null}`, want: []string{"wrong_type /args/city"}},
		{name: "boolean limit", args: `{"city":"Paris","limit":true}`, want: []string{"wrong_type /args/limit"}},
		{name: "false limit", args: `{"city":"Paris","limit":false}`, want: []string{"wrong_type /args/limit"}},
		{name: "limit 0", args: `{"city":"Paris","limit":0}`, want: []string{"out_of_range /args/limit"}},
		{name: "limit 51", args: `{"city":"Paris","limit":51}`, want: []string{"out_of_range /args/limit"}},
		{name: "several at once", args: `{"city":"","limit":"5","sql":"x","units":"metric"}`,
			want: []string{"empty_string /args/city", "wrong_type /args/limit", "unknown_field /args/sql", "unknown_field /args/units"}},
	},
}

func recipients(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`{"address":"user%d@example.org"}`, i)
	}
	return strings.Join(parts, ",")
}

func TestFixtures(t *testing.T) {
	r := MustLoad(t, examplesFile)
	for _, tool := range r.Names() {
		if len(fixtures[tool]) == 0 {
			t.Errorf("tool %s in %s has no fixtures", tool, examplesFile)
		}
	}
	for tool, cases := range fixtures {
		if _, ok := r.Tool(tool); !ok {
			t.Errorf("fixtures for %s, which %s does not declare", tool, examplesFile)
		}
		for _, c := range cases {
			t.Run(tool+"/"+c.name, func(t *testing.T) {
				target := legalTargets[tool]
				if c.target != "" {
					target = c.target
				}
				got := summary(proposalProblems(t, r, proposal(tool, target, c.args)))
				if !slices.Equal(got, c.want) {
					t.Errorf("problems\n got %q\nwant %q", got, c.want)
				}
			})
		}
	}
}

func TestEveryProblemHasMessage(t *testing.T) {
	r := MustLoad(t, examplesFile)
	for tool, cases := range fixtures {
		for _, c := range cases {
			for _, p := range proposalProblems(t, r, proposal(tool, legalTargets[tool], c.args)) {
				if strings.TrimSpace(p.Message) == "" {
					t.Errorf("%s/%s: problem %s at %s has no message", tool, c.name, p.Code, p.Path)
				}
			}
		}
	}
}

func TestMessages(t *testing.T) {
	r := MustLoad(t, examplesFile)
	tests := []struct {
		tool, target, args string
		path, want         string
	}{
		{"payments.refund", "invoice:INV-1", `{"amount_minor":1,"currency":"USD","reason_code":"fraud","sql":"x"}`,
			"/args/sql", "sql is not a parameter of payments.refund (parameters: amount_minor, currency, notes, reason_code)"},
		{"payments.refund", "invoice:INV-1", `{"amount_minor":1,"reason_code":"fraud"}`,
			"/args/currency", "currency is required"},
		{"payments.refund", "invoice:INV-1", `{"amount_minor":1,"currency":"GBP","reason_code":"fraud"}`,
			"/args/currency", "currency must be one of USD, EUR, JPY"},
		{"payments.refund", "invoice:INV-1", `{"amount_minor":5000001,"currency":"USD","reason_code":"fraud"}`,
			"/args/amount_minor", "amount_minor must be at most 5000000"},
		{"payments.refund", "invoice:INV-1", `{"amount_minor":"5","currency":"USD","reason_code":"fraud"}`,
			"/args/amount_minor", "amount_minor must be an integer, not a string"},
		{"payments.refund", "refund everything", `{"amount_minor":1,"currency":"USD","reason_code":"fraud"}`,
			"/target", "target must match ^invoice:INV-[0-9]+$ for payments.refund"},
		{"weather.search", "weather:forecast", `{"city":null}`,
			"/args/city", "city must be a string, not null"},
		{"weather.search", "weather:forecast", `{"city":" "}`,
			"/args/city", "city must not be empty or only white space"},
		{"search.query", "index:t", `{"query":"q","filter":{"sql":1}}`,
			"/args/filter/sql", "sql is not a member of filter (members: created_after, status, tags)"},
		{"email.send", "mailbox:a@example.com", `{"to":[{"name":"x"}],"subject":"s","body":""}`,
			"/args/to/0/address", "address is required in to/0"},
		{"email.send", "mailbox:a@example.com", `{"to":[` + recipients(11) + `],"subject":"s","body":""}`,
			"/args/to", "to has 11 items; at most 10 are allowed"},
		{"payments.refund", "invoice:INV-1", `{"amount_minor":1,"currency":"USD","reason_code":"fraud","\u202eevil":1}`,
			"/args/\u202eevil", `"\u202eevil" is not a parameter of payments.refund (parameters: amount_minor, currency, notes, reason_code)`},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			ps := proposalProblems(t, r, proposal(tt.tool, tt.target, tt.args))
			for _, p := range ps {
				if p.Path == tt.path {
					if p.Message != tt.want {
						t.Errorf("message at %s = %q, want %q", p.Path, p.Message, tt.want)
					}
					return
				}
			}
			t.Errorf("no problem at %s in %v", tt.path, ps)
		})
	}
}

func TestUnknownTool(t *testing.T) {
	r := MustLoad(t, examplesFile)
	p, err := canonical.ParseProposal([]byte(proposal("payments.refnd", "invoice:INV-1", `{}`)))
	if err != nil {
		t.Fatal(err)
	}
	tool, ps := r.Check(p)
	if tool != nil {
		t.Errorf("Check returned tool %s for an unknown name", tool.Name)
	}
	if got, want := summary(ps), []string{"unknown_tool /tool"}; !slices.Equal(got, want) {
		t.Fatalf("problems = %q, want %q", got, want)
	}
	if !strings.Contains(ps[0].Message, "payments.refund") || !strings.Contains(ps[0].Message, "payments.refnd") {
		t.Errorf("message %q should name the proposed tool and list the known ones", ps[0].Message)
	}
}

func TestValidateOtherToolName(t *testing.T) {
	r := MustLoad(t, examplesFile)
	weather, _ := r.Tool("weather.search")
	p := canonical.Proposal{Tool: "payments.refund", Target: "weather:forecast", Args: mustObject(t, `{"city":"Paris"}`)}
	if got, want := summary(weather.Validate(p)), []string{"unknown_tool /tool"}; !slices.Equal(got, want) {
		t.Errorf("problems = %q, want %q", got, want)
	}
}

func mustObject(tb testing.TB, s string) canonical.Object {
	tb.Helper()
	v, err := canonical.Parse([]byte(s))
	if err != nil {
		tb.Fatalf("Parse(%s): %v", s, err)
	}
	o, ok := v.(canonical.Object)
	if !ok {
		tb.Fatalf("%s is not an object", s)
	}
	return o
}

func TestValidateNeverModifiesArgs(t *testing.T) {
	r := MustLoad(t, examplesFile)
	for tool, cases := range fixtures {
		tl, _ := r.Tool(tool)
		for _, c := range cases {
			v, err := canonical.Parse([]byte(c.args))
			if err != nil {
				continue // a float fixture
			}
			args, _ := v.(canonical.Object)
			before, _ := canonical.Encode(v)
			tl.Validate(canonical.Proposal{Tool: tool, Target: legalTargets[tool], Args: args})
			after, _ := canonical.Encode(v)
			if string(before) != string(after) {
				t.Errorf("%s/%s: args changed from %s to %s", tool, c.name, before, after)
			}
		}
	}
}

func TestValidateNilArgs(t *testing.T) {
	r := MustLoad(t, examplesFile)
	weather, _ := r.Tool("weather.search")
	got := summary(weather.Validate(canonical.Proposal{Tool: "weather.search", Target: "weather:forecast"}))
	if want := []string{"missing_field /args/city"}; !slices.Equal(got, want) {
		t.Errorf("problems = %q, want %q", got, want)
	}
}

func TestMaxProblems(t *testing.T) {
	r := MustLoad(t, examplesFile)
	var b strings.Builder
	b.WriteString(`{"city":"Paris"`)
	for i := range MaxProblems + 50 {
		fmt.Fprintf(&b, `,"x%d":1`, i)
	}
	b.WriteString("}")
	ps := proposalProblems(t, r, proposal("weather.search", "weather:forecast", b.String()))
	if len(ps) != MaxProblems {
		t.Fatalf("%d problems, want %d", len(ps), MaxProblems)
	}
	for _, p := range ps {
		if p.Code != canonical.CodeUnknownField {
			t.Fatalf("problem %s at %s, want only unknown_field", p.Code, p.Path)
		}
	}
}

func TestBoundAndInformational(t *testing.T) {
	r := MustLoad(t, examplesFile)
	refund, _ := r.Tool("payments.refund")
	args := mustObject(t, `{"amount_minor":1299,"currency":"USD","notes":"called twice","reason_code":"duplicate"}`)
	bound := refund.Bound(args)
	got, _ := canonical.Encode(bound)
	if want := `{"amount_minor":1299,"currency":"USD","reason_code":"duplicate"}`; string(got) != want {
		t.Errorf("Bound = %s, want %s", got, want)
	}
	if _, ok := args.Get("notes"); !ok {
		t.Error("Bound removed notes from its argument")
	}
	// The digest does not depend on informational members.
	env := func(a canonical.Object) string {
		d, err := canonical.Envelope{Actor: "a", Audience: "payments-host", Tool: refund.Name, Target: "invoice:INV-1", Args: refund.Bound(a)}.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	other := mustObject(t, `{"amount_minor":1299,"currency":"USD","notes":"something else","reason_code":"duplicate"}`)
	if env(args) != env(other) {
		t.Error("digests differ when only an informational member differs")
	}
	changed := mustObject(t, `{"amount_minor":1300,"currency":"USD","notes":"called twice","reason_code":"duplicate"}`)
	if env(args) == env(changed) {
		t.Error("digests equal although a bound member differs")
	}
	for _, tt := range []struct {
		ptr  string
		want bool
	}{{"/notes", true}, {"/notes/x", true}, {"/notesx", false}, {"/amount_minor", false}, {"", false}, {"notes", false}} {
		if got := refund.IsInformational(tt.ptr); got != tt.want {
			t.Errorf("IsInformational(%q) = %v, want %v", tt.ptr, got, tt.want)
		}
	}
	weather, _ := r.Tool("weather.search")
	if weather.IsInformational("/city") {
		t.Error("weather.search has no informational members")
	}
}

func TestRegistryAccessors(t *testing.T) {
	r := MustLoad(t, examplesFile)
	want := []string{"email.send", "files.delete", "payments.refund", "releases.deploy", "reports.read", "search.query", "weather.search"}
	var got []string
	for _, tl := range r.Tools() {
		got = append(got, tl.Name)
	}
	if !slices.Equal(got, want) {
		t.Errorf("Tools() = %q, want %q", got, want)
	}
	refund, ok := r.Tool("payments.refund")
	if !ok {
		t.Fatal("payments.refund not found")
	}
	if refund.Audience != "payments-host" || refund.Approvals != 1 || refund.GrantTTL.String() != "1m0s" ||
		refund.DecideWithin.String() != "15m0s" || refund.Money == nil ||
		*refund.Money != (Money{Amount: "/amount_minor", Currency: "/currency"}) ||
		!slices.Equal(refund.Informational, []string{"/notes"}) {
		t.Errorf("payments.refund = %+v", refund)
	}
	deploy, _ := r.Tool("releases.deploy")
	if deploy.Approvals != 2 || deploy.Money != nil {
		t.Errorf("releases.deploy approvals %d money %v, want 2 and nil", deploy.Approvals, deploy.Money)
	}
	if got, want := refund.Parameters(), []string{"amount_minor", "currency", "notes", "reason_code"}; !slices.Equal(got, want) {
		t.Errorf("Parameters() = %q, want %q", got, want)
	}
	if _, ok := r.Tool("nope"); ok {
		t.Error("Tool(nope) found something")
	}
	if !refund.Target.MatchString("invoice:INV-42") || refund.Target.MatchString("xinvoice:INV-42") || refund.Target.MatchString("invoice:INV-42\n") {
		t.Error("target pattern must match the whole target")
	}
}

func TestUniqueItems(t *testing.T) {
	r, err := Parse([]byte(toolFile("    args: {type: object, additionalProperties: false, properties: {ids: {type: array, uniqueItems: true, items: {type: [integer, object], additionalProperties: false, properties: {a: {type: integer}}}}}}\n")))
	if err != nil {
		t.Fatal(err)
	}
	// Short arrays are compared pairwise, long ones by canonical encoding;
	// both must report the same problems.
	for _, n := range []int{6, 32, 33, 200} {
		items := make([]string, n)
		for i := range items {
			items[i] = fmt.Sprint(i)
		}
		items[n-1] = "3"
		items[1] = `{"a":1}`
		items[n-2] = `{"a":1}`
		args := `{"ids":[` + strings.Join(items, ",") + `]}`
		got := summary(proposalProblems(t, r, proposal("demo.tool", "demo:x", args)))
		want := []string{fmt.Sprintf("duplicate_key /args/ids/%d", n-2), fmt.Sprintf("duplicate_key /args/ids/%d", n-1)}
		if !slices.Equal(got, want) {
			t.Errorf("%d items: problems %q, want %q", n, got, want)
		}
	}
}
