package account

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
)

// OIDCPrefix starts the name of every single-sign-on account:
// oidc:{issuer host}/{sub}.
const OIDCPrefix = "oidc:"

// MaxPrincipalBytes bounds a single-sign-on principal.
const MaxPrincipalBytes = 320

// OIDCLogin is a login an OpenID provider vouched for, after every check of
// the ID token passed.
type OIDCLogin struct {
	// Principal is oidc:{issuer host}/{sub}; Issuer and Subject are the
	// identity it stands for.
	Principal string
	Issuer    string
	Subject   string
	// PreferredUsername, DisplayName, Email and Groups are the provider's
	// claims, refreshed at every login and only shown.
	PreferredUsername string
	DisplayName       string
	Email             string
	Groups            []string
	// Role is what the groups map to; "" when none maps.
	Role Role
}

// NewSession is the session a login opens.
type NewSession struct {
	IDHash  string
	CSRF    string
	IDToken string // single sign-on only
}

// Refusals of a single-sign-on login. Their messages are for the person
// logging in and name what to do.
var (
	// ErrNoRole: no group the provider lists maps to a console role.
	ErrNoRole = errors.New("account: none of your groups at the identity provider gives you a role in this console; ask an administrator to add you to a group that does")
	// ErrLoginDisabled: an administrator disabled the account.
	ErrLoginDisabled = errors.New("account: this account is disabled; ask an administrator")
	// ErrBadPrincipal: the provider's issuer or subject cannot name an
	// account.
	ErrBadPrincipal = errors.New("account: the identity provider's subject cannot name an account here (it must be printable ASCII, at most 320 bytes with the issuer host)")
)

// ShadowError refuses a login, or a new local account, whose name is
// already another account's: a person must never pass for someone else on
// the screen or in the audit trail.
type ShadowError struct {
	Name   string // the name asked for
	Holder string // the account that has it
	Local  bool   // the holder is a local account
}

func (e *ShadowError) Error() string { return "account: " + e.Message() }

// Message says, for the person refused, whose name it is and what an
// administrator must do.
func (e *ShadowError) Message() string {
	if e.Local {
		return fmt.Sprintf("the identity provider calls you %q, which is the name of a local account; "+
			"an administrator must rename one of the two (the provider's preferred_username, or the local account) before you can sign in", e.Name)
	}
	return fmt.Sprintf("the name %q is already used by %s; an administrator must rename one of the two, "+
		"or disable the other account, before this one can be used", e.Name, e.Holder)
}

// CheckPrincipal checks a single-sign-on principal: oidc: followed by
// printable ASCII without spaces, at most MaxPrincipalBytes.
func CheckPrincipal(p string) error {
	rest, ok := strings.CutPrefix(p, OIDCPrefix)
	if !ok || len(p) > MaxPrincipalBytes || !strings.Contains(rest, "/") {
		return ErrBadPrincipal
	}
	for _, c := range []byte(rest) {
		if c <= 0x20 || c >= 0x7f {
			return ErrBadPrincipal
		}
	}
	return nil
}

// shortName picks the name shown for a single-sign-on user: the provider's
// preferred_username when it follows the account name rules, else none (the
// display name and principal are shown). A preferred_username that is a
// reserved name refuses the login.
func shortName(preferred string) (string, error) {
	err := CheckName(preferred)
	if err == nil {
		return preferred, nil
	}
	if errors.Is(err, ErrBadName) {
		return "", nil
	}
	return "", within("preferred_username", ErrReservedName, err, "the identity provider calls you %q: ", preferred)
}

// checkShadow refuses name when an account other than self already goes by
// it, ignoring case: a local account (enabled or not), or an enabled
// single-sign-on account.
func checkShadow(tx Tx, name, self string) error {
	if name == "" {
		return nil
	}
	others, err := tx.UsersNamed(name)
	if err != nil {
		return err
	}
	for _, o := range others {
		if o.Name == self {
			continue
		}
		if o.Kind != KindOIDC {
			return &ShadowError{Name: name, Holder: o.Name, Local: true}
		}
		if !o.Disabled() {
			return &ShadowError{Name: name, Holder: o.Name}
		}
	}
	return nil
}

