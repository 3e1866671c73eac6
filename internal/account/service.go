package account

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/countersign/countersign/internal/audit"
)

// Service applies the rules of accounts, sessions and tokens over a Store:
// names, roles and hashes are checked before anything is stored, token
// secrets are generated here and stored only hashed, and every change an
// administrator makes leaves an audit entry in the same transaction.
type Service struct {
	store        Store
	now          func() time.Time
	throttleRows int // see SetThrottleRows
}

// NewService returns the accounts over store; now defaults to time.Now.
func NewService(store Store, now func() time.Time) *Service {
	if now == nil {
		now = time.Now
	}
	return &Service{store: store, now: now}
}

// AddUser creates an enabled account, audited as done by by through
// channel.
func (s *Service) AddUser(ctx context.Context, name string, role Role, passwordHash, by, channel string) (User, error) {
	if err := CheckName(name); err != nil {
		return User{}, err
	}
	if _, err := ParseRole(string(role)); err != nil {
		return User{}, err
	}
	if strings.HasPrefix(strings.ToLower(name), OIDCPrefix) {
		return User{}, refuse("name", ErrBadName, "names starting with %s are single-sign-on principals; choose another name", OIDCPrefix)
	}
	if _, _, _, err := ParseHash(passwordHash); err != nil {
		return User{}, err
	}
	u := User{Name: name, Role: role, PasswordHash: passwordHash, Kind: KindLocal, CreatedAt: s.now().UTC().Truncate(time.Millisecond)}
	err := s.store.Update(ctx, func(tx Tx) error {
		// A new local account must not take the name a single-sign-on
		// user is shown under.
		others, err := tx.UsersNamed(name)
		if err != nil {
			return err
		}
		for _, o := range others {
			if o.Kind == KindOIDC && !o.Disabled() {
				return &ShadowError{Name: name, Holder: o.Name}
			}
		}
		if err := tx.InsertUser(u); err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(s.now()), Kind: audit.KindUserAdded,
			Principal: by, Channel: channel, Details: map[string]any{"user": name, "role": string(role)}})
	})
	if err != nil {
		return User{}, err
	}
	return u, nil
}

// UserByName finds an account, enabled or not.
func (s *Service) UserByName(ctx context.Context, name string) (User, error) {
	return s.store.User(ctx, name)
}

// Users lists every account by name.
func (s *Service) Users(ctx context.Context) ([]User, error) { return s.store.Users(ctx) }

// DisableUser disables an account and ends its sessions in the same
// transaction.
func (s *Service) DisableUser(ctx context.Context, name, by, channel string) error {
	now := s.now()
	return s.store.Update(ctx, func(tx Tx) error {
		if err := tx.DisableUser(name, now); err != nil {
			return err
		}
		ended, err := tx.RevokeUserSessions(name, "disabled", now)
		if err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindUserDisabled,
			Principal: by, Channel: channel, Details: map[string]any{"user": name, "sessions_ended": ended}})
	})
}

// CreateSession records a new password login of user. It returns the id
// hashes of the sessions it ended to keep the account within
// MaxSessionsPerAccount, whose open pages the caller closes as a logout's.
func (s *Service) CreateSession(ctx context.Context, idHash, user, csrf string, now time.Time) ([]string, error) {
	var ended []string
	err := s.store.Update(ctx, func(tx Tx) error {
		var err error
		if ended, err = tx.InsertSession(Session{IDHash: idHash, User: User{Name: user}, CSRF: csrf, Method: MethodPassword,
			CreatedAt: now, LastSeen: now}); err != nil {
			return err
		}
		return tx.RecordLogin(user, now)
	})
	if err != nil {
		return nil, err
	}
	return ended, nil
}

// Session finds a session, ended or not, with its user.
func (s *Service) Session(ctx context.Context, idHash string) (Session, error) {
	return s.store.Session(ctx, idHash)
}

// Sessions finds the sessions among idHashes; unknown ids are left out.
func (s *Service) Sessions(ctx context.Context, idHashes []string) (map[string]Session, error) {
	return s.store.Sessions(ctx, idHashes)
}

// TouchSession records activity on a live session.
func (s *Service) TouchSession(ctx context.Context, idHash string, now time.Time) error {
	return s.store.Update(ctx, func(tx Tx) error { return tx.TouchSession(idHash, now) })
}

