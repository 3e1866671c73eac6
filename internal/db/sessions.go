package db

import (
	"context"
	"crypto/rand"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/account"
)

// Session is a console login: the row behind the browser's cookie.
type Session struct {
	IDHash       string // SHA-256 of the random id the cookie carries
	User         User
	CSRF         string
	CreatedAt    time.Time
	LastSeen     time.Time
	RevokedAt    time.Time // zero while the session is live
	RevokeReason string
}

// Revoked reports whether the session was ended (logout, disabled account,
// timeout).
func (s Session) Revoked() bool { return !s.RevokedAt.IsZero() }

// ErrSessionNotFound is an unknown session id.
var ErrSessionNotFound = errors.New("db: no such session")

// CreateSession records a new session for user.
func (d *DB) CreateSession(ctx context.Context, idHash, user, csrf string, now time.Time) error {
	return d.update(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sessions (id_hash, user_name, csrf, created_at, last_seen) VALUES (?,?,?,?,?)`,
			idHash, user, csrf, ms(now), ms(now)); err != nil {
			return fmt.Errorf("db: insert session: %w", err)
		}
		return nil
	})
}

const sessionColumns = `s.id_hash, s.csrf, s.created_at, s.last_seen, s.revoked_at, COALESCE(s.revoke_reason, ''),
	u.name, u.role, u.password_hash, u.created_at, u.disabled_at`

func scanSession(r rowScanner) (Session, error) {
	var s Session
	var created, seen int64
	var revoked sql.NullInt64
	var role string
	var ucreated int64
	var disabled sql.NullInt64
	if err := r.Scan(&s.IDHash, &s.CSRF, &created, &seen, &revoked, &s.RevokeReason,
		&s.User.Name, &role, &s.User.PasswordHash, &ucreated, &disabled); err != nil {
		return Session{}, err
	}
	s.CreatedAt, s.LastSeen, s.RevokedAt = time.UnixMilli(created).UTC(), time.UnixMilli(seen).UTC(), fromMS(revoked)
	s.User.Role = account.Role(role)
	s.User.CreatedAt, s.User.DisabledAt = time.UnixMilli(ucreated).UTC(), fromMS(disabled)
	return s, nil
}

// Session returns a session with its account, revoked or not.
func (d *DB) Session(ctx context.Context, idHash string) (Session, error) {
	s, err := scanSession(d.sql.QueryRowContext(ctx, `SELECT `+sessionColumns+`
		FROM sessions s JOIN users u ON u.name = s.user_name WHERE s.id_hash = ?`, idHash))
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, ErrSessionNotFound
	}
	if err != nil {
		return Session{}, classify(fmt.Errorf("db: look up session: %w", err))
	}
	return s, nil
}

// Sessions returns the sessions among idHashes that exist, by id hash.
func (d *DB) Sessions(ctx context.Context, idHashes []string) (map[string]Session, error) {
	out := make(map[string]Session, len(idHashes))
	for len(idHashes) > 0 {
		batch := idHashes[:min(len(idHashes), 200)]
		idHashes = idHashes[len(batch):]
		args := make([]any, len(batch))
		for i, h := range batch {
			args[i] = h
		}
		rows, err := d.sql.QueryContext(ctx, `SELECT `+sessionColumns+`
			FROM sessions s JOIN users u ON u.name = s.user_name
			WHERE s.id_hash IN (?`+strings.Repeat(",?", len(batch)-1)+`)`, args...)
		if err != nil {
			return nil, classify(fmt.Errorf("db: look up sessions: %w", err))
		}
		for rows.Next() {
			s, err := scanSession(rows)
			if err != nil {
				rows.Close()
				return nil, err
			}
			out[s.IDHash] = s
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// TouchSession records activity on a live session.
func (d *DB) TouchSession(ctx context.Context, idHash string, now time.Time) error {
	return d.update(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE sessions SET last_seen = MAX(last_seen, ?) WHERE id_hash = ? AND revoked_at IS NULL`,
			ms(now), idHash)
		return err
	})
}

// RevokeSession ends a session; reason is logout, idle, expired or
// disabled. Revoking an ended session changes nothing.
func (d *DB) RevokeSession(ctx context.Context, idHash, reason string, now time.Time) error {
	return d.update(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `UPDATE sessions SET revoked_at = ?, revoke_reason = ? WHERE id_hash = ? AND revoked_at IS NULL`,
			ms(now), reason, idHash)
		return err
	})
}

// PruneSessions deletes sessions created before cutoff (past any absolute
// timeout) and returns how many it removed.
func (d *DB) PruneSessions(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	err := d.update(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM sessions WHERE created_at < ?`, ms(cutoff))
		if err != nil {
			return fmt.Errorf("db: prune sessions: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return n, err
}

// ConsoleSecret returns the random secret stored under name, creating one
// of size bytes on first use.
func (d *DB) ConsoleSecret(ctx context.Context, name string, size int) ([]byte, error) {
	var out []byte
	err := d.update(ctx, func(tx *sql.Tx) error {
		err := tx.QueryRowContext(ctx, `SELECT value FROM console_secrets WHERE name = ?`, name).Scan(&out)
		if err == nil {
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("db: read console secret: %w", err)
		}
		out = make([]byte, size)
		if _, err := rand.Read(out); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO console_secrets (name, value) VALUES (?, ?)`, name, out)
		return err
	})
	return out, err
}
