package account

import (
	"context"
	"time"

	"github.com/countersign/countersign/internal/audit"
)

// Store is the persistence of accounts, sessions, tokens and the console's
// secrets. Every write goes through Update; each read method is one
// consistent read. Methods that find nothing return the package's not-found
// errors; a store whose database was replaced returns store.ErrReplaced
// from Update, and storage trouble wraps store.ErrUnavailable.
type Store interface {
	// Update runs fn inside one write transaction, after checking that the
	// database is still the one opened: either everything fn did, audit
	// entries included, is committed, or nothing is. The commit has
	// happened when Update returns nil.
	Update(ctx context.Context, fn func(Tx) error) error

	User(ctx context.Context, name string) (User, error)
	// Users lists every account by name.
	Users(ctx context.Context) ([]User, error)
	Session(ctx context.Context, idHash string) (Session, error)
	// Sessions returns the sessions found among idHashes, by id hash;
	// unknown ids are left out.
	Sessions(ctx context.Context, idHashes []string) (map[string]Session, error)
	// TokenByHash finds a live (unrevoked) token by its secret's hash.
	TokenByHash(ctx context.Context, hash string) (Token, error)
	// Tokens lists every token, newest first, revoked ones included.
	Tokens(ctx context.Context) ([]Token, error)
	// Passkeys lists a user's passkeys, oldest first.
	Passkeys(ctx context.Context, user string) ([]Passkey, error)
	// OperatorTokenByHash finds an operator token by its secret's hash,
	// revoked or expired ones included: ErrOperatorTokenNotFound when
	// there is none.
	OperatorTokenByHash(ctx context.Context, hash string) (OperatorToken, error)
	// OperatorTokens lists 100 of person's operator tokens: the live ones
	// at now first (at most MaxOperatorTokensPerAccount), then the others,
	// each group newest first.
	OperatorTokens(ctx context.Context, person string, now time.Time) ([]OperatorToken, error)
	// LoginStrikes returns the failed logins kept for keys, by key; keys
	// without any are left out.
	LoginStrikes(ctx context.Context, keys []string) (map[string]Strikes, error)
}

// Tx is what one account transaction may do.
type Tx interface {
	User(name string) (User, error)
	// UserByIdentity finds the single-sign-on account of (issuer,
	// subject): ErrUserNotFound when there is none.
	UserByIdentity(issuer, subject string) (User, error)
	// UsersNamed lists the accounts whose name or short name equals name
	// ignoring ASCII case, enabled or not.
	UsersNamed(name string) ([]User, error)
	// InsertUser fails with ErrUserExists when the name is taken, or when
	// a single-sign-on account of that (issuer, subject) exists.
	InsertUser(u User) error
	// UpdateOIDCUser writes what a single-sign-on login refreshes: role
	// ("" for none), short name, display name, email, groups and last
	// login. ErrUserNotFound when there is no such account.
	UpdateOIDCUser(u User) error
	// SetUserHandle sets the account's WebAuthn user handle.
	SetUserHandle(name string, handle []byte) error
	// DisableUser marks an enabled user disabled: ErrUserNotFound when
	// there is no such user, ErrUserDisabled when it already is.
	DisableUser(name string, at time.Time) error
	// SetPassword replaces a local account's password hash and sets or
	// clears its must-change mark: ErrUserNotFound when there is no such
	// account.
	SetPassword(name, hash string, mustChange bool) error
	// RevokeUserSessions ends every live session of user and returns how
	// many it ended.
	RevokeUserSessions(user, reason string, at time.Time) (int64, error)

	// InsertSession stores a new session of s.User.Name, first ending (at
	// s.CreatedAt, for SessionLimitReason) that account's oldest live
	// sessions beyond the newest MaxSessionsPerAccount-1, and returns the
	// id hashes of the sessions it ended.
	InsertSession(s Session) (ended []string, err error)
	// RecordLogin records that user logged in at at (the admin page's
	// "Last login"); a single-sign-on login records it with the account's
	// update.
	RecordLogin(user string, at time.Time) error
	// TouchSession moves a live session's last-seen time forward (never
	// back).
	TouchSession(idHash string, at time.Time) error
	// RevokeSession ends a live session; an ended or unknown one is left
	// as it is.
	RevokeSession(idHash, reason string, at time.Time) error
	// PruneSessions deletes sessions created before cutoff.
	PruneSessions(cutoff time.Time) (int64, error)

	// InsertToken stores a token with its secret's hash.
	InsertToken(t Token, hash string) error
	// RevokeToken revokes a live token: ErrTokenNotFound when there is no
	// live token with that id.
	RevokeToken(id string, at time.Time) error

	// InsertOperatorToken stores an operator token with its secret's hash,
	// first dropping its person's revoked and expired tokens (ended at
	// t.CreatedAt) beyond the newest MaxEndedOperatorTokensKept.
	InsertOperatorToken(t OperatorToken, hash string) error
	// LiveOperatorTokens counts person's operator tokens neither revoked
	// nor expired at now.
	LiveOperatorTokens(person string, now time.Time) (int, error)
	// RevokeOperatorToken revokes one of person's live operator tokens:
	// ErrOperatorTokenNotFound when person has no unrevoked token with
	// that id.
	RevokeOperatorToken(person, id string, at time.Time) error

	// Passkeys lists a user's passkeys, oldest first.
	Passkeys(user string) ([]Passkey, error)
	// InsertPasskey stores a new passkey: ErrPasskeyTaken when its
	// credential id is already registered (to anyone).
	InsertPasskey(p Passkey) error
	// DeletePasskey removes one of user's passkeys and returns it:
	// ErrPasskeyNotFound when user has no passkey with that id.
	DeletePasskey(user string, id []byte) (Passkey, error)

	// InsertOneshot keeps a value; its (kind, key hash) must be new.
	InsertOneshot(o Oneshot) error
	// TakeOneshot deletes and returns a value: oneshot.ErrNotFound when
	// there is none.
	TakeOneshot(kind, keyHash string) (Oneshot, error)
	// CountOneshots counts the values of a kind.
	CountOneshots(kind string) (int, error)
	// PruneOneshots deletes the values of a kind that expired by now.
	PruneOneshots(kind string, now time.Time) error
	// TrimOneshots deletes the oldest values (soonest to expire) of a kind
	// kept for owner until at most keep remain.
	TrimOneshots(kind, owner string, keep int) error

	// LoginStrikes returns the failed logins kept for keys, by key; keys
	// without any are left out.
	LoginStrikes(keys []string) (map[string]Strikes, error)
	// SetLoginStrikes keeps s for s.Key, replacing what was kept; zero or
	// fewer failures delete it.
	SetLoginStrikes(s Strikes) error
	// PruneLoginStrikes deletes the strikes forgotten by now.
	PruneLoginStrikes(now time.Time) error
	// LoginStrikesSize is how many keys have strikes kept, read without
	// counting them (the store keeps the number).
	LoginStrikesSize() (int, error)
	// EvictLoginStrikes deletes the strikes of up to n keys that are not
	// throttled and not among keep, those with the fewest failures first,
	// then the oldest (by Last); it returns how many it deleted. A
	// throttled key is never deleted.
	EvictLoginStrikes(n int, keep []string) (int, error)
	// NextLoginStrikeForget is the earliest Forget among the strikes kept;
	// the zero time when none are kept.
	NextLoginStrikeForget() (time.Time, error)

	// Secret reads a console secret: ErrSecretNotFound when unset.
	Secret(name string) ([]byte, error)
	InsertSecret(name string, value []byte) error

	// Append seals the entry onto the audit chain.
	Append(e *audit.Entry) error
}
