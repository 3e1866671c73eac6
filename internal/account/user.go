package account

import (
	"errors"
	"time"
)

// Kind says how an account logs in.
type Kind string

// Kinds of accounts.
const (
	// KindLocal accounts log in with a name and a password.
	KindLocal Kind = "local"
	// KindOIDC accounts sign on through an OpenID provider.
	KindOIDC Kind = "oidc"
)

// User is a console account.
type User struct {
	// Name is the account's identity in sessions, decisions and the audit
	// trail: the local name, or for single sign-on the principal
	// oidc:{issuer host}/{sub}.
	Name string
	// Role is "" for a single-sign-on user whose last login mapped no
	// group to a role.
	Role         Role
	PasswordHash string // argon2id PHC string; "" for single sign-on
	CreatedAt    time.Time
	DisabledAt   time.Time // zero while the account is enabled

	Kind Kind
	// Issuer and Subject identify a single-sign-on user at its provider.
	Issuer  string
	Subject string
	// ShortName, DisplayName, Email and Groups are what the provider said
	// at the last login: shown beside the principal, never the identity.
	ShortName   string
	DisplayName string
	Email       string
	Groups      []string
	LastLoginAt time.Time
	// Handle is the account's WebAuthn user handle, nil until its first
	// passkey is registered.
	Handle []byte
	// MustChangePassword marks a local account whose password an
	// administrator set: after its next password login it may do nothing
	// but choose its own.
	MustChangePassword bool
}

// Disabled reports whether the account was disabled.
func (u User) Disabled() bool { return !u.DisabledAt.IsZero() }

// SSO reports whether the account signs on through an OpenID provider.
func (u User) SSO() bool { return u.Kind == KindOIDC }

// CanDecide reports whether the account may approve and deny calls: it is
// enabled and its role decides.
func (u User) CanDecide() bool { return !u.Disabled() && u.Role.CanDecide() }

// Shown is how the account is named to people: the short name or display
// name when the provider gave one, else the name itself. The principal
// (Name) is always shown beside it for single sign-on.
func (u User) Shown() string {
	switch {
	case u.ShortName != "":
		return u.ShortName
	case u.DisplayName != "":
		return u.DisplayName
	}
	return u.Name
}

// Login methods of a session.
const (
	MethodPassword = "password"
	MethodOIDC     = "oidc"
)

// MaxSessionsPerAccount is how many live console sessions one account may
// hold. A login beyond it ends the account's oldest live session (as a
// logout does, for SessionLimitReason), so that one password or provider
// login repeated without end keeps a bounded number of sessions live, and
// the person who logs in is never refused.
const MaxSessionsPerAccount = 20

// SessionLimitReason is the revoke reason of a session ended to keep its
// account within MaxSessionsPerAccount live sessions.
const SessionLimitReason = "session_limit"

// Session is a console login, found by the hash of the random id its cookie
// carries, with its user as stored now.
type Session struct {
	IDHash string // SHA-256 of the random id the cookie carries
	User   User
	CSRF   string
	// Method is how the session logged in (MethodPassword, MethodOIDC);
	// IDToken is the provider's ID token of a single-sign-on login, the
	// hint of RP-initiated logout.
	Method       string
	IDToken      string
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
	ID       string
	Actor    string
	Audience string
	Note     string
	// Owners are the people who run the agent: none of them may approve
	// its calls. Account names, or team:GROUP for a provider group.
	Owners    []string
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
	ErrPasskeyNotFound = errors.New("account: no such passkey")
	ErrPasskeyTaken    = errors.New("account: that passkey is already registered")
	// ErrSSOPassword refuses a password for a single-sign-on account: it
	// has none here; its provider checks who it is.
	ErrSSOPassword = errors.New("account: a single-sign-on account has no password here; its identity provider sets and resets it")
)
