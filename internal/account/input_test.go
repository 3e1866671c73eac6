package account

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
)

// TestInputErrors: every refusal of a value a person gave is an
// *InputError naming the field, with a message for that person (no
// package prefix, nothing nested) and the rule it broke for errors.Is.
func TestInputErrors(t *testing.T) {
	svc := NewService(nil, nil) // refused before the store is reached
	token := func(spec TokenSpec) error {
		_, _, err := svc.CreateTokenWith(context.Background(), spec, "adam", "web")
		return err
	}
	tests := []struct {
		name  string
		err   error
		field string
		rules []error
		says  string
	}{
		{"bad name", CheckName("bad name"), "name", []error{ErrBadName}, "1 to 64 characters"},
		{"reserved prefix", CheckName("policy:x"), "name", []error{ErrReservedName}, "names starting with policy:"},
		{"reserved name", CheckName("console"), "name", []error{ErrReservedName}, "console is reserved"},
		{"role", func() error { _, err := ParseRole("root"); return err }(), "role", []error{ErrUnknownRole}, `"root"`},
		{"short password", CheckPassword("short"), "password", []error{ErrWeakPassword}, "at least 10 characters"},
		{"long password", CheckPassword(strings.Repeat("x", MaxPasswordBytes+1)), "password", []error{ErrLongPassword}, "at most 1024 bytes"},
		{"owner", CheckOwner("team:"), "owner", []error{ErrBadOwner}, "team:GROUP"},
		{"owner name", CheckOwner("bad name"), "owner", []error{ErrBadOwner, ErrBadName}, `owner "bad name": a name is`},
		{"too many owners", token(TokenSpec{Actor: "agent:a", Audience: "h", Owners: manyOwners(MaxOwners + 1)}),
			"owner", []error{ErrBadOwner}, "at most 20 owners"},
		{"too many owners with the holder", token(TokenSpec{Actor: "agent:a", Audience: "h", Owners: manyOwners(MaxOwners), Holder: "adam"}),
			"owner", []error{ErrBadOwner}, "name at most 19 others"},
		{"no actor", token(TokenSpec{Audience: "h"}), "actor", []error{ErrTokenContext}, "needs an actor and an audience"},
		{"no audience", token(TokenSpec{Actor: "agent:a"}), "audience", []error{ErrTokenContext}, "needs an actor and an audience"},
		{"actor", token(TokenSpec{Actor: "agent:ma\u202eiler", Audience: "h"}), "actor", []error{ErrTokenName, ErrBadName}, "like account names"},
		{"reserved actor", token(TokenSpec{Actor: "system:x", Audience: "h"}), "actor", []error{ErrTokenName, ErrReservedName}, "reserved"},
		{"audience", token(TokenSpec{Actor: "agent:a", Audience: "a b"}), "audience", []error{ErrTokenName, ErrBadName}, "audience"},
		{"provider's name", func() error { _, err := shortName("console"); return err }(), "preferred_username", []error{ErrReservedName},
			`the identity provider calls you "console": the name console is reserved`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var in *InputError
			if !errors.As(tt.err, &in) {
				t.Fatalf("err = %v (%T), want an *InputError", tt.err, tt.err)
			}
			if in.Field != tt.field {
				t.Errorf("Field = %q, want %q", in.Field, tt.field)
			}
			for _, r := range tt.rules {
				if !errors.Is(tt.err, r) {
					t.Errorf("errors.Is(%v, %v) = false", tt.err, r)
				}
			}
			if !strings.Contains(in.Message, tt.says) || strings.Contains(in.Message, "account:") {
				t.Errorf("Message = %q, want it to say %q and carry no package prefix", in.Message, tt.says)
			}
			if got := tt.err.Error(); got != "account: "+in.Message {
				t.Errorf("Error() = %q, want the message after the package prefix", got)
			}
		})
	}
}

// TestShadowErrorMessage: a shadowing refusal's message is for the person
// refused and carries no package prefix.
func TestShadowErrorMessage(t *testing.T) {
	for _, e := range []*ShadowError{{Name: "olivia", Holder: "olivia", Local: true}, {Name: "erin", Holder: "oidc:idp/1"}} {
		if m := e.Message(); strings.Contains(m, "account:") || !strings.Contains(m, e.Name) || e.Error() != "account: "+m {
			t.Errorf("Message() = %q, Error() = %q", m, e.Error())
		}
	}
}

func manyOwners(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = "owner" + strconv.Itoa(i)
	}
	return out
}
