package canonical

import (
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of the strict parser (DESIGN §4).
const (
	// MaxInt is the largest integer accepted: 2^53−1, the largest that every
	// JSON runtime (including JavaScript's) holds exactly.
	MaxInt = 1<<53 - 1
	// MaxBodyBytes is the largest proposal accepted.
	MaxBodyBytes = 256 << 10
	// MaxArgsDepth is how deeply args may nest, counting args itself.
	MaxArgsDepth = 32
)

// Options bound a parse.
type Options struct {
	// MaxBytes refuses longer input with too_large. Zero means MaxBodyBytes.
	MaxBytes int
	// MaxDepth refuses input whose containers nest deeper, counting the
	// outermost as 1, with too_deep. Zero means MaxArgsDepth+1: a proposal
	// object holding args at MaxArgsDepth.
	MaxDepth int
	// Numbers are the places where a number with a fraction or exponent is
	// accepted under the number rule of DESIGN §4 (exactly the value of
	// its shortest ECMAScript form, else inexact_number; integral values
	// within ±MaxInt, else out_of_range), giving an int64 or a Number.
	// Everywhere else, and everywhere when Numbers is nil, such a number is
	// float_not_allowed.
	Numbers *NumberPaths
}

// Parse reads one JSON text under the default Options.
func Parse(data []byte) (any, error) {
	return ParseWith(data, Options{})
}

// ParseWith reads one JSON text (RFC 8259) into nil, bool, int64, string,
// []any and Object values. On failure it returns a *Problem whose Path is the
// JSON Pointer of the offending value and whose Offset is the byte where the
// parser stopped.
func ParseWith(data []byte, opt Options) (any, error) {
	if opt.MaxBytes == 0 {
		opt.MaxBytes = MaxBodyBytes
	}
	if opt.MaxDepth == 0 {
		opt.MaxDepth = MaxArgsDepth + 1
	}
	if len(data) > opt.MaxBytes {
		return nil, &Problem{Code: CodeTooLarge, Offset: -1,
			Message: fmt.Sprintf("the body is %d bytes; at most %d are accepted", len(data), opt.MaxBytes)}
	}
	// One copy of the whole text: strings without escapes are substrings of
	// it rather than allocations of their own.
	p := parser{data: data, text: string(data), maxDepth: opt.MaxDepth, num: opt.Numbers}
	p.skipSpace()
	v := p.value()
	if p.err == nil {
		p.skipSpace()
		if p.pos < len(p.data) {
			p.fail(CodeMalformedJSON, "unexpected %s after the JSON value", p.describe())
		}
	}
	if p.err != nil {
		p.err.Path = p.errPointer()
		return nil, p.err
	}
	return v, nil
}

type segment struct {
	name  string
	index int // -1 for an object member
}

type parser struct {
	data     []byte
	text     string // data as a string
	pos      int
	depth    int
	maxDepth int
	err      *Problem
	// num is the place of the value being read in Options.Numbers; nil
	// where no number is accepted at or below it.
	num *NumberPaths
	// errPath is where err was found, innermost first: each container
	// adds its step as the failure returns through it.
	errPath []segment
	scratch []byte
	// members and items are stacks shared by the objects and arrays being
	// read: a container's elements collect at the top and are copied out
	// once, into a slice of exactly their number, when it closes.
	members []Member
	items   []any
	// The finished containers' elements are carved from blocks, sized
	// when the first container closes: text that fails before that costs
	// no more than itself.
	sized      bool
	memberSlab slab[Member]
	itemSlab   slab[any]
}

// slab hands out slices carved from one block sized before the parse, so
// that small objects and arrays do not each cost an allocation. Each slice's
// capacity is its length, so an append to one never writes into its
// neighbour. When the block runs out, slices are allocated one by one.
type slab[T any] struct{ free []T }

func (s *slab[T]) take(n int) []T {
	if n > len(s.free) {
		return make([]T, n)
	}
	out := s.free[:n:n]
	s.free = s.free[n:]
	return out
}

// sizeSlabs estimates from the text how many members and array items it
// holds. Every member has a ':' outside strings, so the colons bound the
// members. A ',' separates two members or two items, so commas, less the
// members, plus one first member or item per '{' and '[' bound the items
// when no string holds a colon (and a short block only means more
// allocations). The bounds by length keep each block at most what the
// smallest members ("":0,) and items (0,) could fill.
func (p *parser) sizeSlabs() {
	colons := bytes.Count(p.data, []byte{':'})
	commas := bytes.Count(p.data, []byte{','})
	opens := bytes.Count(p.data, []byte{'{'}) + bytes.Count(p.data, []byte{'['})
	members := min(colons, len(p.data)/5+1)
	items := min(commas-colons+opens, len(p.data)/2+1)
	if members > 0 {
		p.memberSlab.free = make([]Member, members)
	}
	if items > 0 {
		p.itemSlab.free = make([]any, items)
	}
	p.sized = true
}

// errPointer returns the JSON Pointer of errPath.
func (p *parser) errPointer() string {
	var b []byte
	for _, s := range slices.Backward(p.errPath) {
		b = append(b, '/')
		if s.index >= 0 {
			b = strconv.AppendInt(b, int64(s.index), 10)
		} else {
			b = appendPointerToken(b, s.name)
		}
	}
	return string(b)
}

func (p *parser) fail(code, format string, args ...any) {
	if p.err != nil {
		return
	}
	// Columns count characters, not bytes: UTF-8 continuation bytes do not
	// advance the column.
	line, col := 1, 1
	for _, c := range p.data[:min(p.pos, len(p.data))] {
		switch {
		case c == '\n':
			line++
			col = 1
		case c&0xC0 != 0x80:
			col++
		}
	}
	msg := fmt.Sprintf(format, args...)
	if code == CodeMalformedJSON {
		msg = fmt.Sprintf("%s at line %d, column %d (byte %d)", msg, line, col, p.pos)
	}
	p.err = &Problem{Code: code, Message: msg, Offset: p.pos}
}

func (p *parser) describe() string {
	if p.pos >= len(p.data) {
		return "end of input"
	}
	c := p.data[p.pos]
	if c >= 0x20 && c < 0x7f {
		return fmt.Sprintf("character %q", c)
	}
	return fmt.Sprintf("byte 0x%02x", c)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) value() any {
	if p.pos >= len(p.data) {
		p.fail(CodeMalformedJSON, "expected a value, found end of input")
		return nil
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		s, _ := p.string()
		return s
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return p.literal("true", true)
	case c == 'f':
		return p.literal("false", false)
	case c == 'n':
		return p.literal("null", nil)
	case c >= 0x80:
		p.failUTF8OrMalformed("expected a value")
		return nil
	default:
		p.fail(CodeMalformedJSON, "expected a value, found %s", p.describe())
		return nil
	}
}

// failUTF8OrMalformed reports bytes outside a string: invalid UTF-8 is
// invalid_utf8, a valid non-ASCII character is simply not JSON.
func (p *parser) failUTF8OrMalformed(what string) {
	if r, _ := utf8.DecodeRune(p.data[p.pos:]); r == utf8.RuneError {
		p.fail(CodeInvalidUTF8, "the text is not valid UTF-8 at byte %d", p.pos)
		return
	}
	p.fail(CodeMalformedJSON, "%s, found a non-ASCII character", what)
}

func (p *parser) literal(word string, v any) any {
	if len(p.data)-p.pos >= len(word) && string(p.data[p.pos:p.pos+len(word)]) == word {
		p.pos += len(word)
		return v
	}
	p.fail(CodeMalformedJSON, "invalid literal; expected %q", word)
	return nil
}

// enter counts one more level of nesting. The object and array readers
// count it back on success; after a failure the depth no longer matters.
func (p *parser) enter() bool {
	p.depth++
	if p.depth > p.maxDepth {
		p.fail(CodeTooDeep, "containers nest more than %d deep", p.maxDepth)
		return false
	}
	return true
}

func (p *parser) object() any {
	if !p.enter() {
		return nil
	}
	p.pos++ // {
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return Object{}
	}
	if p.members == nil {
		p.members = make([]Member, 0, 16)
	}
	base := len(p.members)
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			p.fail(CodeMalformedJSON, "expected a member name in double quotes, found %s", p.describe())
			return nil
		}
		name, ok := p.string()
		if !ok {
			return nil
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			p.fail(CodeMalformedJSON, "expected ':' after member name, found %s", p.describe())
			return nil
		}
		p.pos++
		p.skipSpace()
		outer := p.num
		p.num = outer.member(name)
		v := p.value()
		p.num = outer
		if p.err != nil {
			p.errPath = append(p.errPath, segment{name: name, index: -1})
			return nil
		}
		p.members = append(p.members, Member{Name: name, Value: v})
		p.skipSpace()
		if p.pos >= len(p.data) {
			p.fail(CodeMalformedJSON, "unterminated object")
			return nil
		}
		if p.data[p.pos] == ',' {
			p.pos++
			p.skipSpace()
			continue
		}
		if p.data[p.pos] == '}' {
			p.pos++
			break
		}
		p.fail(CodeMalformedJSON, "expected ',' or '}' in object, found %s", p.describe())
		return nil
	}
	if !p.sized {
		p.sizeSlabs()
	}
	members := Object(p.memberSlab.take(len(p.members) - base))
	copy(members, p.members[base:])
	p.members = p.members[:base]
	if !sortedUTF16(members) {
		slices.SortStableFunc(members, func(a, b Member) int { return CompareUTF16(a.Name, b.Name) })
	}
	for i := 1; i < len(members); i++ {
		if members[i-1].Name == members[i].Name {
			p.errPath = append(p.errPath, segment{name: members[i].Name, index: -1})
			p.err = &Problem{Code: CodeDuplicateKey, Offset: -1,
				Message: fmt.Sprintf("member %q appears more than once", members[i].Name)}
			return nil
		}
	}
	p.depth--
	return members
}

