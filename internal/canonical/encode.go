package canonical

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Encode returns the RFC 8785 canonical bytes of v. v may hold nil, bool,
// int, int64, string, []any, []string, Object and map[string]any values;
// anything else (floats in particular) is an error.
func Encode(v any) ([]byte, error) {
	return Append(nil, v)
}

// Append appends the canonical bytes of v to dst.
func Append(dst []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(dst, "null"...), nil
	case bool:
		if v {
			return append(dst, "true"...), nil
		}
		return append(dst, "false"...), nil
	case int64:
		return appendInt(dst, v)
	case int:
		return appendInt(dst, int64(v))
	case string:
		return AppendString(dst, v)
	case []any:
		dst = append(dst, '[')
		for i, item := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = Append(dst, item); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case []string:
		dst = append(dst, '[')
		for i, item := range v {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = AppendString(dst, item); err != nil {
				return nil, err
			}
		}
		return append(dst, ']'), nil
	case Object:
		dst = append(dst, '{')
		for i, m := range v {
			if i > 0 {
				if CompareUTF16(v[i-1].Name, m.Name) >= 0 {
					return nil, fmt.Errorf("canonical: object members out of order or repeated at %q", m.Name)
				}
				dst = append(dst, ',')
			}
			var err error
			if dst, err = AppendString(dst, m.Name); err != nil {
				return nil, err
			}
			dst = append(dst, ':')
			if dst, err = Append(dst, m.Value); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	case map[string]any:
		names := make([]string, 0, len(v))
		for name := range v {
			names = append(names, name)
		}
		slices.SortFunc(names, CompareUTF16)
		dst = append(dst, '{')
		for i, name := range names {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = AppendString(dst, name); err != nil {
				return nil, err
			}
			dst = append(dst, ':')
			if dst, err = Append(dst, v[name]); err != nil {
				return nil, err
			}
		}
		return append(dst, '}'), nil
	default:
		return nil, fmt.Errorf("canonical: cannot encode %T (only null, booleans, integers, strings, arrays and objects)", v)
	}
}

func appendInt(dst []byte, n int64) ([]byte, error) {
	if n > MaxInt || n < -MaxInt {
		return nil, fmt.Errorf("canonical: integer %d is outside ±%d", n, int64(MaxInt))
	}
	return strconv.AppendInt(dst, n, 10), nil
}

const hexDigits = "0123456789abcdef"

// AppendString appends s as a JSON string with RFC 8785's minimal escaping:
// '"' and '\\', the five short control escapes, other code points below
// U+0020 as \u00xx in lowercase hex, and everything else as raw UTF-8.
func AppendString(dst []byte, s string) ([]byte, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("canonical: string is not valid UTF-8")
	}
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		// Every byte that needs an escape is ASCII, so the bytes of a
		// multi-byte character are copied as they are.
		c := s[i]
		if !stringSpecial[c] {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
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
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"'), nil
}
