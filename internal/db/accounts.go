package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/audit"
	"github.com/countersign/countersign/internal/store"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// Accounts adapts DB to account.Store: console accounts, their sessions,
// API tokens and the console's secrets.
type Accounts struct{ d *DB }

// Accounts returns the accounts' view of the database.
func (d *DB) Accounts() Accounts { return Accounts{d} }

var _ account.Store = Accounts{}

// Update runs fn in one BEGIN IMMEDIATE transaction, after the identity
// check every write makes, and commits when fn returns nil.
func (a Accounts) Update(ctx context.Context, fn func(account.Tx) error) error {
	return a.d.update(ctx, func(ctx context.Context, tx *writeTx) error {
		return runTx(&storeTx{ctx: ctx, tx: tx, db: a.d}, fn)
	})
}

// userByName finds an account by name, or account.ErrUserNotFound.
func userByName(ctx context.Context, q querier, name string) (account.User, error) {
	return sqlq.UserByName(ctx, shared{q}, name)
}

// User finds an account by name.
func (a Accounts) User(ctx context.Context, name string) (account.User, error) {
	return userByName(ctx, a.d.sql, name)
}

// Users lists every account by name.
func (a Accounts) Users(ctx context.Context) ([]account.User, error) {
	return sqlq.Users(ctx, shared{a.d.sql}, ``)
}

// sessionFields are a session's own columns under alias s, scanned by
// sessionDest; sessionColumns adds its user's.
const sessionFields = `s.id_hash, s.csrf, s.created_at, s.last_seen, s.revoked_at, COALESCE(s.revoke_reason, ''),
	s.method, s.id_token`

var sessionColumns = sessionFields + `, ` + sqlq.UserColumnsOf("u")

// sessionDest is where a row of sessionFields is scanned into s; done
// converts the times once the row is scanned.
func sessionDest(s *account.Session) (dest []any, done func()) {
	var created, seen int64
	var revoked sql.NullInt64
	return []any{&s.IDHash, &s.CSRF, &created, &seen, &revoked, &s.RevokeReason, &s.Method, &s.IDToken}, func() {
		s.CreatedAt, s.LastSeen, s.RevokedAt = time.UnixMilli(created).UTC(), time.UnixMilli(seen).UTC(), fromMS(revoked)
	}
}

func scanSession(r rowScanner) (account.Session, error) {
	var s account.Session
	var d sqlq.UserDest
	dest, done := sessionDest(&s)
	if err := r.Scan(append(dest, d.Dest()...)...); err != nil {
		return account.Session{}, err
	}
	done()
	u, err := d.User()
	if err != nil {
		return account.Session{}, err
	}
	s.User = u
	return s, nil
}

// Session finds a session, live or ended, with its user: from memory
// while no account, session or token has been written since it was read
// (authcache.go), else from the database.
func (a Accounts) Session(ctx context.Context, idHash string) (account.Session, error) {
	return a.d.cached.sessions.through(a.d.auth, idHash, cloneSession,
		func() (account.Session, error) { return a.readSession(ctx, idHash) },
		func(s account.Session, tag uint64) { a.d.cached.users.put(s.User.Name, cloneUser(s.User), tag) })
}

// readSession reads a session and its user.
//
// The session and then its user are read by two statements: SQLite
// prepares a statement that joins them again at every execution (it may
// plan a join anew for the bound values), which costs more than a second
// lookup, on the path of every request made with a session. The user is
// read after the session, so it is never older than the session read.
func (a Accounts) readSession(ctx context.Context, idHash string) (account.Session, error) {
	var s account.Session
	var user string
	dest, done := sessionDest(&s)
	err := a.d.sql.QueryRowContext(ctx, `SELECT `+sessionFields+`, s.user_name FROM sessions s WHERE s.id_hash = ?`, idHash).
		Scan(append(dest, &user)...)
	if errors.Is(err, sql.ErrNoRows) {
		return account.Session{}, account.ErrSessionNotFound
	}
	if err != nil {
		return account.Session{}, classify(fmt.Errorf("db: look up session: %w", err))
	}
	done()
	if s.User, err = userByName(ctx, a.d.sql, user); err != nil {
		if errors.Is(err, account.ErrUserNotFound) {
			// sessions.user_name references users (name): not reachable.
			return account.Session{}, fmt.Errorf("db: session of a missing user: %w", err)
		}
		return account.Session{}, err
	}
	return s, nil
}

