package canonical

import (
	"fmt"
	"strconv"
	"strings"
)

// Pointer builds a JSON Pointer (RFC 6901) from reference tokens.
func Pointer(tokens ...string) string {
	var b []byte
	for _, t := range tokens {
		b = append(b, '/')
		b = appendPointerToken(b, t)
	}
	return string(b)
}

// Join appends tokens to an existing pointer.
func Join(ptr string, tokens ...string) string {
	return ptr + Pointer(tokens...)
}

func appendPointerToken(b []byte, t string) []byte {
	for i := 0; i < len(t); i++ {
		switch t[i] {
		case '~':
			b = append(b, '~', '0')
		case '/':
			b = append(b, '~', '1')
		default:
			b = append(b, t[i])
		}
	}
	return b
}

// SplitPointer returns the unescaped reference tokens of a JSON Pointer.
func SplitPointer(ptr string) ([]string, error) {
	if ptr == "" {
		return nil, nil
	}
	if ptr[0] != '/' {
		return nil, fmt.Errorf("canonical: JSON Pointer %q must start with '/'", ptr)
	}
	parts := strings.Split(ptr[1:], "/")
	for i, p := range parts {
		if !validEscapes(p) {
			return nil, fmt.Errorf("canonical: JSON Pointer %q has a bad escape", ptr)
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
	}
	return parts, nil
}

// validEscapes reports whether every '~' in a reference token starts "~0" or
// "~1".
func validEscapes(token string) bool {
	for i := 0; i < len(token); i++ {
		if token[i] == '~' {
			if i+1 == len(token) || (token[i+1] != '0' && token[i+1] != '1') {
				return false
			}
			i++
		}
	}
	return true
}

// Lookup returns the value at ptr inside v.
func Lookup(v any, ptr string) (any, bool) {
	tokens, err := SplitPointer(ptr)
	if err != nil {
		return nil, false
	}
	for _, t := range tokens {
		switch c := v.(type) {
		case Object:
			var ok bool
			if v, ok = c.Get(t); !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(t)
			if err != nil || i < 0 || i >= len(c) || strconv.Itoa(i) != t {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

// Without returns a copy of o with the object member at ptr removed; o itself
// is not modified. Only members reached through objects alone can be
// removed: a pointer that names nothing, or that passes through or names an
// array item, leaves the value as it was.
func Without(o Object, ptr string) Object {
	tokens, err := SplitPointer(ptr)
	if err != nil || len(tokens) == 0 {
		return o
	}
	return without(o, tokens)
}

func without(o Object, tokens []string) Object {
	out := make(Object, 0, len(o))
	for _, m := range o {
		if m.Name != tokens[0] {
			out = append(out, m)
			continue
		}
		if len(tokens) == 1 {
			continue // removed
		}
		if inner, ok := m.Value.(Object); ok {
			m.Value = without(inner, tokens[1:])
		}
		out = append(out, m)
	}
	return out
}
