package sqlq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/store"
)

// UserColumns are a user's columns, in the order UserDest scans them.
const UserColumns = `name, role, password_hash, created_at, disabled_at, kind, COALESCE(issuer, ''), COALESCE(subject, ''),
	short_name, display_name, email, groups, last_login_at, no_role_since, webauthn_handle, must_change_password`

// UserColumnsOf is UserColumns of the users table under alias a.
func UserColumnsOf(a string) string {
	return strings.NewReplacer("$", a+".").Replace(`$name, $role, $password_hash, $created_at, $disabled_at, $kind,
	COALESCE($issuer, ''), COALESCE($subject, ''), $short_name, $display_name, $email, $groups, $last_login_at,
	$no_role_since, $webauthn_handle, $must_change_password`)
}

// UserDest is where a row of UserColumns is scanned, before User reads it
// into an account.User. Display name and email are scanned as bytes:
// PostgreSQL keeps them as BYTEA, since its TEXT cannot hold a NUL;
// SQLite as TEXT.
type UserDest struct {
	u                           account.User
	role, kind, groups          string
	display, email              []byte
	created                     int64
	disabled, lastLogin, noRole sql.NullInt64
	handle                      []byte
	mustChange                  int64
}

// Dest returns the scan destinations of UserColumns.
func (d *UserDest) Dest() []any {
	return []any{&d.u.Name, &d.role, &d.u.PasswordHash, &d.created, &d.disabled, &d.kind, &d.u.Issuer, &d.u.Subject,
		&d.u.ShortName, &d.display, &d.email, &d.groups, &d.lastLogin, &d.noRole, &d.handle, &d.mustChange}
}

// User is the scanned row as an account.User.
func (d *UserDest) User() (account.User, error) {
	u := d.u
	u.Role, u.Kind = account.Role(d.role), account.Kind(d.kind)
	if d.noRole.Valid {
		u.Role = ""
	}
	u.DisplayName, u.Email = string(d.display), string(d.email)
	u.CreatedAt, u.DisabledAt, u.LastLoginAt = time.UnixMilli(d.created).UTC(), fromMS(d.disabled), fromMS(d.lastLogin)
	var err error
	if u.Groups, err = store.DecodeNames(d.groups); err != nil {
		return account.User{}, fmt.Errorf("store: groups of %s: %w", u.Name, err)
	}
	if len(d.handle) > 0 {
		u.Handle = d.handle
	}
	u.MustChangePassword = d.mustChange != 0
	return u, nil
}

// ScanUser reads a row of UserColumns.
func ScanUser(r Row) (account.User, error) {
	var d UserDest
	if err := r.Scan(d.Dest()...); err != nil {
		return account.User{}, err
	}
	return d.User()
}

// UserByName finds an account by name, or account.ErrUserNotFound.
func UserByName(ctx context.Context, q Querier, name string) (account.User, error) {
	u, err := ScanUser(q.QueryRow(ctx, `SELECT `+UserColumns+` FROM users WHERE name = ?`, name))
	if errors.Is(err, ErrNoRows) {
		return account.User{}, fmt.Errorf("%w: %s", account.ErrUserNotFound, name)
	}
	if err != nil {
		return account.User{}, fmt.Errorf("store: look up user: %w", err)
	}
	return u, nil
}

// UserByIdentity finds a single sign-on account by its identity provider
// and subject, or account.ErrUserNotFound.
func UserByIdentity(ctx context.Context, q Querier, issuer, subject string) (account.User, error) {
	u, err := ScanUser(q.QueryRow(ctx, `SELECT `+UserColumns+` FROM users
		WHERE kind = 'oidc' AND issuer = ? AND subject = ?`, issuer, subject))
	if errors.Is(err, ErrNoRows) {
		return account.User{}, fmt.Errorf("%w: %s at %s", account.ErrUserNotFound, subject, issuer)
	}
	if err != nil {
		return account.User{}, fmt.Errorf("store: look up user by identity: %w", err)
	}
	return u, nil
}

// Users lists the accounts that where (with its args) selects, by name.
func Users(ctx context.Context, q Querier, where string, args ...any) ([]account.User, error) {
	rows, err := q.Query(ctx, `SELECT `+UserColumns+` FROM users `+where+` ORDER BY name`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list users: %w", err)
	}
	defer rows.Close()
	var out []account.User
	for rows.Next() {
		u, err := ScanUser(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list users: %w", err)
	}
	return out, nil
}

// InsertSession stores a new session of s.User.Name, first ending (at
// s.CreatedAt, as a logout does) that account's oldest live sessions beyond
// the newest account.MaxSessionsPerAccount-1, and returns the id hashes of
// those it ended.
func InsertSession(ctx context.Context, q Querier, s account.Session) ([]string, error) {
	rows, err := q.Query(ctx, `UPDATE sessions SET revoked_at = ?, revoke_reason = ?
		WHERE user_name = ? AND revoked_at IS NULL AND id_hash NOT IN (SELECT id_hash FROM sessions
			WHERE user_name = ? AND revoked_at IS NULL ORDER BY created_at DESC, id_hash DESC LIMIT ?)
		RETURNING id_hash`,
		ms(s.CreatedAt), account.SessionLimitReason, s.User.Name, s.User.Name, account.MaxSessionsPerAccount-1)
	if err != nil {
		return nil, fmt.Errorf("store: end the oldest sessions of %s: %w", s.User.Name, err)
	}
	defer rows.Close()
	var ended []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("store: end the oldest sessions of %s: %w", s.User.Name, err)
		}
		ended = append(ended, id)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: end the oldest sessions of %s: %w", s.User.Name, err)
	}
	rows.Close()
	method := s.Method
	if method == "" {
		method = account.MethodPassword
	}
	if _, err := q.Exec(ctx, `INSERT INTO sessions (id_hash, user_name, csrf, created_at, last_seen, method, id_token)
		VALUES (?,?,?,?,?,?,?)`, s.IDHash, s.User.Name, s.CSRF, ms(s.CreatedAt), ms(s.LastSeen), method, s.IDToken); err != nil {
		return nil, fmt.Errorf("store: insert session: %w", err)
	}
	return ended, nil
}