func sortedUTF16(ms Object) bool {
	for i := 1; i < len(ms); i++ {
		if CompareUTF16(ms[i-1].Name, ms[i].Name) > 0 {
			return false
		}
	}
	return true
}

func (p *parser) array() any {
	if !p.enter() {
		return nil
	}
	p.pos++ // [
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return []any{}
	}
	if p.items == nil {
		p.items = make([]any, 0, 16)
	}
	base := len(p.items)
	outer := p.num
	p.num = outer.item()
	for {
		v := p.value()
		if p.err != nil {
			p.errPath = append(p.errPath, segment{index: len(p.items) - base})
			return nil
		}
		p.items = append(p.items, v)
		p.skipSpace()
		if p.pos >= len(p.data) {
			p.fail(CodeMalformedJSON, "unterminated array")
			return nil
		}
		if p.data[p.pos] == ',' {
			p.pos++
			p.skipSpace()
			continue
		}
		if p.data[p.pos] == ']' {
			p.pos++
			if !p.sized {
				p.sizeSlabs()
			}
			items := p.itemSlab.take(len(p.items) - base)
			copy(items, p.items[base:])
			p.items = p.items[:base]
			p.depth--
			p.num = outer // after a failure nothing more is read
			return items
		}
		p.fail(CodeMalformedJSON, "expected ',' or ']' in array, found %s", p.describe())
		return nil
	}
}

