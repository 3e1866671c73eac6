package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/store"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// Accounts adapts DB to account.Store: console accounts, their sessions,
// API tokens and the console's secrets, shared by every replica.
type Accounts struct{ d *DB }

// Accounts returns the accounts' view of the database.
func (d *DB) Accounts() Accounts { return Accounts{d} }

var _ account.Store = Accounts{}

// Update runs fn in one write transaction and commits when fn returns nil.
func (a Accounts) Update(ctx context.Context, fn func(account.Tx) error) error {
	return a.d.update(ctx, func(t *txn) error { return fn(t) })
}

// userByName finds an account by name, or account.ErrUserNotFound.
func userByName(ctx context.Context, q querier, name string) (account.User, error) {
	return sqlq.UserByName(ctx, shared{q}, name)
}

// User finds an account by name.
func (a Accounts) User(ctx context.Context, name string) (account.User, error) {
	return userByName(ctx, a.d.pool, name)
}

// Users lists every account by name.
func (a Accounts) Users(ctx context.Context) ([]account.User, error) {
	return sqlq.Users(ctx, shared{a.d.pool}, ``)
}

var sessionColumns = `s.id_hash, s.csrf, s.created_at, s.last_seen, s.revoked_at, COALESCE(s.revoke_reason, ''),
	s.method, s.id_token, ` + sqlq.UserColumnsOf("u")

func scanSession(r rowScanner) (account.Session, error) {
	var s account.Session
	var created, seen int64
	var revoked *int64
	var d sqlq.UserDest
	dest := append([]any{&s.IDHash, &s.CSRF, &created, &seen, &revoked, &s.RevokeReason, &s.Method, &s.IDToken}, d.Dest()...)
	if err := r.Scan(dest...); err != nil {
		return account.Session{}, err
	}
	s.CreatedAt, s.LastSeen, s.RevokedAt = time.UnixMilli(created).UTC(), time.UnixMilli(seen).UTC(), fromMS(revoked)
	u, err := d.User()
	if err != nil {
		return account.Session{}, err
	}
	s.User = u
	return s, nil
}

// Session finds a session, live or ended, with its user.
func (a Accounts) Session(ctx context.Context, idHash string) (account.Session, error) {
	s, err := scanSession(a.d.pool.QueryRow(ctx, `SELECT `+sessionColumns+`
		FROM sessions s JOIN users u ON u.name = s.user_name WHERE s.id_hash = $1`, idHash))
	if errors.Is(err, pgx.ErrNoRows) {
		return account.Session{}, account.ErrSessionNotFound
	}
	if err != nil {
		return account.Session{}, classify(fmt.Errorf("pgstore: look up session: %w", err))
	}
	return s, nil
}

// Sessions looks up many sessions at once, for the sweep of open sockets.
func (a Accounts) Sessions(ctx context.Context, idHashes []string) (map[string]account.Session, error) {
	out := make(map[string]account.Session, len(idHashes))
	for len(idHashes) > 0 {
		batch := idHashes[:min(len(idHashes), 1000)]
		idHashes = idHashes[len(batch):]
		rows, err := a.d.pool.Query(ctx, `SELECT `+sessionColumns+`
			FROM sessions s JOIN users u ON u.name = s.user_name WHERE s.id_hash = ANY($1)`, batch)
		if err != nil {
			return nil, classify(fmt.Errorf("pgstore: look up sessions: %w", err))
		}
		for rows.Next() {
			s, err := scanSession(rows)
			if err != nil {
				rows.Close()
				return nil, classify(err)
			}
			out[s.IDHash] = s
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return nil, classify(err)
		}
	}
	return out, nil
}

// TokenByHash finds a live token by its secret's hash.
func (a Accounts) TokenByHash(ctx context.Context, hash string) (account.Token, error) {
	t, err := scanToken(a.d.pool.QueryRow(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = $1 AND revoked_at IS NULL`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return account.Token{}, account.ErrTokenNotFound
	}
	if err != nil {
		return account.Token{}, classify(fmt.Errorf("pgstore: look up token: %w", err))
	}
	return t, nil
}

const tokenColumns = `id, actor, audience, note, owners, created_at, revoked_at`

func scanToken(r rowScanner) (account.Token, error) {
	var t account.Token
	var note []byte
	var owners string
	var created int64
	var revoked *int64
	if err := r.Scan(&t.ID, &t.Actor, &t.Audience, &note, &owners, &created, &revoked); err != nil {
		return account.Token{}, err
	}
	var err error
	if t.Owners, err = store.DecodeNames(owners); err != nil {
		return account.Token{}, fmt.Errorf("pgstore: owners of token %s: %w", t.ID, err)
	}
	t.Note, t.CreatedAt, t.RevokedAt = string(note), time.UnixMilli(created).UTC(), fromMS(revoked)
	return t, nil
}

// Tokens lists every token, newest first.
func (a Accounts) Tokens(ctx context.Context) ([]account.Token, error) {
	rows, err := a.d.pool.Query(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: list tokens: %w", err))
	}
	defer rows.Close()
	var out []account.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, t)
	}
	return out, classify(rows.Err())
}

// The account half of txn: account.Tx.

func (t *txn) User(name string) (account.User, error) { return userByName(t.ctx, t.tx, name) }

func (t *txn) InsertUser(u account.User) error {
	kind := u.Kind
	if kind == "" {
		kind = account.KindLocal
	}
	var issuer, subject, lastLogin any
	if kind == account.KindOIDC {
		issuer, subject = u.Issuer, u.Subject
	}
	if !u.LastLoginAt.IsZero() {
		lastLogin = ms(u.LastLoginAt)
	}
	groups, err := store.EncodeNames(u.Groups)
	if err != nil {
		return err
	}
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO users (name, role, password_hash, created_at, kind, issuer, subject,
		short_name, display_name, email, groups, last_login_at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11,$12)`,
		u.Name, string(u.Role), u.PasswordHash, ms(u.CreatedAt), string(kind), issuer, subject,
		u.ShortName, []byte(u.DisplayName), []byte(u.Email), groups, lastLogin); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
			return fmt.Errorf("%w: %s", account.ErrUserExists, u.Name)
		}
		return fmt.Errorf("pgstore: insert user: %w", err)
	}
	return nil
}