// RevokeSession ends a live session for reason (logout, idle, expired,
// disabled).
func (s *Service) RevokeSession(ctx context.Context, idHash, reason string, now time.Time) error {
	return s.store.Update(ctx, func(tx Tx) error { return tx.RevokeSession(idHash, reason, now) })
}

// PruneSessions deletes sessions created before cutoff and returns how
// many.
func (s *Service) PruneSessions(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := s.store.Update(ctx, func(tx Tx) error {
		var err error
		n, err = tx.PruneSessions(cutoff)
		return err
	})
	return n, err
}

// ConsoleSecret returns the named random secret of size bytes, creating it
// on first use.
func (s *Service) ConsoleSecret(ctx context.Context, name string, size int) ([]byte, error) {
	var out []byte
	err := s.store.Update(ctx, func(tx Tx) error {
		v, err := tx.Secret(name)
		if err == nil {
			out = v
			return nil
		}
		if !errors.Is(err, ErrSecretNotFound) {
			return err
		}
		v = make([]byte, size)
		if _, err := rand.Read(v); err != nil {
			return err
		}
		if err := tx.InsertSecret(name, v); err != nil {
			return err
		}
		out = v
		return nil
	})
	return out, err
}

// HashToken is how a token's secret is stored and looked up.
func HashToken(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// CreateToken creates an API token for actor and audience and returns it
// with its secret, which is shown once and stored only hashed.
func (s *Service) CreateToken(ctx context.Context, actor, audience, note, by, channel string) (Token, string, error) {
	return s.CreateTokenWith(ctx, TokenSpec{Actor: actor, Audience: audience, Note: note}, by, channel)
}

// TokenSpec is what a new token is for.
type TokenSpec struct {
	Actor, Audience, Note string
	// Owners run the agent and may not approve its calls (CheckOwner).
	Owners []string
	// Holder is the account that is shown the token's secret (the admin
	// who makes it in the console), "" when that is nobody's account (the
	// command line). Whoever holds the secret can run the agent, so the
	// holder is one of its owners.
	Holder string
}

// MaxOwners bounds a token's owners.
const MaxOwners = 20

// ownerRule says what CheckOwner allows.
const ownerRule = "an owner is an account name (alice, or oidc:HOST/SUB) or team:GROUP for the members of a provider group"

// ErrBadOwner is an owner that names no account or group.
var ErrBadOwner = errors.New("account: " + ownerRule)

// CheckOwner checks one owner of a token: an account name, a single-sign-on
// principal, or team:GROUP with a group of printable characters (at most
// 128 bytes).
func CheckOwner(o string) error {
	bad := refuse("owner", ErrBadOwner, "%s; %q is neither", ownerRule, o)
	if g, ok := strings.CutPrefix(o, "team:"); ok {
		if g == "" || len(g) > 128 || strings.TrimSpace(g) != g {
			return bad
		}
		if !utf8.ValidString(g) {
			return bad
		}
		for _, r := range g {
			if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
				return bad
			}
		}
		return nil
	}
	if strings.HasPrefix(o, OIDCPrefix) {
		if CheckPrincipal(o) != nil {
			return bad
		}
		return nil
	}
	if err := CheckName(o); err != nil {
		return within("owner", ErrBadOwner, err, "%s; owner %q: ", ownerRule, o)
	}
	return nil
}

