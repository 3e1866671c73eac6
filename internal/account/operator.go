package account

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/audit"
)

// OperatorToken is a person's own token for the operator API: it acts as
// that person (their role and standing read at every request), with its
// scope, until it expires or is revoked. Its secret is shown once and
// stored only hashed.
type OperatorToken struct {
	ID     string
	Person string // the account it belongs to and acts as
	Scope  string // ScopeRead or ScopeDecide
	Note   string
	// CreatedAt and ExpiresAt bound its life; RevokedAt is zero while it
	// has not been revoked.
	CreatedAt, ExpiresAt, RevokedAt time.Time
}

// Live reports whether t may be used at now: not revoked, not expired.
func (t OperatorToken) Live(now time.Time) bool {
	return t.RevokedAt.IsZero() && now.Before(t.ExpiresAt)
}

// State is how t stands at now: live, expired or revoked.
func (t OperatorToken) State(now time.Time) string {
	switch {
	case !t.RevokedAt.IsZero():
		return "revoked"
	case !now.Before(t.ExpiresAt):
		return "expired"
	}
	return "live"
}

// Scopes of an operator token.
const (
	// ScopeRead lists the queue and shows calls, allowances and MCP
	// definitions.
	ScopeRead = "read"
	// ScopeDecide also approves and denies calls, revokes allowances and
	// reviews MCP definitions, as far as the person's role allows.
	ScopeDecide = "decide"
)

// OperatorTokenPrefix starts every operator token's secret (agent tokens
// start with TokenPrefix), so that a leaked one is recognised and neither
// kind is ever looked up as the other.
const OperatorTokenPrefix = "cso_"

// Bounds of operator tokens.
const (
	// MaxOperatorTokensPerAccount is how many live operator tokens one
	// account may hold.
	MaxOperatorTokensPerAccount = 5
	// MaxEndedOperatorTokensKept is how many of one person's revoked or
	// expired operator tokens are kept to be listed; making a token drops
	// the older ones (their audit entries stay), so a person's rows stay
	// bounded however many they make and revoke.
	MaxEndedOperatorTokensKept = 20
	// MaxOperatorTokenLife is the longest an operator token may live.
	MaxOperatorTokenLife = 30 * 24 * time.Hour
	// MaxOperatorTokenNote bounds a token's note, in bytes.
	MaxOperatorTokenNote = 200
)

// Refusals of operator tokens.
var (
	// ErrOperatorTokenScope is a scope other than read or decide.
	ErrOperatorTokenScope = errors.New("account: an operator token's scope is read or decide")
	// ErrOperatorTokenLife is a life outside one hour to 30 days.
	ErrOperatorTokenLife = errors.New("account: an operator token lives from one hour to 30 days")
	// ErrOperatorTokenNote is a note that is too long or holds control or
	// invisible characters.
	ErrOperatorTokenNote = errors.New("account: an operator token's note is short plain text")
	// ErrOperatorTokenRole refuses a token to an account that is not an
	// operator or admin: the operator API serves nobody else.
	ErrOperatorTokenRole = errors.New("account: operator tokens are for operators and admins")
	// ErrTooManyOperatorTokens refuses a token beyond
	// MaxOperatorTokensPerAccount live ones.
	ErrTooManyOperatorTokens = errors.New("account: this account holds as many live operator tokens as it may; revoke one first")
	// ErrOperatorTokenNotFound is an operator token that is not the
	// person's, or not live.
	ErrOperatorTokenNotFound = errors.New("account: no live operator token of yours has that id")
	// ErrOperatorTokenInvalid is a secret that names no live operator
	// token of an enabled account.
	ErrOperatorTokenInvalid = errors.New("account: the operator token is unknown, revoked or expired, or its account is disabled")
)

// OperatorTokenSpec is what a new operator token is for.
type OperatorTokenSpec struct {
	Person, Scope, Note string
	Life                time.Duration
}

