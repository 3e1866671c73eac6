package canonical

import (
	"fmt"
	"sort"
	"unicode/utf8"
)

// Member is one name and value of an Object.
type Member struct {
	Name  string
	Value any
}

// Object is a JSON object whose members are sorted by the UTF-16 code units
// of their names (the RFC 8785 order) and whose names are unique. The parser
// builds Objects in that order; NewObject sorts and checks any other.
type Object []Member

// NewObject returns the members as an Object in canonical order. Two members
// with the same name are an error.
func NewObject(members ...Member) (Object, error) {
	o := Object(members)
	sort.SliceStable(o, func(i, j int) bool { return CompareUTF16(o[i].Name, o[j].Name) < 0 })
	for i := 1; i < len(o); i++ {
		if o[i-1].Name == o[i].Name {
			return nil, fmt.Errorf("canonical: duplicate member %q", o[i].Name)
		}
	}
	return o, nil
}

// Get returns the value of the member with that name.
func (o Object) Get(name string) (any, bool) {
	i := sort.Search(len(o), func(i int) bool { return CompareUTF16(o[i].Name, name) >= 0 })
	if i < len(o) && o[i].Name == name {
		return o[i].Value, true
	}
	return nil, false
}

// MarshalJSON writes the object's canonical bytes, so a parsed value can be
// embedded in an encoding/json response unchanged.
func (o Object) MarshalJSON() ([]byte, error) { return Encode(o) }

// CompareUTF16 orders two strings by their UTF-16 code units, as RFC 8785
// requires for member names. It differs from byte order only when a code
// point above U+FFFF meets one in U+E000..U+FFFF.
func CompareUTF16(a, b string) int {
	n := min(len(a), len(b))
	i := 0
	for i < n && a[i] == b[i] {
		i++
	}
	if i == len(a) || i == len(b) {
		return len(a) - len(b)
	}
	if a[i] < utf8.RuneSelf && b[i] < utf8.RuneSelf {
		return int(a[i]) - int(b[i])
	}
	// Back up to the start of the rune that differs.
	for i > 0 && !utf8.RuneStart(a[i]) {
		i--
	}
	ra, _ := utf8.DecodeRuneInString(a[i:])
	rb, _ := utf8.DecodeRuneInString(b[i:])
	ha, la := units(ra)
	hb, lb := units(rb)
	if ha != hb {
		return int(ha) - int(hb)
	}
	return int(la) - int(lb)
}

// units returns the UTF-16 code units of r: one unit and 0 for the Basic
// Multilingual Plane, a surrogate pair above it.
func units(r rune) (rune, rune) {
	if r >= 0x10000 {
		r -= 0x10000
		return 0xD800 + r>>10, 0xDC00 + r&0x3FF
	}
	return r, 0
}
