package console

import (
	"encoding/json"
	"fmt"

	"github.com/gorilla/securecookie"
)

// cookieValues is how the console cookie's values are written inside its
// signed and encrypted envelope: a JSON object of strings (the only values
// the console stores: the session id, or a login under way). securecookie
// writes gob by default, whose decoder it makes anew for every cookie it
// reads, so every request spent more on compiling the gob type than on
// the cookie's HMAC and decryption. Cookies written as gob by an earlier
// version are still read (gob's first byte, a message length, is never
// '{'), so nobody is logged out by the change.
type cookieJSON struct{}

var _ securecookie.Serializer = cookieJSON{}

func (cookieJSON) Serialize(src any) ([]byte, error) {
	values, ok := src.(map[any]any)
	if !ok {
		return nil, fmt.Errorf("console cookie: cannot write %T", src)
	}
	out := make(map[string]string, len(values))
	for k, v := range values {
		ks, kok := k.(string)
		vs, vok := v.(string)
		if !kok || !vok {
			return nil, fmt.Errorf("console cookie: only strings are stored, not %T: %T", k, v)
		}
		out[ks] = vs
	}
	return json.Marshal(out)
}

func (cookieJSON) Deserialize(src []byte, dst any) error {
	if len(src) == 0 || src[0] != '{' {
		return securecookie.GobEncoder{}.Deserialize(src, dst)
	}
	values, ok := dst.(*map[any]any)
	if !ok {
		return fmt.Errorf("console cookie: cannot read into %T", dst)
	}
	if pairs, n, ok := flatObject(src); ok {
		if *values == nil {
			*values = make(map[any]any, n)
		}
		for _, kv := range pairs[:n] {
			(*values)[cookieKey(kv[0])] = string(kv[1])
		}
		return nil
	}
	var in map[string]string
	if err := json.Unmarshal(src, &in); err != nil {
		return fmt.Errorf("console cookie: %w", err)
	}
	if *values == nil {
		*values = make(map[any]any, len(in))
	}
	for k, v := range in {
		(*values)[k] = v
	}
	return nil
}

// maxFlatPairs is how many members flatObject reads; the console's cookie
// holds one or two.
const maxFlatPairs = 4

// flatObject reads src as what Serialize writes for the console's values
// (ids, a time): a JSON object of at most maxFlatPairs strings of
// printable ASCII without escapes, as slices of src. ok is false for
// anything else, which encoding/json reads instead: the cookie is read on
// every request, and encoding/json spends a dozen allocations on its
// reflection where this spends one per value.
func flatObject(src []byte) (pairs [maxFlatPairs][2][]byte, n int, ok bool) {
	if len(src) < 2 || src[0] != '{' || src[len(src)-1] != '}' {
		return pairs, 0, false
	}
	rest := src[1 : len(src)-1]
	if len(rest) == 0 {
		return pairs, 0, true
	}
	for n < maxFlatPairs {
		k, r, kok := flatString(rest)
		if !kok || len(r) == 0 || r[0] != ':' {
			return pairs, 0, false
		}
		v, r, vok := flatString(r[1:])
		if !vok {
			return pairs, 0, false
		}
		pairs[n] = [2][]byte{k, v}
		n++
		if len(r) == 0 {
			return pairs, n, true
		}
		if r[0] != ',' {
			return pairs, 0, false
		}
		rest = r[1:]
	}
	return pairs, 0, false
}

// flatString reads a JSON string of printable ASCII without escapes at
// the start of b: its contents and what follows it.
func flatString(b []byte) (s, rest []byte, ok bool) {
	if len(b) == 0 || b[0] != '"' {
		return nil, nil, false
	}
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return b[1:i], b[i+1:], true
		case c == '\\' || c < 0x20 || c >= 0x7f:
			return nil, nil, false
		}
	}
	return nil, nil, false
}

// cookieKey is k as a map key, the console's own keys without allocating.
func cookieKey(k []byte) any {
	switch string(k) {
	case cookieSID:
		return cookieSID
	case cookieAuthAt:
		return cookieAuthAt
	case cookiePre:
		return cookiePre
	}
	return string(k)
}
