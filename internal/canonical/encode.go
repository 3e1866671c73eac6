package canonical

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Encode returns the RFC 8785 canonical bytes of v. v may hold nil, bool,
// int, int64, Number, string, []any, []string, Object and map[string]any
// values; anything else (float64 in particular) is an error.
func Encode(v any) ([]byte, error) {
	return Append(nil, v)
}

// Append appends the canonical bytes of v to dst.
func Append(dst []byte, v any) ([]byte, error) {
	e := encoder{buf: dst}
	if err := e.value(v); err != nil {
		return nil, err
	}
	return e.buf, nil
}

// flushAt is how many bytes an encoder with a sink holds before it hands
// them over: enough to make each hash write cheap, small enough that a
// digest allocates the same small buffer whatever the envelope's size.
const flushAt = 512

// encoder writes canonical bytes to buf. With a sink (the digest's hash),
// it hands the bytes over whenever buf reaches flushAt, so hashing an
// envelope needs no buffer the size of the envelope.
type encoder struct {
	buf  []byte
	sink io.Writer
}

func (e *encoder) flush() {
	if e.sink != nil && len(e.buf) >= flushAt {
		e.sink.Write(e.buf) // a hash never fails
		e.buf = e.buf[:0]
	}
}

func (e *encoder) value(v any) error {
	var err error
	switch v := v.(type) {
	case nil:
		e.buf = append(e.buf, "null"...)
	case bool:
		if v {
			e.buf = append(e.buf, "true"...)
		} else {
			e.buf = append(e.buf, "false"...)
		}
	case int64:
		e.buf, err = appendInt(e.buf, v)
	case int:
		e.buf, err = appendInt(e.buf, int64(v))
	case Number:
		e.buf, err = appendNumber(e.buf, v)
	case string:
		e.buf, err = AppendString(e.buf, v)
	case []any:
		e.buf = append(e.buf, '[')
		for i, item := range v {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if err := e.value(item); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, ']')
	case []string:
		e.buf = append(e.buf, '[')
		for i, item := range v {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if e.buf, err = AppendString(e.buf, item); err != nil {
				return err
			}
			e.flush()
		}
		e.buf = append(e.buf, ']')
	case Object:
		e.buf = append(e.buf, '{')
		for i, m := range v {
			if i > 0 {
				if CompareUTF16(v[i-1].Name, m.Name) >= 0 {
					return fmt.Errorf("canonical: object members out of order or repeated at %q", m.Name)
				}
				e.buf = append(e.buf, ',')
			}
			if e.buf, err = AppendString(e.buf, m.Name); err != nil {
				return err
			}
			e.buf = append(e.buf, ':')
			if err := e.value(m.Value); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, '}')
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		slices.SortFunc(names, CompareUTF16)
		e.buf = append(e.buf, '{')
		for i, name := range names {
			if i > 0 {
				e.buf = append(e.buf, ',')
			}
			if e.buf, err = AppendString(e.buf, name); err != nil {
				return err
			}
			e.buf = append(e.buf, ':')
			if err := e.value(v[name]); err != nil {
				return err
			}
		}
		e.buf = append(e.buf, '}')
	default:
		return fmt.Errorf("canonical: cannot encode %T (only null, booleans, integers, numbers, strings, arrays and objects)", v)
	}
	if err != nil {
		return err
	}
	e.flush()
	return nil
}

func appendInt(dst []byte, n int64) ([]byte, error) {
	if n > MaxInt || n < -MaxInt {
		return nil, fmt.Errorf("canonical: integer %d is outside ±%d", n, int64(MaxInt))
	}
	return strconv.AppendInt(dst, n, 10), nil
}

// appendNumber writes a Number in its ECMAScript form, under the same rule
// the parser applies: finite, and integral only within ±MaxInt.
func appendNumber(dst []byte, n Number) ([]byte, error) {
	if _, err := NumberValue(float64(n)); err != nil {
		return nil, err
	}
	return AppendECMAScript(dst, float64(n)), nil
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string with RFC 8785's minimal escaping:
// '"' and '\\', the five short control escapes, other code points below
// U+0020 as \u00xx in lowercase hex, and everything else as raw UTF-8.
func AppendString(dst []byte, s string) ([]byte, error) {
	dst = append(dst, '"')
	start := 0
	var high uint64 // OR of the bytes scanned a word at a time
	// Every byte that needs an escape is ASCII, so the bytes of a multi-byte
	// character are copied as they are.
	for i := 0; i < len(s); {
		if i+8 <= len(s) {
			x := loadString(s, i)
			m := specialBytes(x)
			if m == 0 {
				high |= x
				i += 8
				continue
			}
			n := firstSpecial(m)
			high |= x & (1<<(8*n) - 1)
			i += n
		} else if c := s[i]; !stringSpecial[c] {
			high |= uint64(c)
			i++
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c := s[i]; c {
		case '"', '\\':
			dst = append(dst, '\\', c)
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\r':
			dst = append(dst, '\\', 'r')
		case '\t':
			dst = append(dst, '\\', 't')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xF])
		}
		i++
		start = i
	}
	if high&highBits != 0 && !utf8.ValidString(s) {
		return nil, fmt.Errorf("canonical: string is not valid UTF-8")
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), nil
}
