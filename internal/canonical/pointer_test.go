package canonical

import (
	"reflect"
	"slices"
	"testing"
)

func TestPointer(t *testing.T) {
	tests := []struct {
		tokens []string
		want   string
	}{
		{nil, ""},
		{[]string{"args"}, "/args"},
		{[]string{"args", "a/b", "m~n", ""}, "/args/a~1b/m~0n/"},
		{[]string{"~1"}, "/~01"},
		{[]string{"é", "0"}, "/é/0"},
	}
	for _, tt := range tests {
		got := Pointer(tt.tokens...)
		if got != tt.want {
			t.Errorf("Pointer(%q) = %q, want %q", tt.tokens, got, tt.want)
		}
		back, err := SplitPointer(got)
		if err != nil || !slices.Equal(back, tt.tokens) {
			t.Errorf("SplitPointer(%q) = %q, %v, want %q", got, back, err, tt.tokens)
		}
	}
	if got, want := Join("/args", "items", "0"), "/args/items/0"; got != want {
		t.Errorf("Join = %q, want %q", got, want)
	}
	if got, want := Join("", "a/b"), "/a~1b"; got != want {
		t.Errorf("Join = %q, want %q", got, want)
	}
}

func TestSplitPointerRefuses(t *testing.T) {
	for _, ptr := range []string{"args", "/a~", "/a~2", "/~~01", "/~~1", "/ok/~x"} {
		if got, err := SplitPointer(ptr); err == nil {
			t.Errorf("SplitPointer(%q) = %q, want an error", ptr, got)
		}
	}
}

func TestLookup(t *testing.T) {
	v, err := Parse([]byte(`{"a":{"b/c":[10,{"d~":true}]},"e":null,"":1}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		ptr  string
		want any
		ok   bool
	}{
		{"", v, true},
		{"/e", nil, true},
		{"/", int64(1), true},
		{"/a/b~1c/0", int64(10), true},
		{"/a/b~1c/1/d~0", true, true},
		{"/a/b~1c/2", nil, false},
		{"/a/b~1c/01", nil, false},
		{"/a/b~1c/-1", nil, false},
		{"/a/b~1c/+1", nil, false},
		{"/a/b~1c/-", nil, false},
		{"/a/x", nil, false},
		{"/e/x", nil, false},
		{"/a/b~1c/0/x", nil, false},
		{"a", nil, false},
		{"/a~", nil, false},
	}
	for _, tt := range tests {
		got, ok := Lookup(v, tt.ptr)
		if ok != tt.ok || !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Lookup(%q) = %#v, %v, want %#v, %v", tt.ptr, got, ok, tt.want, tt.ok)
		}
	}
}

func TestWithout(t *testing.T) {
	parse := func(s string) Object {
		t.Helper()
		v, err := Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return v.(Object)
	}
	const in = `{"memo":"x","amount":5,"meta":{"note":"n","id":1},"list":[{"note":"keep"}]}`
	tests := []struct {
		ptr  string
		want string
	}{
		{"/memo", `{"amount":5,"list":[{"note":"keep"}],"meta":{"id":1,"note":"n"}}`},
		{"/meta/note", `{"amount":5,"list":[{"note":"keep"}],"memo":"x","meta":{"id":1}}`},
		{"/meta", `{"amount":5,"list":[{"note":"keep"}],"memo":"x"}`},
		{"/list/0/note", `{"amount":5,"list":[{"note":"keep"}],"memo":"x","meta":{"id":1,"note":"n"}}`},
		{"/absent", `{"amount":5,"list":[{"note":"keep"}],"memo":"x","meta":{"id":1,"note":"n"}}`},
		{"/amount/x", `{"amount":5,"list":[{"note":"keep"}],"memo":"x","meta":{"id":1,"note":"n"}}`},
		{"", `{"amount":5,"list":[{"note":"keep"}],"memo":"x","meta":{"id":1,"note":"n"}}`},
		{"bad", `{"amount":5,"list":[{"note":"keep"}],"memo":"x","meta":{"id":1,"note":"n"}}`},
	}
	for _, tt := range tests {
		o := parse(in)
		before, _ := Encode(o)
		got, err := Encode(Without(o, tt.ptr))
		if err != nil || string(got) != tt.want {
			t.Errorf("Without(%q) = %s, %v, want %s", tt.ptr, got, err, tt.want)
		}
		if after, _ := Encode(o); string(after) != string(before) {
			t.Errorf("Without(%q) changed its input to %s", tt.ptr, after)
		}
	}
}

func TestIsDigest(t *testing.T) {
	tests := []struct {
		s    string
		want bool
	}{
		{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", true},
		{"0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef", false},
		{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde", false},
		{"0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef0", false},
		{"g123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsDigest(tt.s); got != tt.want {
			t.Errorf("IsDigest(%q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestIsBlank(t *testing.T) {
	tests := []struct {
		s    string
		want bool
	}{
		{"", true}, {" ", true}, {"\t\n\r ", true}, {"\u00a0\u3000\u2029", true},
		{"x", false}, {" x ", false}, {"\u200b", false}, {"_", false},
	}
	for _, tt := range tests {
		if got := IsBlank(tt.s); got != tt.want {
			t.Errorf("IsBlank(%+q) = %v, want %v", tt.s, got, tt.want)
		}
	}
}

func TestTypeName(t *testing.T) {
	tests := []struct {
		v    any
		want string
	}{
		{nil, "null"}, {true, "a boolean"}, {int64(1), "an integer"}, {1, "an integer"},
		{"s", "a string"}, {[]any{}, "an array"}, {Object{}, "an object"}, {1.5, "float64"},
	}
	for _, tt := range tests {
		if got := TypeName(tt.v); got != tt.want {
			t.Errorf("TypeName(%#v) = %q, want %q", tt.v, got, tt.want)
		}
	}
}
