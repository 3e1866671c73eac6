package canonical

import (
	"errors"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unicode/utf16"

	"pgregory.net/rapid"
)

// mustProblem returns the *Problem behind err, failing the test when err is
// something else.
func mustProblem(tb testing.TB, err error) *Problem {
	tb.Helper()
	var p *Problem
	if !errors.As(err, &p) {
		tb.Fatalf("error %v (%T) is not a *Problem", err, err)
	}
	return p
}

func TestParseValues(t *testing.T) {
	tests := []struct {
		in   string
		want any
	}{
		{`null`, nil},
		{`true`, true},
		{` false `, false},
		{`0`, int64(0)},
		{`-0`, int64(0)},
		{`9007199254740991`, int64(MaxInt)},
		{`-9007199254740991`, int64(-MaxInt)},
		{`""`, ""},
		{`"a\"\\\/\b\f\n\r\t\u0041\u00e9\ud83d\ude00"`, "a\"\\/\b\f\n\r\tAé😀"},
		{`"\u0000"`, "\x00"},
		{"\"é😀\u2028\"", "é😀\u2028"},
		{`[]`, []any{}},
		{`{}`, Object{}},
		{"[1,\"x\",null,[true]]", []any{int64(1), "x", nil, []any{true}}},
		{`{"b":1,"a":{"d":[],"c":2}}`, Object{{"a", Object{{"c", int64(2)}, {"d", []any{}}}}, {"b", int64(1)}}},
		// U+10000 is a surrogate pair (D800 DC00) and sorts before U+FF61.
		{`{"｡":1,"𐀀":2}`, Object{{"𐀀", int64(2)}, {"｡", int64(1)}}},
		{"\t\r\n {\"a\" :\t1 }\n", Object{{"a", int64(1)}}},
	}
	for _, tt := range tests {
		got, err := Parse([]byte(tt.in))
		if err != nil {
			t.Errorf("Parse(%q): %v", tt.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Parse(%q) = %#v, want %#v", tt.in, got, tt.want)
		}
	}
}

// TestParseProblems pins the code, JSON Pointer and byte offset of every
// parse problem.
func TestParseProblems(t *testing.T) {
	tests := []struct {
		name   string
		in     string
		opt    Options
		code   string
		path   string
		offset int
	}{
		// malformed_json
		{"empty", ``, Options{}, CodeMalformedJSON, "", 0},
		{"only space", "  \n", Options{}, CodeMalformedJSON, "", 3},
		{"trailing comma in object", `{"a":1,}`, Options{}, CodeMalformedJSON, "", 7},
		{"trailing comma in array", `{"a":[1,2,]}`, Options{}, CodeMalformedJSON, "/a/2", 10},
		{"missing colon", `{"a" 1}`, Options{}, CodeMalformedJSON, "", 5},
		{"missing comma", `[1 2]`, Options{}, CodeMalformedJSON, "", 3},
		{"unquoted name", `{a:1}`, Options{}, CodeMalformedJSON, "", 1},
		{"single quotes", `{"a":'x'}`, Options{}, CodeMalformedJSON, "/a", 5},
		{"bad literal", `{"a":tru}`, Options{}, CodeMalformedJSON, "/a", 5},
		{"capital literal", `[True]`, Options{}, CodeMalformedJSON, "/0", 1},
		{"unterminated string", `{"a":"abc`, Options{}, CodeMalformedJSON, "/a", 9},
		{"unterminated object", `{"a":1`, Options{}, CodeMalformedJSON, "", 6},
		{"unterminated array", `[1,[2]`, Options{}, CodeMalformedJSON, "", 6},
		{"raw control character", "{\"a\":\"x\x01\"}", Options{}, CodeMalformedJSON, "/a", 7},
		{"raw newline", "[\"a\nb\"]", Options{}, CodeMalformedJSON, "/0", 3},
		{"raw control after escape", "[\"\\n\x1f\"]", Options{}, CodeMalformedJSON, "/0", 4},
		{"bad escape", `{"a":"\q"}`, Options{}, CodeMalformedJSON, "/a", 7},
		{"short unicode escape", `{"a":"\u12"}`, Options{}, CodeMalformedJSON, "/a", 10},
		{"unicode escape at end", `"\u12`, Options{}, CodeMalformedJSON, "", 3},
		{"escape at end", `"\`, Options{}, CodeMalformedJSON, "", 1},
		{"leading zero", `01`, Options{}, CodeMalformedJSON, "", 1},
		{"plus sign", `[+1]`, Options{}, CodeMalformedJSON, "/0", 1},
		{"lone minus", `[-]`, Options{}, CodeMalformedJSON, "/0", 2},
		{"dot without digits", `1.`, Options{}, CodeMalformedJSON, "", 2},
		{"exponent without digits", `1e+`, Options{}, CodeMalformedJSON, "", 3},
		{"hex number", `0x10`, Options{}, CodeMalformedJSON, "", 1},
		{"second value", `{"a":1} {}`, Options{}, CodeMalformedJSON, "", 8},
		{"byte order mark", "\xef\xbb\xbf{}", Options{}, CodeMalformedJSON, "", 0},
		{"non-ASCII outside a string", "[é]", Options{}, CodeMalformedJSON, "/0", 1},
		{"comment", "{} // x", Options{}, CodeMalformedJSON, "", 3},
		{"NaN", `[NaN]`, Options{}, CodeMalformedJSON, "/0", 1},
		// invalid_utf8
		{"invalid byte in string", "{\"a\":\"\xff\"}", Options{}, CodeInvalidUTF8, "/a", 6},
		{"truncated sequence", "{\"a\":\"ok\xc3(\"}", Options{}, CodeInvalidUTF8, "/a", 8},
		{"overlong encoding", "[\"\xc0\xaf\"]", Options{}, CodeInvalidUTF8, "/0", 2},
		{"encoded surrogate", "[\"\xed\xa0\x80\"]", Options{}, CodeInvalidUTF8, "/0", 2},
		{"invalid byte after escape", "[\"\\n\xff\"]", Options{}, CodeInvalidUTF8, "/0", 4},
		{"invalid byte before escape", "[\"\xff\\n\"]", Options{}, CodeInvalidUTF8, "/0", 2},
		{"invalid byte in a name", "{\"\xff\":1}", Options{}, CodeInvalidUTF8, "", 2},
		{"invalid byte outside a string", "[\xff]", Options{}, CodeInvalidUTF8, "/0", 1},
		{"lone high surrogate", `{"a":"\ud800"}`, Options{}, CodeInvalidUTF8, "/a", 12},
		{"lone low surrogate", `{"a":"\udc00"}`, Options{}, CodeInvalidUTF8, "/a", 12},
		{"high surrogate then letter", `["\ud800x"]`, Options{}, CodeInvalidUTF8, "/0", 8},
		{"high surrogate then BMP escape", `["\ud800\u0041"]`, Options{}, CodeInvalidUTF8, "/0", 14},
		{"two high surrogates", `["\ud800\ud800"]`, Options{}, CodeInvalidUTF8, "/0", 14},
		// duplicate_key
		{"duplicate", `{"a":1,"a":2}`, Options{}, CodeDuplicateKey, "/a", -1},
		{"duplicate after unescaping", `{"a":1,"\u0061":2}`, Options{}, CodeDuplicateKey, "/a", -1},
		{"duplicate with escaped slash", `{"a/b":1,"a\/b":2}`, Options{}, CodeDuplicateKey, "/a~1b", -1},
		{"nested duplicate", `{"x":[{"b":1,"c":0,"b":1}]}`, Options{}, CodeDuplicateKey, "/x/0/b", -1},
		{"duplicate empty name", `{"":1,"":1}`, Options{}, CodeDuplicateKey, "/", -1},
		// float_not_allowed
		{"fraction", `1.0`, Options{}, CodeFloatNotAllowed, "", 0},
		{"exponent", `1e2`, Options{}, CodeFloatNotAllowed, "", 0},
		{"negative zero fraction", `-0.0`, Options{}, CodeFloatNotAllowed, "", 0},
		{"capital exponent", `[0E0]`, Options{}, CodeFloatNotAllowed, "/0", 1},
		{"nested fraction", `{"a":[1, 0.5]}`, Options{}, CodeFloatNotAllowed, "/a/1", 9},
		// out_of_range
		{"2^53", `{"n":9007199254740992}`, Options{}, CodeOutOfRange, "/n", 5},
		{"-2^53", `[-9007199254740992]`, Options{}, CodeOutOfRange, "/0", 1},
		{"twenty digits", `12345678901234567890`, Options{}, CodeOutOfRange, "", 0},
		{"hundred digits", strings.Repeat("9", 100), Options{}, CodeOutOfRange, "", 0},
		// too_deep
		{"arrays too deep", `[[[[]]]]`, Options{MaxDepth: 3}, CodeTooDeep, "/0/0/0", 3},
		{"objects too deep", `{"a":{"b":{"c":{}}}}`, Options{MaxDepth: 3}, CodeTooDeep, "/a/b/c", 15},
		{"default depth", strings.Repeat("[", 34) + strings.Repeat("]", 34), Options{}, CodeTooDeep, "/0" + strings.Repeat("/0", 32), 33},
		// too_large
		{"too large", `"0123456789"`, Options{MaxBytes: 11}, CodeTooLarge, "", -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v, err := ParseWith([]byte(tt.in), tt.opt)
			if err == nil {
				t.Fatalf("ParseWith(%q) = %#v, want %s", tt.in, v, tt.code)
			}
			p := mustProblem(t, err)
			if p.Code != tt.code || p.Path != tt.path || p.Offset != tt.offset {
				t.Errorf("ParseWith(%q) = code %s path %q offset %d (%s), want %s %q %d",
					tt.in, p.Code, p.Path, p.Offset, p.Message, tt.code, tt.path, tt.offset)
			}
			if p.Message == "" {
				t.Error("empty message")
			}
			if v != nil {
				t.Errorf("value = %#v alongside an error, want nil", v)
			}
		})
	}
}

func TestParseLimitsAtTheEdge(t *testing.T) {
	if _, err := ParseWith([]byte(`"0123456789"`), Options{MaxBytes: 12}); err != nil {
		t.Errorf("12 bytes under MaxBytes 12: %v", err)
	}
	if _, err := ParseWith([]byte(`[[[]]]`), Options{MaxDepth: 3}); err != nil {
		t.Errorf("3 deep under MaxDepth 3: %v", err)
	}
	// Depth is nesting, not a count of containers: many siblings are fine.
	siblings := "[" + strings.Repeat(`[{"a":[]},{}],`, 100) + "[]]"
	if _, err := ParseWith([]byte(siblings), Options{MaxDepth: 4}); err != nil {
		t.Errorf("siblings 4 deep under MaxDepth 4: %v", err)
	}
	deep := strings.Repeat("[", MaxArgsDepth+1) + strings.Repeat("]", MaxArgsDepth+1)
	if _, err := Parse([]byte(deep)); err != nil {
		t.Errorf("%d deep under the default: %v", MaxArgsDepth+1, err)
	}
}

// TestMalformedPosition checks the line and column named in the message of a
// syntax error: lines from 1, columns in characters from 1.
func TestMalformedPosition(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{`{"a":1,}`, "line 1, column 8 (byte 7)"},
		{"{\n  \"a\": 1,\n  \"b\" 2\n}", "line 3, column 7 (byte 18)"},
		{"{\"é😀\":1 x}", "line 1, column 9 (byte 12)"},
		{"[\r\n1,\r\n", "line 3, column 1 (byte 7)"},
		{"", "line 1, column 1 (byte 0)"},
	}
	for _, tt := range tests {
		_, err := Parse([]byte(tt.in))
		if err == nil {
			t.Errorf("Parse(%q) accepted", tt.in)
			continue
		}
		p := mustProblem(t, err)
		if p.Code != CodeMalformedJSON || !strings.Contains(p.Message, tt.want) {
			t.Errorf("Parse(%q) = %s %q, want %s mentioning %q", tt.in, p.Code, p.Message, CodeMalformedJSON, tt.want)
		}
	}
}

func TestProblemError(t *testing.T) {
	p := Problem{Code: CodeUnknownField, Path: "/args/sql", Message: "sql is not a parameter"}
	if got, want := p.Error(), "unknown_field at /args/sql: sql is not a parameter"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	root := Problem{Code: CodeTooLarge, Message: "too big"}
	if got, want := root.Error(), "too_large: too big"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	ps := Problems{p, root}
	if got, want := ps.Error(), "2 problems: unknown_field at /args/sql: sql is not a parameter; too_large: too big"; got != want {
		t.Errorf("Problems.Error() = %q, want %q", got, want)
	}
	if got, want := ps.Codes(), []string{CodeUnknownField, CodeTooLarge}; !slices.Equal(got, want) {
		t.Errorf("Codes() = %v, want %v", got, want)
	}
	if got, want := (Problems{root}).Error(), root.Error(); got != want {
		t.Errorf("one problem: %q, want %q", got, want)
	}
}

// compareUTF16Reference orders a and b by converting both to UTF-16.
func compareUTF16Reference(a, b string) int {
	return slices.Compare(utf16.Encode([]rune(a)), utf16.Encode([]rune(b)))
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestCompareUTF16(t *testing.T) {
	tests := []struct{ a, b string }{
		{"", ""}, {"", "a"}, {"a", "b"}, {"ab", "a"}, {"a", "é"}, {"é", "ê"},
		{"\uffff", "\U00010000"}, {"\ue000", "\U0010ffff"}, {"\U0001f600", "\U0001f601"},
		{"x\U0001f600", "x\ufb01"}, {"€", "\U0001d11e"}, {"a\U00010000b", "a\U00010000c"},
		{"\U00010400", "\U00010000"}, {"\u00ff", "\u0100"},
	}
	for _, tt := range tests {
		for _, pair := range [][2]string{{tt.a, tt.b}, {tt.b, tt.a}} {
			got, want := sign(CompareUTF16(pair[0], pair[1])), compareUTF16Reference(pair[0], pair[1])
			if got != want {
				t.Errorf("CompareUTF16(%+q, %+q) = %d, want %d", pair[0], pair[1], got, want)
			}
		}
	}
}

// interestingRune favours the characters where UTF-8 byte order and UTF-16
// code unit order disagree, and those that need escaping.
var interestingRune = rapid.OneOf(
	rapid.RuneFrom([]rune{
		0, 0x1f, '"', '\\', '/', 'a', 'z', 0x7f, 0x80, 0xe9, 0x2028, 0xd7ff, 0xe000, 0xfeff,
		0xff61, 0xffff, 0x10000, 0x1f600, 0x10ffff,
	}),
	rapid.Rune(),
)

func TestCompareUTF16Property(t *testing.T) {
	str := rapid.StringOfN(interestingRune, 0, 6, -1)
	rapid.Check(t, func(t *rapid.T) {
		prefix := str.Draw(t, "prefix")
		a := prefix + str.Draw(t, "a")
		b := prefix + str.Draw(t, "b")
		if got, want := sign(CompareUTF16(a, b)), compareUTF16Reference(a, b); got != want {
			t.Fatalf("CompareUTF16(%+q, %+q) = %d, want %d", a, b, got, want)
		}
	})
}

func TestNewObject(t *testing.T) {
	o, err := NewObject(Member{"b", int64(1)}, Member{"\U00010000", 2}, Member{"\uff61", 3}, Member{"a", nil})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range o {
		names = append(names, m.Name)
	}
	if want := []string{"a", "b", "\U00010000", "\uff61"}; !slices.Equal(names, want) {
		t.Errorf("names = %+q, want %+q", names, want)
	}
	if v, ok := o.Get("b"); !ok || v != int64(1) {
		t.Errorf("Get(b) = %v, %v, want 1, true", v, ok)
	}
	if v, ok := o.Get("\uff61"); !ok || v != 3 {
		t.Errorf("Get(U+FF61) = %v, %v, want 3, true", v, ok)
	}
	if _, ok := o.Get("c"); ok {
		t.Error("Get(c) found a member")
	}
	if _, err := NewObject(Member{"a", 1}, Member{"b", 2}, Member{"a", 3}); err == nil {
		t.Error("NewObject with a repeated name: no error")
	}
}

func TestEncode(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{nil, `null`},
		{true, `true`},
		{int64(-42), `-42`},
		{7, `7`},
		{"<&>\u2028\u007f\x00\x1f\"\\/\b\f\n\r\té😀", "\"<&>\u2028\u007f\\u0000\\u001f\\\"\\\\/\\b\\f\\n\\r\\té😀\""},
		{[]any{}, `[]`},
		{Object(nil), `{}`},
		{[]string{"a", "b"}, `["a","b"]`},
		{map[string]any{"b": 1, "a": []any{int64(2)}, "\U00010000": nil, "\uff61": true}, "{\"a\":[2],\"b\":1,\"\U00010000\":null,\"\uff61\":true}"},
		{Object{{"a", Object{{"x", "y"}}}, {"b", []any{nil, false}}}, `{"a":{"x":"y"},"b":[null,false]}`},
	}
	for _, tt := range tests {
		got, err := Encode(tt.v)
		if err != nil || string(got) != tt.want {
			t.Errorf("Encode(%#v) = %s, %v, want %s", tt.v, got, err, tt.want)
		}
	}
}

func TestEncodeRefuses(t *testing.T) {
	tests := []struct {
		name string
		v    any
	}{
		{"float", 1.5},
		{"float in array", []any{int64(1), 2.0}},
		{"integer above 2^53-1", int64(MaxInt + 1)},
		{"integer below -(2^53-1)", []any{int64(-MaxInt - 1)}},
		{"invalid UTF-8", "\xff"},
		{"invalid UTF-8 name", Object{{"\xff", nil}}},
		{"members out of order", Object{{"b", nil}, {"a", nil}}},
		{"repeated member", Object{{"a", nil}, {"a", nil}}},
		{"struct", struct{}{}},
		{"nested map value", map[string]any{"a": 1.5}},
	}
	for _, tt := range tests {
		if got, err := Encode(tt.v); err == nil {
			t.Errorf("%s: Encode(%#v) = %s, want an error", tt.name, tt.v, got)
		}
	}
}

// TestRefusalCostsLittle: text that fails before its first container closes
// allocates about its own size (one copy), however many members its
// punctuation suggests.
func TestRefusalCostsLittle(t *testing.T) {
	for _, in := range []string{
		strings.Repeat(":", 200_000),
		`{"a":` + strings.Repeat(`[`, 20) + strings.Repeat(":,", 100_000),
		`[1,` + strings.Repeat(",", 200_000),
	} {
		data := []byte(in)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		_, err := Parse(data)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("Parse(%.20q...) accepted", in)
		}
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(len(in))+64<<10; got > limit {
			t.Errorf("Parse(%.20q...) of %d bytes allocated %d bytes, want at most %d", in, len(in), got, limit)
		}
	}
}