// CreateOperatorToken makes an operator token for spec.Person, who must
// be an enabled account, and returns it with its secret (shown once). The
// caller has checked that spec.Person is the one asking, with a fresh
// login: nobody makes a token for someone else. Audited as
// operator_token_created through channel.
func (s *Service) CreateOperatorToken(ctx context.Context, spec OperatorTokenSpec, channel string) (OperatorToken, string, error) {
	if spec.Scope != ScopeRead && spec.Scope != ScopeDecide {
		return OperatorToken{}, "", refuse("scope", ErrOperatorTokenScope, "choose read (look only) or decide (look and decide); %q is neither", spec.Scope)
	}
	if spec.Life < time.Hour || spec.Life > MaxOperatorTokenLife {
		return OperatorToken{}, "", refuse("life", ErrOperatorTokenLife, "choose a life from one hour to 30 days")
	}
	note := strings.TrimSpace(spec.Note)
	if len(note) > MaxOperatorTokenNote || !utf8.ValidString(note) || strings.IndexFunc(note, func(r rune) bool {
		return unicode.IsControl(r) || unicode.Is(unicode.Cf, r)
	}) >= 0 {
		return OperatorToken{}, "", refuse("note", ErrOperatorTokenNote, "a note is plain text of at most %d bytes, without control or invisible characters", MaxOperatorTokenNote)
	}
	var raw [32]byte
	var id [6]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return OperatorToken{}, "", err
	}
	if _, err := rand.Read(id[:]); err != nil {
		return OperatorToken{}, "", err
	}
	secret := OperatorTokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	now := s.now().UTC().Truncate(time.Millisecond)
	t := OperatorToken{ID: "otk_" + hex.EncodeToString(id[:]), Person: spec.Person, Scope: spec.Scope, Note: note,
		CreatedAt: now, ExpiresAt: now.Add(spec.Life)}
	err := s.store.Update(ctx, func(tx Tx) error {
		u, err := tx.User(spec.Person)
		if err != nil {
			return err
		}
		if u.Disabled() {
			return fmt.Errorf("%w: %s", ErrUserDisabled, u.Name)
		}
		if !u.Role.CanDecide() {
			return ErrOperatorTokenRole
		}
		n, err := tx.LiveOperatorTokens(spec.Person, now)
		if err != nil {
			return err
		}
		if n >= MaxOperatorTokensPerAccount {
			return fmt.Errorf("%w (at most %d)", ErrTooManyOperatorTokens, MaxOperatorTokensPerAccount)
		}
		if err := tx.InsertOperatorToken(t, HashToken(secret)); err != nil {
			return fmt.Errorf("account: create operator token: %w", err)
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindOperatorTokenCreated,
			Principal: spec.Person, Channel: channel, Details: map[string]any{"token": t.ID, "scope": t.Scope,
				"note": note, "expires_at": audit.FormatTime(t.ExpiresAt)}})
	})
	if err != nil {
		return OperatorToken{}, "", err
	}
	return t, secret, nil
}

// OperatorTokens lists 100 of person's operator tokens: the live ones
// first, then the revoked and expired ones, each newest first.
func (s *Service) OperatorTokens(ctx context.Context, person string) ([]OperatorToken, error) {
	return s.store.OperatorTokens(ctx, person, s.now())
}

// RevokeOperatorToken revokes one of person's live operator tokens;
// another person's token is ErrOperatorTokenNotFound. Audited as
// operator_token_revoked.
func (s *Service) RevokeOperatorToken(ctx context.Context, person, id, channel string) error {
	return s.store.Update(ctx, func(tx Tx) error {
		now := s.now()
		if err := tx.RevokeOperatorToken(person, id, now); err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindOperatorTokenRevoked,
			Principal: person, Channel: channel, Details: map[string]any{"token": id}})
	})
}

// OperatorBySecret finds the live operator token a request presents and
// its person's account as it is now: ErrOperatorTokenInvalid when the
// secret is not an operator token's, the token is revoked or expired, or
// its account is disabled. It reads the store at every call, so that a
// revocation on any replica takes effect at the next request.
func (s *Service) OperatorBySecret(ctx context.Context, secret string) (OperatorToken, User, error) {
	if !strings.HasPrefix(secret, OperatorTokenPrefix) {
		return OperatorToken{}, User{}, ErrOperatorTokenInvalid
	}
	t, err := s.store.OperatorTokenByHash(ctx, HashToken(secret))
	if errors.Is(err, ErrOperatorTokenNotFound) {
		return OperatorToken{}, User{}, ErrOperatorTokenInvalid
	}
	if err != nil {
		return OperatorToken{}, User{}, err
	}
	if !t.Live(s.now()) {
		return OperatorToken{}, User{}, ErrOperatorTokenInvalid
	}
	u, err := s.store.User(ctx, t.Person)
	if errors.Is(err, ErrUserNotFound) {
		return OperatorToken{}, User{}, ErrOperatorTokenInvalid
	}
	if err != nil {
		return OperatorToken{}, User{}, err
	}
	if u.Disabled() {
		return OperatorToken{}, User{}, ErrOperatorTokenInvalid
	}
	return t, u, nil
}
