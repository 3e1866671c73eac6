// Package account is Countersign's console accounts, their sessions and the
// agents' API tokens: the domain types, the Store a storage engine
// implements for them, and the Service that applies their rules (audited
// changes, hashed token secrets). It also holds argon2id password hashing in
// PHC string form, the roles, name and password rules, the throttle that
// slows down password guessing, and reading a new password from a terminal
// or standard input.
package account

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"golang.org/x/crypto/argon2"
)

// Params are argon2id's cost parameters.
type Params struct {
	Memory  uint32 // KiB
	Time    uint32 // passes
	Threads uint8
	SaltLen int
	KeyLen  int
}

// MinParams is the floor that OWASP's password storage guidance sets for
// argon2id: 19 MiB, two passes, one lane.
var MinParams = Params{Memory: 19 * 1024, Time: 2, Threads: 1, SaltLen: 16, KeyLen: 32}

// DefaultParams is what new passwords are hashed with.
var DefaultParams = MinParams

// AtLeast reports whether p costs at least as much as min in every
// dimension.
func (p Params) AtLeast(min Params) bool {
	return p.Memory >= min.Memory && p.Time >= min.Time && p.Threads >= min.Threads &&
		p.SaltLen >= min.SaltLen && p.KeyLen >= min.KeyLen
}

// Errors of hashing and checking passwords.
var (
	ErrMismatch      = errors.New("account: wrong password")
	ErrMalformedHash = errors.New("account: malformed password hash")
	ErrWeakPassword  = errors.New("account: password too short")
	ErrLongPassword  = errors.New("account: password too long")
)

// Password length bounds, in characters and bytes.
const (
	MinPasswordChars = 10
	MaxPasswordBytes = 1024
)

// CheckPassword applies the password rules to a new password.
func CheckPassword(pw string) error {
	if len(pw) > MaxPasswordBytes {
		return refuse("password", ErrLongPassword, "a password is at most %d bytes", MaxPasswordBytes)
	}
	if utf8.RuneCountInString(pw) < MinPasswordChars {
		return refuse("password", ErrWeakPassword, "a password is at least %d characters", MinPasswordChars)
	}
	return nil
}

// Hash returns the argon2id PHC string of pw with DefaultParams, e.g.
// $argon2id$v=19$m=19456,t=2,p=1$<salt>$<key>.
func Hash(pw string) (string, error) {
	return HashWith(pw, DefaultParams)
}

// HashWith hashes pw with p, which must be at least MinParams.
func HashWith(pw string, p Params) (string, error) {
	if !p.AtLeast(MinParams) {
		return "", fmt.Errorf("account: argon2id parameters below the minimum (m=%d,t=%d,p=%d)", MinParams.Memory, MinParams.Time, MinParams.Threads)
	}
	return hash(pw, p)
}

func hash(pw string, p Params) (string, error) {
	if len(pw) > MaxPasswordBytes {
		return "", ErrLongPassword
	}
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", err
	}
	key := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, uint32(p.KeyLen))
	enc := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s", argon2.Version, p.Memory, p.Time, p.Threads,
		enc.EncodeToString(salt), enc.EncodeToString(key)), nil
}

// Limits on what a stored hash may ask of the verifier, so a tampered row
// cannot make one login eat the machine.
const (
	maxMemory  = 1 << 20 // 1 GiB in KiB
	maxTime    = 64
	maxThreads = 16
)

// ParseHash reads a PHC string written by Hash.
func ParseHash(phc string) (p Params, salt, key []byte, err error) {
	parts := strings.Split(phc, "$")
	// "", "argon2id", "v=19", "m=..,t=..,p=..", salt, key
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return p, nil, nil, ErrMalformedHash
	}
	if parts[2] != "v="+strconv.Itoa(argon2.Version) {
		return p, nil, nil, fmt.Errorf("%w: unsupported version %q", ErrMalformedHash, parts[2])
	}
	seen := map[string]bool{}
	for _, kv := range strings.Split(parts[3], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || seen[k] {
			return p, nil, nil, ErrMalformedHash
		}
		seen[k] = true
		n, perr := strconv.ParseUint(v, 10, 32)
		if perr != nil {
			return p, nil, nil, ErrMalformedHash
		}
		switch k {
		case "m":
			p.Memory = uint32(n)
		case "t":
			p.Time = uint32(n)
		case "p":
			if n > 255 {
				return p, nil, nil, ErrMalformedHash
			}
			p.Threads = uint8(n)
		default:
			return p, nil, nil, ErrMalformedHash
		}
	}
	if len(seen) != 3 || p.Time < 1 || p.Threads < 1 || p.Memory < 8*uint32(p.Threads) ||
		p.Memory > maxMemory || p.Time > maxTime || p.Threads > maxThreads {
		return p, nil, nil, ErrMalformedHash
	}
	enc := base64.RawStdEncoding
	if salt, err = enc.DecodeString(parts[4]); err != nil || len(salt) < 8 {
		return p, nil, nil, ErrMalformedHash
	}
	if key, err = enc.DecodeString(parts[5]); err != nil || len(key) < 16 || len(key) > 64 {
		return p, nil, nil, ErrMalformedHash
	}
	p.SaltLen, p.KeyLen = len(salt), len(key)
	return p, salt, key, nil
}

// Verify checks pw against a PHC string in constant time. It returns nil,
// ErrMismatch, or ErrMalformedHash.
func Verify(phc, pw string) error {
	p, salt, key, err := ParseHash(phc)
	if err != nil {
		return err
	}
	if len(pw) > MaxPasswordBytes {
		return ErrMismatch
	}
	got := argon2.IDKey([]byte(pw), salt, p.Time, p.Memory, p.Threads, uint32(len(key)))
	if subtle.ConstantTimeCompare(got, key) != 1 {
		return ErrMismatch
	}
	return nil
}
