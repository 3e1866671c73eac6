package tools

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/countersign/countersign/internal/canonical"
)

const weatherSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "city": {"type": "string", "minLength": 1, "description": "City name", "examples": ["Oslo"]},
    "days": {"type": "integer", "minimum": 1, "maximum": 14, "default": 3},
    "lat": {"type": "number", "minimum": -90, "maximum": 90},
    "unit": {"enum": ["c", "f"]},
    "when": {"type": "string", "format": "date-time"},
    "id": {"type": ["string", "null"], "format": "uuid"},
    "notify": {"type": "string", "format": "email"},
    "hook": {"type": "string", "format": "uri"},
    "color": {"type": "string", "format": "hex-color"},
    "points": {"type": "array", "items": {"$ref": "#/$defs/point"}, "maxItems": 3},
    "mode": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^[a-z]+$"}, {"type": "null"}]},
    "ratio": {"oneOf": [{"const": 0.5}, {"const": 1.5}]}
  },
  "required": ["city"],
  "additionalProperties": false,
  "$defs": {
    "point": {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "number", "exclusiveMinimum": 0.5}}, "required": ["x", "y"]}
  }
}`

func mustMirror(t *testing.T, spec MirrorSpec) *Tool {
	t.Helper()
	tool, err := Mirror(spec)
	if err != nil {
		t.Fatalf("Mirror: %v", err)
	}
	return tool
}

func weather(t *testing.T) *Tool {
	return mustMirror(t, MirrorSpec{Server: "demo", Name: "get_weather", Description: "Weather for a city",
		InputSchema: []byte(weatherSchema), Annotations: []byte(`{"readOnlyHint":true}`)})
}

// parseArgs parses arguments as the gateway does: the raw arguments
// object, with the tool's number paths.
func parseArgs(t *testing.T, tool *Tool, args string) (canonical.Object, error) {
	t.Helper()
	v, err := canonical.ParseWith([]byte(args), canonical.Options{MaxDepth: canonical.MaxArgsDepth, Numbers: tool.Mirror.ArgsNumbers()})
	if err != nil {
		return nil, err
	}
	return v.(canonical.Object), nil
}

func TestMirrorAccepts(t *testing.T) {
	tool := weather(t)
	if tool.Name != "demo/get_weather" || tool.Audience != "demo" || tool.Mirror.Target != "mcp:demo" {
		t.Fatalf("tool = %s audience %s target %s", tool.Name, tool.Audience, tool.Mirror.Target)
	}
	if !canonical.IsDigest(tool.DefinitionDigest) {
		t.Fatalf("DefinitionDigest = %q", tool.DefinitionDigest)
	}
	for _, args := range []string{
		`{"city":"Oslo"}`,
		`{"city":"Oslo","days":14,"lat":59.91,"unit":"c"}`,
		`{"city":"Oslo","lat":-90,"when":"2026-01-31T09:30:00Z","id":"123e4567-e89b-12d3-a456-426614174000"}`,
		`{"city":"Oslo","id":null,"notify":"ops@example.com","hook":"https://example.com/a?b=1","color":"not checked"}`,
		`{"city":"Oslo","points":[{"x":1.5,"y":2},{"x":-0.25,"y":0.75}]}`,
		`{"city":"Oslo","mode":3}`, `{"city":"Oslo","mode":"fast"}`, `{"city":"Oslo","mode":null}`,
		`{"city":"Oslo","ratio":1.5}`, `{"city":"Oslo","lat":1.0}`,
	} {
		a, err := parseArgs(t, tool, args)
		if err != nil {
			t.Errorf("%s: parse: %v", args, err)
			continue
		}
		if ps := tool.Validate(canonical.Proposal{Tool: tool.Name, Target: "mcp:demo", Args: a}); len(ps) > 0 {
			t.Errorf("%s: %v", args, ps)
		}
	}
}

func TestMirrorRefuses(t *testing.T) {
	tool := weather(t)
	for args, want := range map[string]string{
		`{}`:                           "missing_field /args/city",
		`{"city":"Oslo","sql":"drop"}`: "unknown_field /args/sql",
		`{"city":"Oslo","points":[{"x":1,"y":1,"z":1}]}`:   "unknown_field /args/points/0/z",
		`{"city":"Oslo","days":15}`:                        "out_of_range /args/days",
		`{"city":"Oslo","lat":90.5}`:                       "out_of_range /args/lat",
		`{"city":"Oslo","points":[{"x":1,"y":0.5}]}`:       "out_of_range /args/points/0/y",
		`{"city":"Oslo","unit":"k"}`:                       "enum_mismatch /args/unit",
		`{"city":"Oslo","when":"2026-01-31 09:30"}`:        "pattern_mismatch /args/when",
		`{"city":"Oslo","when":"2026-02-30T09:30:00Z"}`:    "pattern_mismatch /args/when",
		`{"city":"Oslo","id":"123"}`:                       "pattern_mismatch /args/id",
		`{"city":"Oslo","notify":"Ops <ops@example.com>"}`: "pattern_mismatch /args/notify",
		`{"city":"Oslo","hook":"not a uri"}`:               "pattern_mismatch /args/hook",
		`{"city":"Oslo","hook":"/relative"}`:               "pattern_mismatch /args/hook",
		`{"city":"Oslo","mode":-1}`:                        "out_of_range /args/mode",
		`{"city":"Oslo","mode":"Fast"}`:                    "pattern_mismatch /args/mode",
		`{"city":"Oslo","mode":true}`:                      "wrong_type /args/mode",
		`{"city":"Oslo","ratio":1}`:                        "enum_mismatch /args/ratio",
		`{"city":"Oslo","days":"3"}`:                       "wrong_type /args/days",
		`{"city":""}`:                                      "out_of_range /args/city",
		`{"city":"Oslo","points":[1,2,3,4]}`:               "too_many_items /args/points",
	} {
		a, err := parseArgs(t, tool, args)
		if err != nil {
			t.Errorf("%s: parse: %v", args, err)
			continue
		}
		ps := tool.Validate(canonical.Proposal{Tool: tool.Name, Target: "mcp:demo", Args: a})
		var got []string
		for _, p := range ps {
			got = append(got, p.Code+" "+p.Path)
		}
		if len(got) == 0 || got[0] != want {
			t.Errorf("%s: %v, want %s first", args, ps, want)
		}
	}
}

// TestMirrorNumberPaths: fractions parse only where the pinned schema
// says number; an integer path keeps float_not_allowed.
func TestMirrorNumberPaths(t *testing.T) {
	tool := weather(t)
	for args, code := range map[string]string{
		`{"city":"Oslo","days":1.5}`:                  canonical.CodeFloatNotAllowed,
		`{"city":"Oslo","days":2.0}`:                  canonical.CodeFloatNotAllowed,
		`{"city":"Oslo","lat":0.1000000000000000055}`: canonical.CodeInexactNumber,
		`{"city":"Oslo","lat":1e16}`:                  canonical.CodeOutOfRange,
		`{"city":"Oslo","mode":1.5}`:                  canonical.CodeFloatNotAllowed,
		`{"city":"Oslo","unknown":1.5}`:               canonical.CodeFloatNotAllowed,
	} {
		_, err := parseArgs(t, tool, args)
		var p *canonical.Problem
		if !errors.As(err, &p) || p.Code != code {
			t.Errorf("%s: %v, want %s", args, err, code)
		}
	}
	a, err := parseArgs(t, tool, `{"city":"Oslo","lat":59.910,"points":[{"x":25e-8,"y":1}],"ratio":0.50}`)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := canonical.Encode(a)
	if want := `{"city":"Oslo","lat":59.91,"points":[{"x":2.5e-7,"y":1}],"ratio":0.5}`; string(b) != want {
		t.Errorf("canonical args %s, want %s", b, want)
	}
	if ps := tool.Validate(canonical.Proposal{Tool: tool.Name, Target: "mcp:demo", Args: a}); len(ps) > 0 {
		t.Errorf("valid args refused: %v", ps)
	}
	// The proposal-rooted paths accept the same places under /args.
	if _, err := canonical.ParseWith([]byte(`{"tool":"demo/get_weather","target":"mcp:demo","args":{"city":"x","lat":0.5}}`),
		canonical.Options{Numbers: tool.Mirror.ProposalNumbers()}); err != nil {
		t.Errorf("proposal numbers: %v", err)
	}
}

func TestMirrorNotes(t *testing.T) {
	tool := weather(t)
	joined := strings.Join(tool.Mirror.Notes, "\n")
	for _, want := range []string{"/$defs/point: the upstream leaves this object open", "format hex-color is shown, not checked"} {
		if !strings.Contains(joined, want) {
			t.Errorf("notes %q lack %q", joined, want)
		}
	}
}

func TestMirrorQuarantine(t *testing.T) {
	obj := func(props string) string {
		return `{"type":"object","properties":{` + props + `},"additionalProperties":false}`
	}
	for name, c := range map[string]struct{ tool, schema, want string }{
		"bad tool name":     {"get weather", `{"type":"object"}`, "MCP's tool-name rule"},
		"long tool name":    {strings.Repeat("t", 129), `{"type":"object"}`, "MCP's tool-name rule"},
		"not an object":     {"t", `{"type":"string"}`, "must have type object"},
		"no schema":         {"t", `null`, "not an object"},
		"array root":        {"t", `[]`, "not an object"},
		"free-form map":     {"t", `{"type":"object","additionalProperties":{"type":"string"}}`, "free-form map"},
		"open true":         {"t", `{"type":"object","additionalProperties":true}`, "free-form map"},
		"patternProperties": {"t", `{"type":"object","patternProperties":{"^x":{"type":"string"}}}`, "patternProperties"},
		"if then":           {"t", obj(`"a":{"type":"string","if":{},"then":{}}`), "if/then/else"},
		"remote ref":        {"t", obj(`"a":{"$ref":"https://example.com/s.json"}`), "not local"},
		"cycle":             {"t", `{"type":"object","properties":{"n":{"$ref":"#/$defs/node"}},"$defs":{"node":{"type":"object","properties":{"next":{"$ref":"#/$defs/node"}}}}}`, "recursive"},
		"root cycle":        {"t", obj(`"self":{"$ref":"#"}`), "recursive"},
		"missing ref":       {"t", obj(`"a":{"$ref":"#/$defs/nope"}`), "names nothing"},
		"two types":         {"t", obj(`"a":{"type":["string","integer"]}`), "one type"},
		"any value":         {"t", obj(`"a":{}`), "accepts any value"},
		"true schema":       {"t", obj(`"a":true`), "accepts any value"},
		"array no items":    {"t", obj(`"a":{"type":"array"}`), "without items"},
		"tuple":             {"t", obj(`"a":{"type":"array","items":[{"type":"string"}]}`), "tuple"},
		"nested alts":       {"t", obj(`"a":{"anyOf":[{"oneOf":[{"type":"string"}]}]}`), "inside an alternative"},
		"alts beside":       {"t", obj(`"a":{"type":"string","anyOf":[{"type":"string"}]}`), "must be plain"},
		"allOf":             {"t", obj(`"a":{"allOf":[{"type":"string"}]}`), "allOf"},
		"unknown keyword":   {"t", obj(`"a":{"type":"string","nullable":true}`), "nullable"},
		"lookahead":         {"t", obj(`"a":{"type":"string","pattern":"^(?=a)"}`), "cannot check this pattern"},
		"duplicate key":     {"t", `{"type":"object","type":"object"}`, "duplicate"},
		"big integer":       {"t", obj(`"a":{"type":"integer","maximum":18446744073709551615}`), "cannot be read exactly"},
		"required unknown":  {"t", `{"type":"object","required":["a"]}`, "not declared"},
		"ref beside":        {"t", obj(`"a":{"$ref":"#/$defs/x","type":"string"}`), "$ref beside"},
		"expansion":         {"t", laughs(30), "more than 10000 schemas"},
		"enum values":       {"t", obj(`"a":{"type":"integer","enum":[` + count(10001) + `]}`), "more than 10000 enum values"},
		"enum via refs":     {"t", `{"type":"object","properties":{"a":{"$ref":"#/$defs/e"},"b":{"$ref":"#/$defs/e"},"c":{"$ref":"#/$defs/e"}},"additionalProperties":false,"$defs":{"e":{"type":"integer","enum":[` + count(4000) + `]}}}`, "more than 10000 enum values"},
	} {
		_, err := Mirror(MirrorSpec{Server: "demo", Name: c.tool, InputSchema: []byte(c.schema)})
		var q *QuarantineError
		if !errors.As(err, &q) || !strings.Contains(strings.Join(q.Reasons, "\n"), c.want) {
			t.Errorf("%s: %v, want a quarantine saying %q", name, err, c.want)
		}
	}
}

// laughs is a schema whose definitions each refer to the previous one
// twice: n levels expand to 2^n schemas.
func laughs(n int) string {
	var b strings.Builder
	b.WriteString(`{"type":"object","properties":{"a":{"$ref":"#/$defs/d` + fmt.Sprint(n) + `"}},"additionalProperties":false,"$defs":{"d0":{"type":"string"}`)
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, `,"d%d":{"type":"object","properties":{"l":{"$ref":"#/$defs/d%d"},"r":{"$ref":"#/$defs/d%d"}},"additionalProperties":false}`, i, i-1, i-1)
	}
	b.WriteString("}}")
	return b.String()
}

func TestMirrorEmptyObject(t *testing.T) {
	tool := mustMirror(t, MirrorSpec{Server: "demo", Name: "ping", InputSchema: []byte(`{"type":"object"}`)})
	if ps := tool.Validate(canonical.Proposal{Tool: "demo/ping", Target: "mcp:demo", Args: canonical.Object{}}); len(ps) > 0 {
		t.Errorf("{}: %v", ps)
	}
	ps := tool.Validate(canonical.Proposal{Tool: "demo/ping", Target: "mcp:demo", Args: canonical.Object{{Name: "x", Value: int64(1)}}})
	if len(ps) != 1 || ps[0].Code != canonical.CodeUnknownField {
		t.Errorf("unknown member: %v", ps)
	}
}

// TestDefinitionDigest: the pin covers name, description, input schema,
// annotations and overrides, in canonical form.
func TestMirrorDefinitionDigest(t *testing.T) {
	base := MirrorSpec{Server: "demo", Name: "add", Description: "Adds two numbers.",
		InputSchema: []byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"required":["a","b"]}`),
		Annotations: []byte(`{"readOnlyHint":true,"title":"Add"}`)}
	d0 := mustMirror(t, base).DefinitionDigest
	// Pinned: a definition that sets no outcome_within keeps the digest it
	// had before that override existed.
	if want := "864c0ca8bffa3aabebff0a956edc8a385c543dabeafe32aa60c0ddcd186870ca"; d0 != want {
		t.Errorf("digest %s, want %s", d0, want)
	}
	same := base
	same.InputSchema = []byte(` { "required" : ["a","b"], "properties":{"b":{"type":"integer"},"a":{"type":"integer"}}, "type":"object" }`)
	same.Annotations = []byte(`{"title":"Add","readOnlyHint":true}`)
	if d := mustMirror(t, same).DefinitionDigest; d != d0 {
		t.Errorf("another spelling of the same definition changed the digest")
	}
	changes := map[string]func(*MirrorSpec){
		"description": func(s *MirrorSpec) { s.Description = "Adds two numbers.\u200b" },
		"schema": func(s *MirrorSpec) {
			s.InputSchema = []byte(`{"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer","minimum":0}},"required":["a","b"]}`)
		},
		"annotations":   func(s *MirrorSpec) { s.Annotations = []byte(`{"readOnlyHint":false,"title":"Add"}`) },
		"no annotation": func(s *MirrorSpec) { s.Annotations = nil },
		"name":          func(s *MirrorSpec) { s.Name = "add2" },
		"server":        func(s *MirrorSpec) { s.Server = "demo2" },
		"approvals":     func(s *MirrorSpec) { s.Override.Approvals = 2 },
		"ttl":           func(s *MirrorSpec) { s.Override.GrantTTL = 30 * time.Second },
		"target":        func(s *MirrorSpec) { s.Override.Target = "mcp:calc" },
		"lease":         func(s *MirrorSpec) { s.Override.OutcomeWithin = time.Hour },
	}
	seen := map[string]string{d0: "base"}
	for name, change := range changes {
		s := base
		change(&s)
		d := mustMirror(t, s).DefinitionDigest
		if prev, dup := seen[d]; dup {
			t.Errorf("%s: digest equals that of %s", name, prev)
		}
		seen[d] = name
	}
}