// Sessions looks up many sessions at once (in batches of 200), for the
// sweep of open sockets.
func (a Accounts) Sessions(ctx context.Context, idHashes []string) (map[string]account.Session, error) {
	out := make(map[string]account.Session, len(idHashes))
	for len(idHashes) > 0 {
		batch := idHashes[:min(len(idHashes), 200)]
		idHashes = idHashes[len(batch):]
		args := make([]any, len(batch))
		for i, h := range batch {
			args[i] = h
		}
		rows, err := a.d.sql.QueryContext(ctx, `SELECT `+sessionColumns+`
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

// TokenByHash finds a live token by its secret's hash: from memory while
// no account, session or token has been written since it was read
// (authcache.go), else from the database.
func (a Accounts) TokenByHash(ctx context.Context, hash string) (account.Token, error) {
	return a.d.cached.tokens.through(a.d.auth, hash, cloneToken,
		func() (account.Token, error) { return a.readToken(ctx, hash) }, nil)
}

func (a Accounts) readToken(ctx context.Context, hash string) (account.Token, error) {
	t, err := scanToken(a.d.sql.QueryRowContext(ctx, `SELECT `+tokenColumns+` FROM tokens WHERE hash = ? AND revoked_at IS NULL`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return account.Token{}, account.ErrTokenNotFound
	}
	if err != nil {
		return account.Token{}, classify(fmt.Errorf("db: look up token: %w", err))
	}
	return t, nil
}

const tokenColumns = `id, actor, audience, note, owners, created_at, revoked_at`

func scanToken(r rowScanner) (account.Token, error) {
	var t account.Token
	var owners string
	var created int64
	var revoked sql.NullInt64
	if err := r.Scan(&t.ID, &t.Actor, &t.Audience, &t.Note, &owners, &created, &revoked); err != nil {
		return account.Token{}, err
	}
	var err error
	if t.Owners, err = store.DecodeNames(owners); err != nil {
		return account.Token{}, fmt.Errorf("db: owners of token %s: %w", t.ID, err)
	}
	t.CreatedAt, t.RevokedAt = time.UnixMilli(created).UTC(), fromMS(revoked)
	return t, nil
}

// Tokens lists every token, newest first.
func (a Accounts) Tokens(ctx context.Context) ([]account.Token, error) {
	rows, err := a.d.sql.QueryContext(ctx, `SELECT `+tokenColumns+` FROM tokens ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, classify(fmt.Errorf("db: list tokens: %w", err))
	}
	defer rows.Close()
	var out []account.Token
	for rows.Next() {
		t, err := scanToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

// The account half of storeTx: account.Tx.

// User reads an account in the transaction: from memory while no account,
// session or token has been written since it was read (authcache.go),
// which no write can have begun while this transaction holds the write
// lock unless it is this one's own.
func (t *storeTx) User(name string) (account.User, error) {
	return t.db.cached.users.through(t.db.auth, name, cloneUser,
		func() (account.User, error) { return userByName(t.ctx, t.tx, name) }, nil)
}

func (t *storeTx) SetPassword(name, hash string, mustChange bool) error {
	must := 0
	if mustChange {
		must = 1
	}
	res, err := t.tx.ExecContext(t.ctx, `UPDATE users SET password_hash = ?, must_change_password = ? WHERE name = ?`, hash, must, name)
	if err != nil {
		return fmt.Errorf("db: set password: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return fmt.Errorf("%w: %s", account.ErrUserNotFound, name)
	}
	return nil
}

func (t *storeTx) InsertUser(u account.User) error {
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
	if _, err := t.tx.ExecContext(t.ctx, `INSERT INTO users (name, role, password_hash, created_at, kind, issuer, subject,
		short_name, display_name, email, groups, last_login_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)`,
		u.Name, string(u.Role), u.PasswordHash, ms(u.CreatedAt), string(kind), issuer, subject,
		u.ShortName, u.DisplayName, u.Email, groups, lastLogin); err != nil {
		var se sqlite3.Error
		if errors.As(err, &se) && (se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey || se.ExtendedCode == sqlite3.ErrConstraintUnique) {
			return fmt.Errorf("%w: %s", account.ErrUserExists, u.Name)
		}
		return fmt.Errorf("db: insert user: %w", err)
	}
	return nil
}

func (t *storeTx) UserByIdentity(issuer, subject string) (account.User, error) {
	return sqlq.UserByIdentity(t.ctx, shared{t.tx}, issuer, subject)
}

func (t *storeTx) UsersNamed(name string) ([]account.User, error) {
	return sqlq.Users(t.ctx, shared{t.tx}, `WHERE name = ? COLLATE NOCASE OR (short_name <> '' AND short_name = ? COLLATE NOCASE)`, name, name)
}

func (t *storeTx) UpdateOIDCUser(u account.User) error {
	groups, err := store.EncodeNames(u.Groups)
	if err != nil {
		return err
	}
	// A user left without a role keeps its last role in the column, which
	// only admits real roles; no_role_since says it has none.
	var noRole any
	role := string(u.Role)
	if u.Role == "" {
		noRole = ms(u.LastLoginAt)
		role = ""
	}
	res, err := t.tx.ExecContext(t.ctx, `UPDATE users SET role = CASE WHEN ? = '' THEN role ELSE ? END,
		no_role_since = CASE WHEN ? IS NULL THEN NULL ELSE COALESCE(no_role_since, ?) END,
		short_name = ?, display_name = ?, email = ?, groups = ?, last_login_at = ?
		WHERE name = ? AND kind = 'oidc'`,
		role, role, noRole, noRole, u.ShortName, u.DisplayName, u.Email, groups, ms(u.LastLoginAt), u.Name)
	if err != nil {
		return fmt.Errorf("db: update user %s: %w", u.Name, err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s", account.ErrUserNotFound, u.Name)
	}
	return nil
}

func (t *storeTx) SetUserHandle(name string, handle []byte) error {
	res, err := t.tx.ExecContext(t.ctx, `UPDATE users SET webauthn_handle = ? WHERE name = ?`, handle, name)
	if err != nil {
		return fmt.Errorf("db: set user handle: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s", account.ErrUserNotFound, name)
	}
	return nil
}

func (t *storeTx) DisableUser(name string, at time.Time) error {
	res, err := t.tx.ExecContext(t.ctx, `UPDATE users SET disabled_at = ? WHERE name = ? AND disabled_at IS NULL`, ms(at), name)
	if err != nil {
		return fmt.Errorf("db: disable user: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 1 {
		return nil
	}
	var exists int
	if err := t.tx.QueryRowContext(t.ctx, `SELECT COUNT(*) FROM users WHERE name = ?`, name).Scan(&exists); err != nil {
		return err
	}
	if exists == 0 {
		return fmt.Errorf("%w: %s", account.ErrUserNotFound, name)
	}
	return fmt.Errorf("%w: %s", account.ErrUserDisabled, name)
}

func (t *storeTx) RevokeUserSessions(user, reason string, at time.Time) (int64, error) {
	res, err := t.tx.ExecContext(t.ctx, `UPDATE sessions SET revoked_at = ?, revoke_reason = ? WHERE user_name = ? AND revoked_at IS NULL`,
		ms(at), reason, user)
	if err != nil {
		return 0, fmt.Errorf("db: revoke sessions: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

func (t *storeTx) InsertSession(s account.Session) ([]string, error) {
	return sqlq.InsertSession(t.ctx, shared{t.tx}, s)
}

func (t *storeTx) RecordLogin(user string, at time.Time) error {
	if _, err := t.tx.ExecContext(t.ctx, `UPDATE users SET last_login_at = ? WHERE name = ?`, ms(at), user); err != nil {
		return fmt.Errorf("db: record the login of %s: %w", user, err)
	}
	return nil
}

func (t *storeTx) TouchSession(idHash string, at time.Time) error {
	_, err := t.tx.ExecContext(t.ctx, `UPDATE sessions SET last_seen = MAX(last_seen, ?) WHERE id_hash = ? AND revoked_at IS NULL`,
		ms(at), idHash)
	return err
}

func (t *storeTx) RevokeSession(idHash, reason string, at time.Time) error {
	_, err := t.tx.ExecContext(t.ctx, `UPDATE sessions SET revoked_at = ?, revoke_reason = ? WHERE id_hash = ? AND revoked_at IS NULL`,
		ms(at), reason, idHash)
	return err
}

func (t *storeTx) PruneSessions(cutoff time.Time) (int64, error) {
	res, err := t.tx.ExecContext(t.ctx, `DELETE FROM sessions WHERE created_at < ?`, ms(cutoff))
	if err != nil {
		return 0, fmt.Errorf("db: prune sessions: %w", err)
	}
	n, _ := res.RowsAffected()
	return n, nil
}

func (t *storeTx) InsertToken(tok account.Token, hash string) error {
	owners, err := store.EncodeNames(tok.Owners)
	if err != nil {
		return err
	}
	if _, err := t.tx.ExecContext(t.ctx, `INSERT INTO tokens (id, hash, actor, audience, note, owners, created_at) VALUES (?,?,?,?,?,?,?)`,
		tok.ID, hash, tok.Actor, tok.Audience, tok.Note, owners, ms(tok.CreatedAt)); err != nil {
		return fmt.Errorf("db: insert token: %w", err)
	}
	return nil
}

func (t *storeTx) RevokeToken(id string, at time.Time) error {
	res, err := t.tx.ExecContext(t.ctx, `UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, ms(at), id)
	if err != nil {
		return fmt.Errorf("db: revoke token: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s", account.ErrTokenNotFound, id)
	}
	return nil
}

func (t *storeTx) Secret(name string) ([]byte, error) {
	var out []byte
	err := t.tx.QueryRowContext(t.ctx, `SELECT value FROM console_secrets WHERE name = ?`, name).Scan(&out)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, account.ErrSecretNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("db: read console secret: %w", err)
	}
	return out, nil
}

func (t *storeTx) InsertSecret(name string, value []byte) error {
	_, err := t.tx.ExecContext(t.ctx, `INSERT INTO console_secrets (name, value) VALUES (?, ?)`, name, value)
	return err
}

// AppendAudit appends one entry to the audit chain in a transaction of its
// own, for changes recorded outside the queue and the accounts (key
// rotation).
func (d *DB) AppendAudit(ctx context.Context, e *audit.Entry) error {
	return d.update(ctx, func(ctx context.Context, tx *writeTx) error { return d.appendAudit(ctx, tx, e) })
}
