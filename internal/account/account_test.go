package account

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestHashVerify(t *testing.T) {
	h, err := Hash("correct horse battery")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(h, "$argon2id$v=19$m=19456,t=2,p=1$") {
		t.Errorf("hash = %q, want the argon2id PHC form at m=19456,t=2,p=1", h)
	}
	p, salt, key, err := ParseHash(h)
	if err != nil {
		t.Fatal(err)
	}
	if !p.AtLeast(MinParams) || len(salt) != 16 || len(key) != 32 {
		t.Errorf("params %+v salt %d key %d, want at least %+v, 16, 32", p, len(salt), len(key), MinParams)
	}
	if err := Verify(h, "correct horse battery"); err != nil {
		t.Errorf("Verify(right) = %v, want nil", err)
	}
	for _, wrong := range []string{"", "correct horse batter", "correct horse battery ", "Correct horse battery"} {
		if err := Verify(h, wrong); !errors.Is(err, ErrMismatch) {
			t.Errorf("Verify(%q) = %v, want ErrMismatch", wrong, err)
		}
	}
	h2, _ := Hash("correct horse battery")
	if h2 == h {
		t.Error("two hashes of one password are equal; the salt is not random")
	}
}

func TestDefaultParamsMeetOWASP(t *testing.T) {
	owasp := Params{Memory: 19456, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}
	if !DefaultParams.AtLeast(owasp) || !MinParams.AtLeast(owasp) {
		t.Errorf("DefaultParams %+v, MinParams %+v: want at least %+v", DefaultParams, MinParams, owasp)
	}
	if _, err := HashWith("correct horse battery", Params{Memory: 1024, Time: 1, Threads: 1, SaltLen: 16, KeyLen: 32}); err == nil {
		t.Error("HashWith(weak params) = nil error, want refusal")
	}
}

func TestParseHashRejects(t *testing.T) {
	good, _ := Hash("correct horse battery")
	parts := strings.Split(good, "$")
	salt, key := parts[4], parts[5]
	for _, bad := range []string{
		"",
		"plain",
		"$argon2i$v=19$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=16$m=19456,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=0,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=4194304,t=2,p=1$" + salt + "$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$!!$" + key,
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$",
		"$argon2id$v=19$m=19456,t=2,p=1$" + salt + "$" + key + "$",
	} {
		if _, _, _, err := ParseHash(bad); !errors.Is(err, ErrMalformedHash) {
			t.Errorf("ParseHash(%q) = %v, want ErrMalformedHash", bad, err)
		}
		if err := Verify(bad, "correct horse battery"); err == nil {
			t.Errorf("Verify(%q) = nil, want an error", bad)
		}
	}
}

func TestCheckPassword(t *testing.T) {
	tests := []struct {
		pw   string
		want error
	}{
		{"short", ErrWeakPassword},
		{"ninechars", ErrWeakPassword},
		{"tenchars!!", nil},
		{"ääääääääää", nil},
		{strings.Repeat("x", MaxPasswordBytes+1), ErrLongPassword},
	}
	for _, tt := range tests {
		if err := CheckPassword(tt.pw); !errors.Is(err, tt.want) {
			t.Errorf("CheckPassword(%.12q) = %v, want %v", tt.pw, err, tt.want)
		}
	}
}

func TestCheckName(t *testing.T) {
	for _, ok := range []string{"alice", "agent:billing-bot", "a.b_c-d@e", "X1"} {
		if err := CheckName(ok); err != nil {
			t.Errorf("CheckName(%q) = %v, want nil", ok, err)
		}
	}
	for _, bad := range []string{"", ":x", "al ice", "alice\n", "ａlice", "аlice", strings.Repeat("a", 65), "a/b", "<b>"} {
		if err := CheckName(bad); err == nil {
			t.Errorf("CheckName(%q) = nil, want an error", bad)
		}
	}
}

func TestParseRole(t *testing.T) {
	for _, r := range []Role{RoleOperator, RoleAuditor, RoleAdmin} {
		got, err := ParseRole(string(r))
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %q, %v", r, got, err)
		}
	}
	if _, err := ParseRole("root"); err == nil {
		t.Error("ParseRole(root) = nil error")
	}
	if RoleAuditor.CanDecide() || !RoleOperator.CanDecide() || !RoleAdmin.CanDecide() {
		t.Error("CanDecide: auditors must not decide; operators and admins must")
	}
	if RoleOperator.CanAdminister() || RoleAuditor.CanAdminister() || !RoleAdmin.CanAdminister() {
		t.Error("CanAdminister: only admins")
	}
}

func TestLimitPolicyBackoff(t *testing.T) {
	p := LimitPolicy{Free: 3, Base: time.Second, Max: 8 * time.Second, Forget: time.Hour}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	var s Strikes
	wants := []time.Duration{0, 0, 0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, want := range wants {
		s = p.fail(s, now)
		if got := p.Wait(s, now); got != want {
			t.Errorf("after %d failures Wait = %v, want %v", i+1, got, want)
		}
		if s.Forget != now.Add(p.Forget) {
			t.Errorf("after %d failures Forget = %v, want %v", i+1, s.Forget, now.Add(p.Forget))
		}
		now = now.Add(want) // the next attempt comes as soon as allowed
		if got := p.Wait(s, now); got != 0 {
			t.Errorf("after waiting %v Wait = %v, want 0", want, got)
		}
	}
	if got := p.Wait(Strikes{}, now); got != 0 {
		t.Errorf("no strikes Wait = %v, want 0", got)
	}
	s = p.fail(s, now)
	if got := p.Wait(s, now.Add(p.Forget)); got != 0 {
		t.Errorf("after Forget Wait = %v, want 0", got)
	}
	// A failure after Forget starts counting again from one.
	if s = p.fail(s, now.Add(p.Forget)); s.Failures != 1 {
		t.Errorf("failure after Forget: %d failures, want 1", s.Failures)
	}
}

func TestThrottleKey(t *testing.T) {
	k := ThrottleKey("account", "alice")
	if len(k) != 64 || strings.Contains(k, "alice") {
		t.Errorf("ThrottleKey = %q, want a hex SHA-256 that does not hold the name", k)
	}
	if k == ThrottleKey("device", "alice") || k == ThrottleKey("account", "alicf") {
		t.Error("ThrottleKey collides across kinds or values")
	}
}

func TestAddressKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7":            "192.0.2.7",
		"2001:db8:1:2:3:4:5:6": "2001:db8:1:2::/64",
		"2001:db8:1:2:ffff::1": "2001:db8:1:2::/64",
		"not an address":       "not an address",
		"::ffff:192.0.2.7":     "::ffff:192.0.2.7",
	} {
		if got := AddressKey(in); got != want {
			t.Errorf("AddressKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestReadPasswordLine(t *testing.T) {
	tests := []struct {
		in, want string
		ok       bool
	}{
		{"secret\n", "secret", true},
		{"secret\r\nmore\n", "secret", true},
		{"no newline", "no newline", true},
		{" spaced \n", " spaced ", true},
		{"", "", false},
		{strings.Repeat("x", MaxPasswordBytes+5) + "\n", "", false},
	}
	for _, tt := range tests {
		got, err := ReadPasswordLine(strings.NewReader(tt.in))
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ReadPasswordLine(%.20q) = %q, %v; want %q, ok %v", tt.in, got, err, tt.want, tt.ok)
		}
	}
}
