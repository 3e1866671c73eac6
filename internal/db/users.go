package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
)

// User is a console account.
type User struct {
	Name         string
	Role         account.Role
	PasswordHash string // argon2id PHC string
	CreatedAt    time.Time
	DisabledAt   time.Time // zero while the account is enabled
}

// Disabled reports whether the account may no longer log in.
func (u User) Disabled() bool { return !u.DisabledAt.IsZero() }

// Errors about accounts.
var (
	ErrUserNotFound = errors.New("db: no such user")
	ErrUserExists   = errors.New("db: a user with that name already exists")
	ErrUserDisabled = errors.New("db: the user is already disabled")
)

// AddUser creates an account with an already hashed password and records
// it on the audit trail in the same transaction.
func (d *DB) AddUser(ctx context.Context, name string, role account.Role, passwordHash, by, channel string) (User, error) {
	if err := account.CheckName(name); err != nil {
		return User{}, err
	}
	if _, err := account.ParseRole(string(role)); err != nil {
		return User{}, err
	}
	if _, _, _, err := account.ParseHash(passwordHash); err != nil {
		return User{}, err
	}
	u := User{Name: name, Role: role, PasswordHash: passwordHash, CreatedAt: d.now().UTC().Truncate(time.Millisecond)}
	err := d.update(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO users (name, role, password_hash, created_at) VALUES (?,?,?,?)`,
			u.Name, string(u.Role), u.PasswordHash, ms(u.CreatedAt)); err != nil {
			var se sqlite3.Error
			if errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey {
				return fmt.Errorf("%w: %s", ErrUserExists, name)
			}
			return fmt.Errorf("db: insert user: %w", err)
		}
		return appendAudit(ctx, tx, &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindUserAdded,
			Principal: by, Channel: channel, Details: map[string]any{"user": name, "role": string(role)}})
	})
	if err != nil {
		return User{}, err
	}
	return u, nil
}

const userColumns = `name, role, password_hash, created_at, disabled_at`

func scanUser(r rowScanner) (User, error) {
	var u User
	var role string
	var created int64
	var disabled sql.NullInt64
	if err := r.Scan(&u.Name, &role, &u.PasswordHash, &created, &disabled); err != nil {
		return User{}, err
	}
	u.Role = account.Role(role)
	u.CreatedAt, u.DisabledAt = time.UnixMilli(created).UTC(), fromMS(disabled)
	return u, nil
}

// UserByName returns an account, disabled or not.
func (d *DB) UserByName(ctx context.Context, name string) (User, error) {
	u, err := scanUser(d.sql.QueryRowContext(ctx, `SELECT `+userColumns+` FROM users WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return User{}, fmt.Errorf("%w: %s", ErrUserNotFound, name)
	}
	if err != nil {
		return User{}, classify(fmt.Errorf("db: look up user: %w", err))
	}
	return u, nil
}

// Users lists every account by name.
func (d *DB) Users(ctx context.Context) ([]User, error) {
	rows, err := d.sql.QueryContext(ctx, `SELECT `+userColumns+` FROM users ORDER BY name`)
	if err != nil {
		return nil, classify(fmt.Errorf("db: list users: %w", err))
	}
	defer rows.Close()
	var out []User
	for rows.Next() {
		u, err := scanUser(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, rows.Err()
}

// DisableUser stops an account from logging in and revokes every session
// it has, with the audit entry, in one transaction.
func (d *DB) DisableUser(ctx context.Context, name, by, channel string) error {
	now := d.now()
	return d.update(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE users SET disabled_at = ? WHERE name = ? AND disabled_at IS NULL`, ms(now), name)
		if err != nil {
			return fmt.Errorf("db: disable user: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			var exists int
			if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM users WHERE name = ?`, name).Scan(&exists); err != nil {
				return err
			}
			if exists == 0 {
				return fmt.Errorf("%w: %s", ErrUserNotFound, name)
			}
			return fmt.Errorf("%w: %s", ErrUserDisabled, name)
		}
		res, err = tx.ExecContext(ctx, `UPDATE sessions SET revoked_at = ?, revoke_reason = 'disabled' WHERE user_name = ? AND revoked_at IS NULL`,
			ms(now), name)
		if err != nil {
			return fmt.Errorf("db: revoke sessions: %w", err)
		}
		ended, _ := res.RowsAffected()
		return appendAudit(ctx, tx, &audit.Entry{Time: audit.FormatTime(now), Kind: audit.KindUserDisabled,
			Principal: by, Channel: channel, Details: map[string]any{"user": name, "sessions_ended": ended}})
	})
}