// LoginOIDC records a single-sign-on login and opens its session, in one
// transaction: the account is created at its first login and updated at
// every later one (role from groups, names, email), and each change is
// audited. A login whose groups map to no role opens no session, ends the
// account's live sessions and leaves it without a role (ErrNoRole); a
// disabled account, a name that would shadow another account's, or a
// reserved name is refused with nothing stored. It also returns the id
// hashes of the sessions it ended to keep the account within
// MaxSessionsPerAccount, whose open pages the caller closes as a logout's.
func (s *Service) LoginOIDC(ctx context.Context, l OIDCLogin, sess NewSession) (User, []string, error) {
	if err := CheckPrincipal(l.Principal); err != nil {
		return User{}, nil, err
	}
	if l.Issuer == "" || l.Subject == "" {
		return User{}, nil, ErrBadPrincipal
	}
	if l.Role != "" {
		if _, err := ParseRole(string(l.Role)); err != nil {
			return User{}, nil, err
		}
	}
	short, err := shortName(l.PreferredUsername)
	if err != nil {
		return User{}, nil, err
	}
	groups := slices.Clone(l.Groups)
	if groups == nil {
		groups = []string{}
	}
	now := s.now().UTC().Truncate(time.Millisecond)
	var out User
	var ended []string
	var refusal error
	err = s.store.Update(ctx, func(tx Tx) error {
		out, ended, refusal = User{}, nil, nil
		prev, err := tx.UserByIdentity(l.Issuer, l.Subject)
		found := err == nil
		if err != nil && !errors.Is(err, ErrUserNotFound) {
			return err
		}
		if found && prev.Disabled() {
			refusal = ErrLoginDisabled
			return nil
		}
		if found && prev.Name != l.Principal {
			// The issuer's host moved: the identity is the same, the
			// principal recorded so far stays.
			l.Principal = prev.Name
		}
		if l.Role == "" {
			refusal = ErrNoRole
			if !found {
				return nil
			}
			ended, err := tx.RevokeUserSessions(prev.Name, "no_role", now)
			if err != nil {
				return err
			}
			if prev.Role == "" {
				return nil
			}
			u := prev
			u.Role, u.Groups, u.LastLoginAt = "", groups, now
			if err := tx.UpdateOIDCUser(u); err != nil {
				return err
			}
			return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindUserUpdated,
				Principal: u.Name, Channel: audit.ChannelWeb, Details: map[string]any{
					"user": u.Name, "via": "oidc", "role": "", "previous_role": string(prev.Role),
					"groups": groups, "sessions_ended": ended}})
		}
		if err := checkShadow(tx, short, l.Principal); err != nil {
			refusal = err
			return nil
		}
		u := User{Name: l.Principal, Role: l.Role, Kind: KindOIDC, Issuer: l.Issuer, Subject: l.Subject,
			ShortName: short, DisplayName: l.DisplayName, Email: l.Email, Groups: groups,
			CreatedAt: now, LastLoginAt: now}
		if found {
			u.CreatedAt, u.Handle = prev.CreatedAt, prev.Handle
			if err := tx.UpdateOIDCUser(u); err != nil {
				return err
			}
			if changed := userChanges(prev, u); len(changed) > 0 {
				details := map[string]any{"user": u.Name, "via": "oidc", "role": string(u.Role),
					"short_name": u.ShortName, "display_name": u.DisplayName, "email": u.Email,
					"groups": groups, "changed": changed}
				if slices.Contains(changed, "role") {
					details["previous_role"] = string(prev.Role)
				}
				if err := tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindUserUpdated,
					Principal: u.Name, Channel: audit.ChannelWeb, Details: details}); err != nil {
					return err
				}
			}
		} else {
			if err := tx.InsertUser(u); err != nil {
				return err
			}
			if err := tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindUserAdded,
				Principal: u.Name, Channel: audit.ChannelWeb, Details: map[string]any{
					"user": u.Name, "via": "oidc", "role": string(u.Role), "issuer": u.Issuer, "subject": u.Subject,
					"short_name": u.ShortName, "display_name": u.DisplayName, "email": u.Email, "groups": groups}}); err != nil {
				return err
			}
		}
		if ended, err = tx.InsertSession(Session{IDHash: sess.IDHash, User: User{Name: u.Name}, CSRF: sess.CSRF,
			Method: MethodOIDC, IDToken: sess.IDToken, CreatedAt: now, LastSeen: now}); err != nil {
			return err
		}
		out = u
		return nil
	})
	if err != nil {
		return User{}, nil, err
	}
	if refusal != nil {
		return User{}, nil, refusal
	}
	return out, ended, nil
}

