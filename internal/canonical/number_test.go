package canonical

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// ECMAScript Number::toString vectors: values whose output the ECMAScript
// specification fixes (each checked against what a JavaScript engine
// prints for the same double), chosen around the thresholds where
// ECMAScript and strconv's 'g' format differ.
var ecmaVectors = []struct {
	f    float64
	want string
}{
	{0, "0"},
	{math.Copysign(0, -1), "0"},
	{1, "1"},
	{-1, "-1"},
	{1.5, "1.5"},
	{0.1, "0.1"},
	{sum(0.2, 0.1), "0.30000000000000004"},
	{21.5, "21.5"},
	{100, "100"},
	{123456789, "123456789"},
	{1e20, "100000000000000000000"},
	{1e21, "1e+21"},
	{1.5e21, "1.5e+21"},
	{123e20, "1.23e+22"},
	{1e300, "1e+300"},
	{math.MaxFloat64, "1.7976931348623157e+308"},
	{9007199254740991, "9007199254740991"},
	{9007199254740992, "9007199254740992"},
	{1e16, "10000000000000000"},
	{4503599627370495.5, "4503599627370495.5"},
	{0.000001, "0.000001"},
	{0.0000015, "0.0000015"},
	{1e-7, "1e-7"},
	{5e-7, "5e-7"},
	{2.5e-7, "2.5e-7"},
	{1.2345e-7, "1.2345e-7"},
	{-5e-7, "-5e-7"},
	{1e-300, "1e-300"},
	{5e-324, "5e-324"},
	{2.2250738585072014e-308, "2.2250738585072014e-308"},
	{sum(0.1, 0.1, 0.1), "0.30000000000000004"},
	{1.0 / 3, "0.3333333333333333"},
	{2.0 / 3, "0.6666666666666666"},
	{123.456, "123.456"},
	{-123.456e-10, "-1.23456e-8"},
	{1234567.0 / 1e12, "0.000001234567"},
	{math.Inf(1), "Infinity"},
	{math.Inf(-1), "-Infinity"},
	{math.NaN(), "NaN"},
}

// sum adds in float64 at run time (Go adds constants exactly).
func sum(xs ...float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}

func TestAppendECMAScript(t *testing.T) {
	for _, v := range ecmaVectors {
		if got := string(AppendECMAScript(nil, v.f)); got != v.want {
			t.Errorf("AppendECMAScript(%v) = %q, want %q", v.f, got, v.want)
		}
	}
}

// TestECMAScriptDiffersFromGo pins the forms where Go's formatting and
// ECMAScript's disagree, which is why AppendECMAScript exists.
func TestECMAScriptDiffersFromGo(t *testing.T) {
	for _, v := range []struct {
		f       float64
		goG, es string
	}{
		{1e20, "1e+20", "100000000000000000000"},
		{5e-7, "5e-07", "5e-7"},
		{1e-6, "1e-06", "0.000001"},
		{1e21, "1e+21", "1e+21"},
		{123456789012, "1.23456789012e+11", "123456789012"},
	} {
		if got := strconv.FormatFloat(v.f, 'g', -1, 64); got != v.goG {
			t.Errorf("strconv 'g' of %v = %q, want %q", v.f, got, v.goG)
		}
		if got := string(AppendECMAScript(nil, v.f)); got != v.es {
			t.Errorf("ECMAScript of %v = %q, want %q", v.f, got, v.es)
		}
	}
}

func numbersAt(names ...string) *NumberPaths {
	root := &NumberPaths{}
	for _, n := range names {
		root.Member(n).Accept()
	}
	return root
}

