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
