package account

import (
	"errors"
	"time"
)

// User is a console account.
type User struct {
	Name         string
	Role         Role
	PasswordHash string // argon2id PHC string
	CreatedAt    time.Time
	DisabledAt   time.Time // zero while the account is enabled
}

// Disabled reports whether the account was disabled.
func (u User) Disabled() bool { return !u.DisabledAt.IsZero() }

// CanDecide reports whether the account may approve and deny calls: it is
// enabled and its role decides.
func (u User) CanDecide() bool { return !u.Disabled() && u.Role.CanDecide() }

// Session is a console login, found by the hash of the random id its cookie
// carries, with its user as stored now.
type Session struct {
	IDHash       string // SHA-256 of the random id the cookie carries
	User         User
	CSRF         string
	CreatedAt    time.Time
	LastSeen     time.Time
	RevokedAt    time.Time // zero while the session is live
	RevokeReason string
}

// Revoked reports whether the session was ended on the server.
func (s Session) Revoked() bool { return !s.RevokedAt.IsZero() }

// Token is an agent's API token. Its secret is shown once and stored only
// as a hash.
type Token struct {
	ID        string
	Actor     string
	Audience  string
	Note      string
	CreatedAt time.Time
	RevokedAt time.Time // zero while the token is live
}

// TokenPrefix starts every token secret, so that a leaked one is easy to
// recognise.
const TokenPrefix = "cst_"

// Errors of accounts, sessions and tokens. Stores return them too.
var (
	ErrUserNotFound    = errors.New("account: no such user")
	ErrUserExists      = errors.New("account: a user with that name already exists")
	ErrUserDisabled    = errors.New("account: the user is already disabled")
	ErrSessionNotFound = errors.New("account: no such session")
	ErrTokenNotFound   = errors.New("account: token not found or revoked")
	ErrTokenContext    = errors.New("account: a token needs an actor and an audience")
	ErrTokenName       = errors.New("account: a token's actor and audience follow the account name rule")
	ErrSecretNotFound  = errors.New("account: no such console secret")
)