// pinOwners returns owners with, after each owner written as a name, the
// principal of the enabled single-sign-on account shown under that name
// now (its provider user name, ignoring case). The provider user name is
// only shown, never the identity: the provider may rename the person (or
// let them rename themselves), and an owner who could shed the name would
// approve their own agent's calls. A name that no such account goes by
// yet stays a name, matched when the call is decided.
func pinOwners(tx Tx, owners []string) ([]string, error) {
	out := make([]string, 0, len(owners))
	add := func(o string) {
		if !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	for _, o := range owners {
		add(o)
		if strings.HasPrefix(o, "team:") || strings.HasPrefix(o, OIDCPrefix) {
			continue
		}
		named, err := tx.UsersNamed(o)
		if err != nil {
			return nil, err
		}
		for _, u := range named {
			if u.Kind == KindOIDC && !u.Disabled() && strings.EqualFold(u.ShortName, o) {
				add(u.Name)
			}
		}
	}
	return out, nil
}

// CreateTokenWith creates an API token as spec says and returns it with its
// secret, which is shown once and stored only hashed.
func (s *Service) CreateTokenWith(ctx context.Context, spec TokenSpec, by, channel string) (Token, string, error) {
	actor, audience, note := strings.TrimSpace(spec.Actor), strings.TrimSpace(spec.Audience), spec.Note
	var owners []string
	for _, o := range spec.Owners {
		o = strings.TrimSpace(o)
		if o == "" || slices.Contains(owners, o) {
			continue
		}
		if err := CheckOwner(o); err != nil {
			return Token{}, "", err
		}
		owners = append(owners, o)
	}
	if len(owners) > MaxOwners {
		return Token{}, "", refuse("owner", ErrBadOwner, "a token has at most %d owners", MaxOwners)
	}
	if h := spec.Holder; h != "" {
		listed, err := s.holderListed(ctx, h, owners)
		if err != nil {
			return Token{}, "", err
		}
		if !listed {
			// The holder counts against the bound like any owner.
			if len(owners) >= MaxOwners {
				return Token{}, "", refuse("owner", ErrBadOwner,
					"a token has at most %d owners, and you are one of them (you are shown its secret): name at most %d others, or put several people in a team:GROUP of the identity provider",
					MaxOwners, MaxOwners-1)
			}
			owners = append(owners, h)
		}
	}
	if actor == "" {
		return Token{}, "", refuse("actor", ErrTokenContext, "a token needs an actor and an audience")
	}
	if audience == "" {
		return Token{}, "", refuse("audience", ErrTokenContext, "a token needs an actor and an audience")
	}
	// A token's actor and audience are shown to operators on every call
	// and are matched against account names (nobody approves their own
	// call), so they follow the account name rule: plain ASCII that reads
	// the same everywhere, never a bidi control or a look-alike.
	if err := CheckName(actor); err != nil {
		return Token{}, "", within("actor", ErrTokenName, err, "a token's actor is named like account names (the account name rule): ")
	}
	if err := checkNameChars(audience); err != nil {
		return Token{}, "", within("audience", ErrTokenName, err, "a token's audience is named like account names (the account name rule): ")
	}
	var raw [32]byte
	var id [6]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Token{}, "", err
	}
	if _, err := rand.Read(id[:]); err != nil {
		return Token{}, "", err
	}
	secret := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	t := Token{ID: "tok_" + hex.EncodeToString(id[:]), Actor: actor, Audience: audience, Note: note, Owners: owners,
		CreatedAt: s.now().UTC().Truncate(time.Millisecond)}
	err := s.store.Update(ctx, func(tx Tx) error {
		pinned, err := pinOwners(tx, owners)
		if err != nil {
			return err
		}
		t.Owners = pinned
		if err := tx.InsertToken(t, HashToken(secret)); err != nil {
			return fmt.Errorf("account: create token: %w", err)
		}
		details := map[string]any{"token": t.ID, "actor": actor, "audience": audience, "note": note}
		if len(t.Owners) > 0 {
			details["owners"] = t.Owners
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(s.now()), Kind: audit.KindTokenCreated,
			Principal: by, Channel: channel, Details: details})
	})
	if err != nil {
		return Token{}, "", err
	}
	return t, secret, nil
}

// holderListed reports whether the token's holder is already among its
// owners: by its name, or, for a single-sign-on account, by the provider
// user name it goes by (pinOwners pins that name to its principal).
func (s *Service) holderListed(ctx context.Context, holder string, owners []string) (bool, error) {
	if slices.ContainsFunc(owners, func(o string) bool { return strings.EqualFold(o, holder) }) {
		return true, nil
	}
	if !strings.HasPrefix(holder, OIDCPrefix) {
		return false, nil
	}
	u, err := s.store.User(ctx, holder)
	if errors.Is(err, ErrUserNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return u.ShortName != "" && !u.Disabled() && slices.ContainsFunc(owners, func(o string) bool { return strings.EqualFold(o, u.ShortName) }), nil
}

// TokenBySecret finds the live token a request presents.
func (s *Service) TokenBySecret(ctx context.Context, secret string) (Token, error) {
	return s.store.TokenByHash(ctx, HashToken(secret))
}

// Tokens lists every token, newest first.
func (s *Service) Tokens(ctx context.Context) ([]Token, error) { return s.store.Tokens(ctx) }

// RevokeToken revokes a live token.
func (s *Service) RevokeToken(ctx context.Context, id, by, channel string) error {
	return s.store.Update(ctx, func(tx Tx) error {
		if err := tx.RevokeToken(id, s.now()); err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(s.now()), Kind: audit.KindTokenRevoked,
			Principal: by, Channel: channel, Details: map[string]any{"token": id}})
	})
}
