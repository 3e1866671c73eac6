package canonical

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// CodeInexactNumber refuses a number literal at a number path whose value
// is not exactly the value of the shortest ECMAScript form of its nearest
// double (0.1000000000000000055 reads as the double printed 0.1).
const CodeInexactNumber = "inexact_number"

// Number is a parsed number with a fraction: a finite double that is not an
// integer. The parser produces one only where NumberPaths allow it; a
// number literal whose value is integral (1.0, 2e3) is an int64, so one
// value has one representation. Its canonical form is the ECMAScript
// Number::toString of the double (RFC 8785 §3.2.2.3).
type Number float64

// String returns the ECMAScript form of n.
func (n Number) String() string { return string(AppendECMAScript(nil, float64(n))) }

// MarshalJSON writes the canonical form, so a parsed value embedded in an
// encoding/json response keeps it.
func (n Number) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(n)) || math.IsInf(float64(n), 0) {
		return nil, fmt.Errorf("canonical: %v is not a JSON number", float64(n))
	}
	return AppendECMAScript(nil, float64(n)), nil
}

// NumberValue returns f as a parsed value under the number rule: int64 when
// f is integral and within ±MaxInt, Number when it has a fraction. NaN,
// infinities and integral values outside ±MaxInt are an error.
func NumberValue(f float64) (any, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return nil, fmt.Errorf("canonical: %v is not a JSON number", f)
	case f == math.Trunc(f):
		if f > MaxInt || f < -MaxInt {
			return nil, fmt.Errorf("canonical: %s is outside ±%d", AppendECMAScript(nil, f), int64(MaxInt))
		}
		return int64(f), nil
	}
	return Number(f), nil
}

// AppendECMAScript appends the ECMAScript Number::toString(f) of a finite
// double (ECMA-262 §6.1.6.1.20 with radix 10), which RFC 8785 uses for
// numbers: the shortest digits that read back as f, in plain decimal for
// decimal exponents from -7 to 21 exclusive and in exponent form (with an
// explicit "+" for positive exponents) outside it. Go's strconv 'g' format
// switches at other thresholds (1e21 prints as "1e+21" in both, but 1e20
// is "1e+20" in Go and "100000000000000000000" in ECMAScript, 5e-7 is
// "5e-07" in Go and "5e-7" in ECMAScript). NaN and the infinities are
// written as ECMAScript writes them, though JSON has no such numbers.
func AppendECMAScript(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case f == 0:
		return append(dst, '0') // both zeros
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	digits, n := shortest(f)
	k := len(digits)
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// shortest returns the decimal digits s (no leading or trailing zeros) and
// the exponent n of a positive finite double f, such that f is the double
// nearest to 0.s × 10^n and s is as short as possible. strconv's shortest
// formatting finds the same digits ECMAScript requires: the fewest that
// round-trip, and of those the closest to f.
func shortest(f float64) (string, int) {
	var buf [32]byte
	b := strconv.AppendFloat(buf[:0], f, 'e', -1, 64) // d.ddde±XX
	e := strings.IndexByte(string(b), 'e')
	mant, exp := b[:e], b[e+1:]
	x, _ := strconv.Atoi(string(exp)) // always a small integer
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	for len(digits) > 1 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
	}
	return string(digits), x + 1
}

// decimal is the exact value of a number literal: sign, significant digits
// without leading or trailing zeros, and the exponent n of 0.digits × 10^n.
// Zero has no digits and no sign.
type decimal struct {
	neg    bool
	digits string
	n      int64
}

// maxExponent bounds exponents read from literals, far outside the range of
// doubles, so that arithmetic on them cannot overflow.
const maxExponent = 1 << 40

// parseDecimal reads an RFC 8259 number literal (already checked against
// the grammar) as an exact decimal.
func parseDecimal(lit []byte) decimal {
	var d decimal
	i := 0
	if lit[0] == '-' {
		d.neg = true
		i++
	}
	var digits []byte
	var pointAt int64 = -1 // digits before the decimal point
	for ; i < len(lit) && (lit[i] >= '0' && lit[i] <= '9' || lit[i] == '.'); i++ {
		if lit[i] == '.' {
			pointAt = int64(len(digits))
			continue
		}
		digits = append(digits, lit[i])
	}
	if pointAt < 0 {
		pointAt = int64(len(digits))
	}
	var exp int64
	if i < len(lit) { // e or E
		i++
		neg := false
		if lit[i] == '+' || lit[i] == '-' {
			neg = lit[i] == '-'
			i++
		}
		for ; i < len(lit); i++ {
			if exp < maxExponent {
				exp = exp*10 + int64(lit[i]-'0')
			}
		}
		if neg {
			exp = -exp
		}
	}
	lead := 0
	for lead < len(digits) && digits[lead] == '0' {
		lead++
	}
	digits = digits[lead:]
	for len(digits) > 0 && digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
	}
	if len(digits) == 0 {
		return decimal{} // -0 is 0
	}
	d.digits = string(digits)
	d.n = pointAt - int64(lead) + exp
	return d
}