func (t *txn) SetPassword(name, hash string, mustChange bool) error {
	must := 0
	if mustChange {
		must = 1
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE users SET password_hash = $1, must_change_password = $2 WHERE name = $3`, hash, must, name)
	if err != nil {
		return fmt.Errorf("pgstore: set password: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s", account.ErrUserNotFound, name)
	}
	return nil
}

func (t *txn) DisableUser(name string, at time.Time) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE users SET disabled_at = $1 WHERE name = $2 AND disabled_at IS NULL`, ms(at), name)
	if err != nil {
		return fmt.Errorf("pgstore: disable user: %w", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	var exists int
	if err := t.tx.QueryRow(t.ctx, `SELECT COUNT(*) FROM users WHERE name = $1`, name).Scan(&exists); err != nil {
		return err
	}
	if exists == 0 {
		return fmt.Errorf("%w: %s", account.ErrUserNotFound, name)
	}
	return fmt.Errorf("%w: %s", account.ErrUserDisabled, name)
}

func (t *txn) RevokeUserSessions(user, reason string, at time.Time) (int64, error) {
	tag, err := t.tx.Exec(t.ctx, `UPDATE sessions SET revoked_at = $1, revoke_reason = $2 WHERE user_name = $3 AND revoked_at IS NULL`,
		ms(at), reason, user)
	if err != nil {
		return 0, fmt.Errorf("pgstore: revoke sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}

func (t *txn) InsertSession(s account.Session) ([]string, error) {
	return sqlq.InsertSession(t.ctx, shared{t.tx}, s)
}

func (t *txn) RecordLogin(user string, at time.Time) error {
	if _, err := t.tx.Exec(t.ctx, `UPDATE users SET last_login_at = $1 WHERE name = $2`, ms(at), user); err != nil {
		return fmt.Errorf("pgstore: record the login of %s: %w", user, err)
	}
	return nil
}

func (t *txn) TouchSession(idHash string, at time.Time) error {
	_, err := t.tx.Exec(t.ctx, `UPDATE sessions SET last_seen = GREATEST(last_seen, $1) WHERE id_hash = $2 AND revoked_at IS NULL`,
		ms(at), idHash)
	return err
}

func (t *txn) RevokeSession(idHash, reason string, at time.Time) error {
	_, err := t.tx.Exec(t.ctx, `UPDATE sessions SET revoked_at = $1, revoke_reason = $2 WHERE id_hash = $3 AND revoked_at IS NULL`,
		ms(at), reason, idHash)
	return err
}

func (t *txn) PruneSessions(cutoff time.Time) (int64, error) {
	tag, err := t.tx.Exec(t.ctx, `DELETE FROM sessions WHERE created_at < $1`, ms(cutoff))
	if err != nil {
		return 0, fmt.Errorf("pgstore: prune sessions: %w", err)
	}
	return tag.RowsAffected(), nil
}

func (t *txn) InsertToken(tok account.Token, hash string) error {
	owners, err := store.EncodeNames(tok.Owners)
	if err != nil {
		return err
	}
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO tokens (id, hash, actor, audience, note, owners, created_at) VALUES ($1,$2,$3,$4,$5,$6,$7)`,
		tok.ID, hash, tok.Actor, tok.Audience, []byte(tok.Note), owners, ms(tok.CreatedAt)); err != nil {
		return fmt.Errorf("pgstore: insert token: %w", err)
	}
	return nil
}

func (t *txn) RevokeToken(id string, at time.Time) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL`, ms(at), id)
	if err != nil {
		return fmt.Errorf("pgstore: revoke token: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s", account.ErrTokenNotFound, id)
	}
	return nil
}

func (t *txn) Secret(name string) ([]byte, error) {
	var out []byte
	err := t.tx.QueryRow(t.ctx, `SELECT value FROM console_secrets WHERE name = $1`, name).Scan(&out)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, account.ErrSecretNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("pgstore: read console secret: %w", err)
	}
	return out, nil
}

func (t *txn) InsertSecret(name string, value []byte) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO console_secrets (name, value) VALUES ($1, $2)`, name, value)
	return err
}

// AppendAudit appends one entry to the audit chain in a transaction of its
// own, for changes recorded outside the queue and the accounts (key
// rotation).
func (d *DB) AppendAudit(ctx context.Context, e *audit.Entry) error {
	return d.update(ctx, func(t *txn) error { return t.append(e) })
}