// string reads a quoted string starting at p.pos.
func (p *parser) string() (string, bool) {
	p.pos++ // opening quote
	start := p.pos
	// Fast path: no escapes. The string is a substring of the text.
	var high uint64 // OR of every byte: a top bit set means "not all ASCII"
	for {
		if p.pos+8 <= len(p.data) {
			x := loadBytes(p.data, p.pos)
			m := specialBytes(x)
			if m == 0 {
				high |= x
				p.pos += 8
				continue
			}
			n := firstSpecial(m)
			high |= x & (1<<(8*n) - 1) // the bytes before the special one
			p.pos += n
		} else {
			for p.pos < len(p.data) && !stringSpecial[p.data[p.pos]] {
				high |= uint64(p.data[p.pos])
				p.pos++
			}
			if p.pos == len(p.data) {
				break
			}
		}
		switch c := p.data[p.pos]; c {
		case '"':
			s := p.data[start:p.pos]
			if high&highBits != 0 && !utf8.Valid(s) {
				p.pos = start + invalidAt(s)
				p.fail(CodeInvalidUTF8, "string is not valid UTF-8 at byte %d", p.pos)
				return "", false
			}
			p.pos++
			return p.text[start : p.pos-1], true
		case '\\':
		default:
			p.fail(CodeMalformedJSON, "control character 0x%02x must be escaped in a string", c)
			return "", false
		}
		break // an escape: take the slow path
	}
	ascii := high&highBits == 0
	if p.pos >= len(p.data) {
		p.fail(CodeMalformedJSON, "unterminated string")
		return "", false
	}
	// Slow path: decode escapes into scratch.
	buf := append(p.scratch[:0], p.data[start:p.pos]...)
	if !ascii && !utf8.Valid(buf) {
		p.pos = start + invalidAt(buf)
		p.fail(CodeInvalidUTF8, "string is not valid UTF-8 at byte %d", p.pos)
		return "", false
	}
	for p.pos < len(p.data) {
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			p.scratch = buf
			return string(buf), true
		case c == '\\':
			if p.pos+1 >= len(p.data) {
				p.fail(CodeMalformedJSON, "unterminated escape")
				return "", false
			}
			e := p.data[p.pos+1]
			p.pos += 2
			switch e {
			case '"', '\\', '/':
				buf = append(buf, e)
			case 'b':
				buf = append(buf, '\b')
			case 'f':
				buf = append(buf, '\f')
			case 'n':
				buf = append(buf, '\n')
			case 'r':
				buf = append(buf, '\r')
			case 't':
				buf = append(buf, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", false
				}
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || p.pos+6 > len(p.data) || p.data[p.pos] != '\\' || p.data[p.pos+1] != 'u' {
						p.fail(CodeInvalidUTF8, "escaped lone surrogate \\u%04x", r)
						return "", false
					}
					p.pos += 2
					lo, ok := p.hex4()
					if !ok {
						return "", false
					}
					if lo < 0xDC00 || lo > 0xDFFF {
						p.fail(CodeInvalidUTF8, "escaped lone surrogate \\u%04x", r)
						return "", false
					}
					r = utf16.DecodeRune(r, lo)
				}
				buf = utf8.AppendRune(buf, r)
			default:
				p.pos--
				p.fail(CodeMalformedJSON, "invalid escape %s", p.describe())
				return "", false
			}
		case c < 0x20:
			p.fail(CodeMalformedJSON, "control character 0x%02x must be escaped in a string", c)
			return "", false
		case c < 0x80:
			buf = append(buf, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				p.fail(CodeInvalidUTF8, "string is not valid UTF-8 at byte %d", p.pos)
				return "", false
			}
			buf = append(buf, p.data[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
	p.fail(CodeMalformedJSON, "unterminated string")
	return "", false
}

// stringSpecial marks the bytes that end the fast scan of a string: the
// closing quote, a backslash, and the control characters that must be
// escaped.
var stringSpecial = [256]bool{'"': true, '\\': true,
	0x00: true, 0x01: true, 0x02: true, 0x03: true, 0x04: true, 0x05: true, 0x06: true, 0x07: true,
	0x08: true, 0x09: true, 0x0a: true, 0x0b: true, 0x0c: true, 0x0d: true, 0x0e: true, 0x0f: true,
	0x10: true, 0x11: true, 0x12: true, 0x13: true, 0x14: true, 0x15: true, 0x16: true, 0x17: true,
	0x18: true, 0x19: true, 0x1a: true, 0x1b: true, 0x1c: true, 0x1d: true, 0x1e: true, 0x1f: true,
}

func invalidAt(s []byte) int {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRune(s[i:])
		if r == utf8.RuneError && size <= 1 {
			return i
		}
		i += size
	}
	return len(s)
}

func (p *parser) hex4() (rune, bool) {
	if p.pos+4 > len(p.data) {
		p.fail(CodeMalformedJSON, "\\u escape needs four hex digits")
		return 0, false
	}
	var r rune
	for i := 0; i < 4; i++ {
		c := p.data[p.pos+i]
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			p.pos += i
			p.fail(CodeMalformedJSON, "\\u escape needs four hex digits")
			return 0, false
		}
		r = r<<4 | rune(d)
	}
	p.pos += 4
	return r, true
}