// TestNumberRule is the number exception of DESIGN §4, at a path the
// schema types as number.
func TestNumberRule(t *testing.T) {
	opt := Options{Numbers: numbersAt("x")}
	for _, c := range []struct {
		lit  string
		want any // int64, Number, or an error code
	}{
		{"0.1", Number(0.1)},
		{"21.5", Number(21.5)},
		{"1.0", int64(1)},
		{"-0.0", int64(0)},
		{"0.0", int64(0)},
		{"0e5", int64(0)},
		{"2.5e-7", Number(2.5e-7)},
		{"25e-8", Number(2.5e-7)},
		{"0.00000025", Number(2.5e-7)},
		{"5e-7", Number(5e-7)},
		{"1E2", int64(100)},
		{"1e+2", int64(100)},
		{"0.10", Number(0.1)},
		{"100e-3", Number(0.1)},
		{"-1.5", Number(-1.5)},
		{"9007199254740991.0", int64(MaxInt)},
		{"-9007199254740991e0", int64(-MaxInt)},
		{"4503599627370495.5", Number(4503599627370495.5)},
		{"0.30000000000000004", Number(sum(0.1, 0.2))},
		{"0.1000000000000000055", CodeInexactNumber},
		{"0.3000000000000000444", CodeInexactNumber},
		{"1.00000000000000001", CodeInexactNumber},
		{"9007199254740993.0", CodeInexactNumber},
		{"1e-400", CodeInexactNumber},
		{"1e16", CodeOutOfRange},
		{"9007199254740992.0", CodeOutOfRange},
		{"-9.007199254740992e15", CodeOutOfRange},
		{"1e21", CodeOutOfRange},
		{"1e400", CodeOutOfRange},
		{"-1e400", CodeOutOfRange},
		{"1e99999999999999999999", CodeOutOfRange},
		{"1e-99999999999999999999", CodeInexactNumber},
		// Integer literals keep the integer rule at number paths too.
		{"10000000000000000", CodeOutOfRange},
		{"7", int64(7)},
	} {
		body := `{"x":` + c.lit + `}`
		v, err := ParseWith([]byte(body), opt)
		if code, isCode := c.want.(string); isCode {
			var p *Problem
			if !errors.As(err, &p) || p.Code != code {
				t.Errorf("%s: got %v, %v; want %s", c.lit, v, err, code)
				continue
			}
			if p.Path != "/x" || p.Offset != 5 {
				t.Errorf("%s: problem at %q offset %d, want /x offset 5", c.lit, p.Path, p.Offset)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v, want %v", c.lit, err, c.want)
			continue
		}
		got, _ := v.(Object).Get("x")
		if got != c.want {
			t.Errorf("%s: parsed %#v, want %#v", c.lit, got, c.want)
		}
	}
}

// TestNumberCanonicalForm: the canonical bytes of an accepted number are
// its ECMAScript form, and they parse back to the same value.
func TestNumberCanonicalForm(t *testing.T) {
	opt := Options{Numbers: numbersAt("x")}
	for lit, want := range map[string]string{
		"0.10":        "0.1",
		"1.0":         "1",
		"25e-8":       "2.5e-7",
		"0.00000025":  "2.5e-7",
		"0.000005":    "0.000005",
		"5E-7":        "5e-7",
		"-0.0":        "0",
		"12.50":       "12.5",
		"1.2345e3":    "1234.5",
		"123456.7e-2": "1234.567",
	} {
		v, err := ParseWith([]byte(`{"x":`+lit+`}`), opt)
		if err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		b, err := Encode(v)
		if err != nil {
			t.Fatalf("%s: %v", lit, err)
		}
		if got := string(b); got != `{"x":`+want+`}` {
			t.Errorf("%s: canonical %s, want {\"x\":%s}", lit, got, want)
		}
		back, err := ParseWith(b, Options{Numbers: NumbersAnywhere()})
		if err != nil {
			t.Fatalf("%s: canonical bytes %s do not read back: %v", lit, b, err)
		}
		if b2, _ := Encode(back); string(b2) != string(b) {
			t.Errorf("%s: read back as %s, want %s", lit, b2, b)
		}
	}
}

// TestNumberPathsOnly: a fraction is accepted only at the paths given;
// every other place keeps float_not_allowed, and with no paths nothing
// changes.
func TestNumberPathsOnly(t *testing.T) {
	root := &NumberPaths{}
	args := root.Member("args")
	args.Member("price").Accept()
	args.Member("points").Items().Member("lat").Accept()
	opt := Options{Numbers: root}
	ok := `{"args":{"price":1.5,"points":[{"lat":0.25,"n":1},{"lat":-2.5}],"count":2}}`
	if _, err := ParseWith([]byte(ok), opt); err != nil {
		t.Fatalf("%s: %v", ok, err)
	}
	for body, path := range map[string]string{
		`{"args":{"count":1.5}}`:                          "/args/count",
		`{"args":{"price":{"inner":1.5}}}`:                "/args/price/inner",
		`{"args":{"points":[{"n":0.5}]}}`:                 "/args/points/0/n",
		`{"args":{"points":[{"lat":0.5},{"lat":[0.5]}]}}`: "/args/points/1/lat/0",
		`{"args":{"points":[0.5]}}`:                       "/args/points/0",
		`{"price":1.5}`:                                   "/price",
		`{"args":[1.5]}`:                                  "/args/0",
		`{"args":{"pricE":1.5}}`:                          "/args/pricE",
	} {
		_, err := ParseWith([]byte(body), opt)
		var p *Problem
		if !errors.As(err, &p) || p.Code != CodeFloatNotAllowed || p.Path != path {
			t.Errorf("%s: %v, want float_not_allowed at %s", body, err, path)
		}
		if _, err := Parse([]byte(body)); err == nil || err.(*Problem).Code != CodeFloatNotAllowed {
			t.Errorf("%s without number paths: %v, want float_not_allowed", body, err)
		}
	}
	if _, err := Parse([]byte(`{"args":{"price":1.5}}`)); err == nil || err.(*Problem).Code != CodeFloatNotAllowed {
		t.Errorf("default options accept a fraction: %v", err)
	}
}

func TestNumberPathsEmpty(t *testing.T) {
	var nilPaths *NumberPaths
	root := &NumberPaths{}
	root.Member("a").Items()
	if !nilPaths.Empty() || !root.Empty() {
		t.Errorf("paths without Accept report numbers")
	}
	root.Member("a").Items().Accept()
	if root.Empty() || NumbersAnywhere().Empty() {
		t.Errorf("paths with Accept report none")
	}
}

func TestEncodeNumber(t *testing.T) {
	for _, c := range []struct {
		v    any
		want string
	}{
		{Number(0.5), "0.5"},
		{Number(1e-7), "1e-7"},
		{[]any{Number(-2.5), int64(3)}, "[-2.5,3]"},
		{Number(2), "2"},
	} {
		b, err := Encode(c.v)
		if err != nil || string(b) != c.want {
			t.Errorf("Encode(%#v) = %s, %v; want %s", c.v, b, err, c.want)
		}
	}
	for _, v := range []any{Number(math.NaN()), Number(math.Inf(1)), Number(1e16), Number(1e21), 0.5} {
		if b, err := Encode(v); err == nil {
			t.Errorf("Encode(%#v) = %s, want an error", v, b)
		}
	}
}

func TestNumberValue(t *testing.T) {
	for _, c := range []struct {
		f    float64
		want any
	}{
		{0.5, Number(0.5)}, {2, int64(2)}, {math.Copysign(0, -1), int64(0)}, {MaxInt, int64(MaxInt)},
	} {
		if got, err := NumberValue(c.f); err != nil || got != c.want {
			t.Errorf("NumberValue(%v) = %#v, %v; want %#v", c.f, got, err, c.want)
		}
	}
	for _, f := range []float64{MaxInt + 1, -1e16, math.NaN(), math.Inf(-1)} {
		if got, err := NumberValue(f); err == nil {
			t.Errorf("NumberValue(%v) = %#v, want an error", f, got)
		}
	}
}

func TestMirroredToolNames(t *testing.T) {
	for name, ok := range map[string]bool{
		"payments.refund":               true,
		"demo/add":                      true,
		"demo/Get-Weather_v1.2":         true,
		"a/b":                           true,
		"a-b-c/x":                       true,
		"Demo/add":                      false,
		"1demo/add":                     false,
		"demo/":                         false,
		"/add":                          false,
		"demo/a/b":                      false,
		"demo/a b":                      false,
		"demo/ſ":                        false,
		"demo_x/add":                    false,
		strings.Repeat("a", 63) + "/t":  true,
		strings.Repeat("a", 64) + "/t":  false,
		"s/" + strings.Repeat("T", 128): true,
		"s/" + strings.Repeat("T", 129): false,
		strings.Repeat("a", 129):        false,
		"payments.Refund":               false,
	} {
		if got := ValidTool(name); got != ok {
			t.Errorf("ValidTool(%q) = %v, want %v", name, got, ok)
		}
	}
	s, tool, ok := SplitMirrored("demo/add.v2")
	if !ok || s != "demo" || tool != "add.v2" {
		t.Errorf("SplitMirrored = %q, %q, %v", s, tool, ok)
	}
	p, err := ParseProposal([]byte(`{"tool":"demo/add","target":"mcp:demo","args":{}}`))
	if err != nil || p.Tool != "demo/add" {
		t.Errorf("proposal for a mirrored tool: %v, %v", p, err)
	}
}

// FuzzECMAScript checks the ECMAScript form of any double against strconv:
// it reads back as the same double, uses the shortest digits, and switches
// to exponent form exactly outside [1e-7, 1e21).
func FuzzECMAScript(f *testing.F) {
	for _, v := range ecmaVectors {
		f.Add(math.Float64bits(v.f))
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		x := math.Float64frombits(bits)
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return
		}
		s := string(AppendECMAScript(nil, x))
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != x {
			t.Fatalf("%v printed %q, which reads back as %v (%v)", x, s, back, err)
		}
		digits, _ := shortest(math.Abs(x))
		if x != 0 {
			short := strconv.FormatFloat(math.Abs(x), 'e', -1, 64)
			mant := strings.TrimRight(strings.Replace(short[:strings.IndexByte(short, 'e')], ".", "", 1), "0")
			if mant == "" {
				mant = "0"
			}
			if digits != mant {
				t.Fatalf("%v: digits %q, strconv's shortest %q", x, digits, mant)
			}
		}
		abs := math.Abs(x)
		exp := strings.ContainsRune(s, 'e')
		if wantExp := x != 0 && (abs >= 1e21 || abs < 1e-6); exp != wantExp {
			t.Fatalf("%v printed %q: exponent form %v, want %v", x, s, exp, wantExp)
		}
		if exp && !strings.Contains(s, "e+") && !strings.Contains(s, "e-") {
			t.Fatalf("%v printed %q without an exponent sign", x, s)
		}
		// Accepted as a literal at a number path iff the value is not an
		// integer outside ±MaxInt, and then it reads back as x.
		v, err := ParseWith([]byte(`{"x":`+s+`}`), Options{Numbers: numbersAt("x")})
		integral := x == math.Trunc(x)
		if integral && abs > MaxInt {
			if err == nil || err.(*Problem).Code != CodeOutOfRange {
				t.Fatalf("%s: %v, want out_of_range", s, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		got, _ := v.(Object).Get("x")
		switch g := got.(type) {
		case int64:
			if !integral || float64(g) != x {
				t.Fatalf("%s parsed as integer %d", s, g)
			}
		case Number:
			if integral || float64(g) != x {
				t.Fatalf("%s parsed as Number %v", s, g)
			}
		default:
			t.Fatalf("%s parsed as %T", s, got)
		}
	})
}

// FuzzNumberLiteral: any literal at a number path is accepted exactly when
// its nearest double's ECMAScript form denotes the same decimal value, and
// an accepted literal's canonical form reads back to the same value.
func FuzzNumberLiteral(f *testing.F) {
	for _, s := range []string{"0.1", "1.0", "2.5e-7", "0.1000000000000000055", "1e16", "-0.0", "12.50", "1e400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		body := []byte(`{"x":` + lit + `}`)
		v, err := ParseWith(body, Options{Numbers: numbersAt("x")})
		if err != nil {
			return
		}
		lit = strings.Trim(lit, " \t\r\n")
		if lit == "" || strings.Trim(lit, "0123456789.eE+-") != "" {
			return // more than one number literal
		}
		got, _ := v.(Object).Get("x")
		b, err := Encode(got)
		if err != nil {
			t.Fatalf("%s parsed as %#v, which does not encode: %v", lit, got, err)
		}
		f1, err1 := strconv.ParseFloat(lit, 64)
		f2, err2 := strconv.ParseFloat(string(b), 64)
		if err1 != nil || err2 != nil || f1 != f2 {
			t.Fatalf("%s → %s: values %v and %v differ (%v, %v)", lit, b, f1, f2, err1, err2)
		}
		if parseDecimal([]byte(lit)) != parseDecimal(b) {
			t.Fatalf("%s accepted, but its canonical form %s denotes another decimal", lit, b)
		}
	})
}

func TestNumbersFor(t *testing.T) {
	for tool, want := range map[string]bool{"demo/scale": true, "payments.refund": false, "": false, "Demo/x": false} {
		if got := NumbersFor(tool).Accepts(); got != want {
			t.Errorf("NumbersFor(%q).Accepts() = %t, want %t", tool, got, want)
		}
	}
}