// userChanges names the shown fields a login changed.
func userChanges(prev, now User) []string {
	var out []string
	if prev.Role != now.Role {
		out = append(out, "role")
	}
	if prev.ShortName != now.ShortName {
		out = append(out, "short_name")
	}
	if prev.DisplayName != now.DisplayName {
		out = append(out, "display_name")
	}
	if prev.Email != now.Email {
		out = append(out, "email")
	}
	if !slices.Equal(prev.Groups, now.Groups) && !(len(prev.Groups) == 0 && len(now.Groups) == 0) {
		out = append(out, "groups")
	}
	return out
}

// EndSessions ends every live session of a user at once (their open pages
// close within the sweep interval on every server), audited as done by by
// through channel, and returns how many it ended.
func (s *Service) EndSessions(ctx context.Context, name, by, channel string) (int64, error) {
	now := s.now()
	var ended int64
	err := s.store.Update(ctx, func(tx Tx) error {
		if _, err := tx.User(name); err != nil {
			return err
		}
		var err error
		if ended, err = tx.RevokeUserSessions(name, "ended_by_admin", now); err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindSessionsEnded,
			Principal: by, Channel: channel, Details: map[string]any{"user": name, "sessions_ended": ended}})
	})
	return ended, err
}

// ChangeOwnPassword replaces a local account's password at its own
// request, and ends every session the account has, in one transaction:
// whoever knew the old password is logged out everywhere. The caller
// opens a new session for the person who changed it. It returns how many
// sessions ended. A single-sign-on account is refused with
// ErrSSOPassword.
func (s *Service) ChangeOwnPassword(ctx context.Context, name, passwordHash, channel string) (int64, error) {
	if _, _, _, err := ParseHash(passwordHash); err != nil {
		return 0, err
	}
	now := s.now()
	var ended int64
	err := s.store.Update(ctx, func(tx Tx) error {
		u, err := tx.User(name)
		if err != nil {
			return err
		}
		if u.SSO() {
			return ErrSSOPassword
		}
		if err := tx.SetPassword(name, passwordHash, false); err != nil {
			return err
		}
		if ended, err = tx.RevokeUserSessions(name, "password_changed", now); err != nil {
			return err
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindPasswordSet,
			Principal: name, Channel: channel, Details: map[string]any{"user": name, "must_change": false, "sessions_ended": ended}})
	})
	return ended, err
}

// SetPassword replaces a local account's password, audited as done by by
// through channel, and returns how many sessions it ended. Set by the
// account itself (self), the password is simply its new one. Set by
// anyone else, the account must choose its own at its next login and
// every session it has ends in the same transaction. A single-sign-on
// account is refused with ErrSSOPassword.
func (s *Service) SetPassword(ctx context.Context, name, passwordHash string, self bool, by, channel string) (int64, error) {
	if _, _, _, err := ParseHash(passwordHash); err != nil {
		return 0, err
	}
	now := s.now()
	var ended int64
	err := s.store.Update(ctx, func(tx Tx) error {
		u, err := tx.User(name)
		if err != nil {
			return err
		}
		if u.SSO() {
			return ErrSSOPassword
		}
		if err := tx.SetPassword(name, passwordHash, !self); err != nil {
			return err
		}
		if !self {
			if ended, err = tx.RevokeUserSessions(name, "password_reset", now); err != nil {
				return err
			}
		}
		return tx.Append(&audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindPasswordSet,
			Principal: by, Channel: channel, Details: map[string]any{"user": name, "must_change": !self, "sessions_ended": ended}})
	})
	return ended, err
}