// number reads the RFC 8259 number grammar, then refuses anything that is
// not an integer within ±MaxInt.
func (p *parser) number() any {
	start := p.pos
	neg := false
	if p.data[p.pos] == '-' {
		neg = true
		p.pos++
	}
	digits := p.pos
	if p.pos >= len(p.data) || p.data[p.pos] < '0' || p.data[p.pos] > '9' {
		p.fail(CodeMalformedJSON, "expected a digit")
		return nil
	}
	if p.data[p.pos] == '0' {
		p.pos++
	} else {
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
		}
	}
	intEnd := p.pos
	isFloat := false
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if p.pos >= len(p.data) || p.data[p.pos] < '0' || p.data[p.pos] > '9' {
			p.fail(CodeMalformedJSON, "expected a digit after the decimal point")
			return nil
		}
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
		}
		isFloat = true
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if p.pos >= len(p.data) || p.data[p.pos] < '0' || p.data[p.pos] > '9' {
			p.fail(CodeMalformedJSON, "expected a digit in the exponent")
			return nil
		}
		for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
			p.pos++
		}
		isFloat = true
	}
	if isFloat && p.num.Accepts() {
		v, code, msg := literalNumber(p.data[start:p.pos])
		if code != "" {
			p.pos = start
			p.fail(code, "%s", msg)
			return nil
		}
		return v
	}
	if isFloat {
		p.pos = start
		p.fail(CodeFloatNotAllowed, "%s has a fraction or exponent; only integers are accepted (money is an integer in minor units)",
			p.data[start:min(start+40, len(p.data))][:p.numberLen(start)])
		return nil
	}
	if intEnd-digits > 16 {
		p.pos = start
		p.fail(CodeOutOfRange, "integer is outside ±%d", int64(MaxInt))
		return nil
	}
	var n int64
	for _, c := range p.data[digits:intEnd] {
		n = n*10 + int64(c-'0')
	}
	if n > MaxInt {
		p.pos = start
		p.fail(CodeOutOfRange, "integer %s is outside ±%d", p.data[start:intEnd], int64(MaxInt))
		return nil
	}
	if neg {
		n = -n
	}
	return n
}

func (p *parser) numberLen(start int) int {
	i := start
	for i < len(p.data) && i-start < 40 {
		switch c := p.data[i]; {
		case c >= '0' && c <= '9', c == '-', c == '+', c == '.', c == 'e', c == 'E':
			i++
		default:
			return i - start
		}
	}
	return i - start
}