// literalNumber applies the number rule of DESIGN §4 to a literal with a
// fraction or exponent: the value is accepted iff the shortest ECMAScript
// form of its nearest double denotes exactly the literal's value; an
// integral value must lie within ±MaxInt. It returns int64 or Number, or a
// problem code and message.
func literalNumber(lit []byte) (any, string, string) {
	// The literal matched the grammar, so ParseFloat can only report a
	// range error: overflow is an infinity, underflow a zero that the
	// comparison below finds inexact.
	f, _ := strconv.ParseFloat(string(lit), 64)
	if math.IsInf(f, 0) {
		return nil, CodeOutOfRange, fmt.Sprintf("%s is outside the range of numbers", lit)
	}
	want := parseDecimal(lit)
	var got decimal
	if f != 0 {
		digits, n := shortest(math.Abs(f))
		got = decimal{neg: f < 0, digits: digits, n: int64(n)}
	}
	if got != want {
		return nil, CodeInexactNumber, fmt.Sprintf("%s is not exactly a double; the nearest one is %s (send that, or fewer digits)",
			lit, AppendECMAScript(nil, f))
	}
	v, err := NumberValue(f)
	if err != nil {
		return nil, CodeOutOfRange, fmt.Sprintf("%s is an integer outside ±%d", lit, int64(MaxInt))
	}
	return v, "", ""
}

// NumberPaths is the set of places in a JSON text where a number with a
// fraction or exponent is accepted under the number rule of DESIGN §4. The
// zero value (or nil) accepts none. It is built from a schema: the root of
// the set is the root of the text being parsed; Member and Items step into
// an object member and into every item of an array.
//
// A NumberPaths must not change while a parse uses it.
type NumberPaths struct {
	here     bool
	anywhere bool
	members  map[string]*NumberPaths
	items    *NumberPaths
}

// NumbersAnywhere accepts numbers everywhere under the same exactness rule.
// It is for reading back values that were accepted by a schema-driven
// parse and stored (envelopes, audit details): the paths were checked when
// they were accepted, and reading them back must give the same value.
func NumbersAnywhere() *NumberPaths { return &NumberPaths{anywhere: true} }

// NumbersFor returns the number paths for reading back a stored value of
// a call of tool (its args, its envelope): NumbersAnywhere for a tool
// mirrored from an MCP upstream, whose numbers its pinned schema accepted
// when the call was made and whose stored text is their canonical form;
// nil, integers only, for every other tool.
func NumbersFor(tool string) *NumberPaths {
	if _, _, ok := SplitMirrored(tool); ok {
		return NumbersAnywhere()
	}
	return nil
}

// Accept marks the place n stands for as accepting numbers. It returns n.
func (n *NumberPaths) Accept() *NumberPaths {
	n.here = true
	return n
}

// Member returns the place of the object member name inside n, creating it.
func (n *NumberPaths) Member(name string) *NumberPaths {
	if n.anywhere {
		return n
	}
	if n.members == nil {
		n.members = map[string]*NumberPaths{}
	}
	c, ok := n.members[name]
	if !ok {
		c = &NumberPaths{}
		n.members[name] = c
	}
	return c
}

// Items returns the place of every item of an array at n, creating it.
func (n *NumberPaths) Items() *NumberPaths {
	if n.anywhere {
		return n
	}
	if n.items == nil {
		n.items = &NumberPaths{}
	}
	return n.items
}

// Empty reports whether the set accepts numbers nowhere.
func (n *NumberPaths) Empty() bool {
	if n == nil {
		return true
	}
	if n.here || n.anywhere {
		return false
	}
	for _, c := range n.members {
		if !c.Empty() {
			return false
		}
	}
	return n.items.Empty()
}

// Accepts reports whether a number is accepted at the place n stands for.
func (n *NumberPaths) Accepts() bool { return n != nil && (n.here || n.anywhere) }

// member and items step without creating: nil when nothing below accepts.
func (n *NumberPaths) member(name string) *NumberPaths {
	if n == nil || n.anywhere {
		return n
	}
	return n.members[name]
}

func (n *NumberPaths) item() *NumberPaths {
	if n == nil || n.anywhere {
		return n
	}
	return n.items
}