func TestMirrorTargetPointer(t *testing.T) {
	schema := `{"type":"object","properties":{"account":{"type":"string"},"note":{"type":"string"}},"required":["account"],"additionalProperties":false}`
	tool := mustMirror(t, MirrorSpec{Server: "bank", Name: "pay", InputSchema: []byte(schema), Override: MCPOverride{Target: "/account", Approvals: 2}})
	args := canonical.Object{{Name: "account", Value: "acct:7"}}
	if got, ok := tool.TargetFor(args); !ok || got != "acct:7" {
		t.Errorf("TargetFor = %q, %v", got, ok)
	}
	if tool.Approvals != 2 {
		t.Errorf("approvals %d", tool.Approvals)
	}
	for _, ptr := range []string{"/note", "/missing"} {
		if _, err := Mirror(MirrorSpec{Server: "bank", Name: "pay", InputSchema: []byte(schema), Override: MCPOverride{Target: ptr}}); err == nil {
			t.Errorf("target %s accepted; it must name a required string", ptr)
		}
	}
}

func TestMCPSection(t *testing.T) {
	r, err := Parse([]byte(`
mcp:
  demo:
    command: [./demo-upstream, --verbose]
    env: {DEMO_MODE: "1"}
    tools:
      add: {approvals: 2, grant_ttl: 30s, target: /account}
  remote:
    url: https://mcp.example.com/mcp
    headers:
      Authorization: {env: REMOTE_TOKEN, prefix: "Bearer "}
      X-Key: {file: /etc/countersign/remote.key}
`))
	if err != nil {
		t.Fatal(err)
	}
	ups := r.Upstreams()
	if len(ups) != 2 || ups[0].Name != "demo" || ups[1].Name != "remote" {
		t.Fatalf("upstreams %+v", ups)
	}
	if o := ups[0].Tools["add"]; o.Approvals != 2 || o.GrantTTL != 30*time.Second || o.Target != "/account" {
		t.Errorf("override %+v", o)
	}
	if h := ups[1].Headers; len(h) != 2 || h[0].Env != "REMOTE_TOKEN" || h[0].Prefix != "Bearer " || h[1].File == "" {
		t.Errorf("headers %+v", h)
	}
	for body, want := range map[string]string{
		"mcp:\n  Demo:\n    url: http://x\n":                                 "must match",
		"mcp:\n  demo: {}\n":                                                 "is required",
		"mcp:\n  demo: {url: 'http://x', command: [a]}\n":                    "not both",
		"mcp:\n  demo: {url: 'ftp://x'}\n":                                   "http:// or https://",
		"mcp:\n  demo: {url: 'http://x', headers: {A: secret}}\n":            "never from the tools file",
		"mcp:\n  demo: {url: 'http://x', headers: {A: {env: a, file: b}}}\n": "exactly one",
		"mcp:\n  demo: {command: [a], tools: {add: {approvals: 0}}}\n":       "between 1",
		"mcp:\n  demo: {command: [a], tools: {'a b': {}}}\n":                 "not an MCP tool name",
		"mcp:\n  demo: {command: [a], bogus: 1}\n":                           "unknown field",
	} {
		_, err := Parse([]byte(body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}

func TestSetMirrored(t *testing.T) {
	r, err := Parse([]byte("mcp:\n  demo: {command: [x]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	add := mustMirror(t, MirrorSpec{Server: "demo", Name: "add", InputSchema: []byte(`{"type":"object"}`)})
	other := mustMirror(t, MirrorSpec{Server: "other", Name: "add", InputSchema: []byte(`{"type":"object"}`)})
	r.SetMirrored("demo", []*Tool{add})
	r.SetMirrored("other", []*Tool{other})
	if got, ok := r.Tool("demo/add"); !ok || got != add {
		t.Fatalf("demo/add not found")
	}
	if _, ps := r.Check(canonical.Proposal{Tool: "demo/add", Target: "mcp:demo", Args: canonical.Object{}}); len(ps) > 0 {
		t.Errorf("Check: %v", ps)
	}
	r.SetMirrored("demo", nil)
	if _, ok := r.Tool("demo/add"); ok {
		t.Errorf("demo/add still callable after its server's tools were replaced")
	}
	if _, ok := r.Tool("other/add"); !ok {
		t.Errorf("other/add lost when demo's tools were replaced")
	}
}

// FuzzMirror: any input schema either quarantines with reasons or compiles
// to a tool whose validator handles any arguments without panicking, and
// whose definition digest is stable.
func FuzzMirror(f *testing.F) {
	f.Add([]byte(weatherSchema), []byte(`{"city":"Oslo","lat":1.5,"points":[{"x":1,"y":2}]}`))
	f.Add([]byte(`{"type":"object","properties":{"a":{"anyOf":[{"type":"number"},{"$ref":"#/$defs/b"}]}},"$defs":{"b":{"type":"string"}}}`), []byte(`{"a":0.5}`))
	f.Fuzz(func(t *testing.T, schema, args []byte) {
		tool, err := Mirror(MirrorSpec{Server: "fz", Name: "t", InputSchema: schema})
		if err != nil {
			var q *QuarantineError
			if !errors.As(err, &q) || len(q.Reasons) == 0 {
				t.Fatalf("error %v is not a quarantine with reasons", err)
			}
			return
		}
		again, err := Mirror(MirrorSpec{Server: "fz", Name: "t", InputSchema: schema})
		if err != nil || again.DefinitionDigest != tool.DefinitionDigest {
			t.Fatalf("second compile differs: %v", err)
		}
		v, err := canonical.ParseWith(args, canonical.Options{Numbers: tool.Mirror.ArgsNumbers()})
		if o, ok := v.(canonical.Object); err == nil && ok {
			tool.Validate(canonical.Proposal{Tool: tool.Name, Target: "mcp:fz", Args: o})
		}
	})
}

// count is the list 0,1,...,n-1.
func count(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprint(&b, i)
	}
	return b.String()
}

// An upstream chooses its enums; each value is compared with those before
// it, so their number is bounded (a 1 MiB schema holds some 170,000) and a
// schema at the bound still mirrors quickly.
func TestMirrorEnumAtTheBound(t *testing.T) {
	schema := `{"type":"object","properties":{"a":{"type":"integer","enum":[` + count(10000) + `]}},"required":["a"],"additionalProperties":false}`
	tool := mustMirror(t, MirrorSpec{Server: "demo", Name: "t", InputSchema: []byte(schema)})
	args, err := parseArgs(t, tool, `{"a":9999}`)
	if err != nil {
		t.Fatal(err)
	}
	if problems := tool.Validate(canonical.Proposal{Tool: tool.Name, Target: "mcp:demo", Args: args}); len(problems) > 0 {
		t.Fatalf("9999 is in the enum: %v", problems)
	}
}

// TestMirroredAllowance: a mirrored tool's allowance is part of its
// definition, and names members that may vary in the upstream's schema;
// anything else quarantines the tool.
func TestMirroredAllowance(t *testing.T) {
	schema := []byte(`{"type":"object","properties":{"a":{"type":"integer","minimum":0},"b":{"type":"integer"},"name":{"type":"string"}},"required":["a"]}`)
	plain, err := Mirror(MirrorSpec{Server: "demo", Name: "add", InputSchema: schema})
	if err != nil {
		t.Fatal(err)
	}
	a := &Allowance{MaxUses: 3, MaxFor: time.Hour, Vary: []string{"/a"}}
	opted, err := Mirror(MirrorSpec{Server: "demo", Name: "add", InputSchema: schema, Override: MCPOverride{Allowance: a}})
	if err != nil {
		t.Fatal(err)
	}
	if opted.Allowance != a || plain.Allowance != nil || opted.DefinitionDigest == plain.DefinitionDigest ||
		!strings.Contains(string(opted.Mirror.Definition), `"allowance":{"max_for_s":3600,"max_uses":3,"vary":["/a"]}`) {
		t.Errorf("opted in: allowance %v, definition %s", opted.Allowance, opted.Mirror.Definition)
	}
	for _, vary := range []string{"/name", "/missing", "/b"} {
		_, err := Mirror(MirrorSpec{Server: "demo", Name: "add", InputSchema: schema,
			Override: MCPOverride{Allowance: &Allowance{MaxUses: 3, MaxFor: time.Hour, Vary: []string{vary}}}})
		var q *QuarantineError
		if !errors.As(err, &q) || !strings.Contains(q.Error(), "allowance") {
			t.Errorf("vary %s: %v, want a quarantine naming the allowance", vary, err)
		}
	}
}
