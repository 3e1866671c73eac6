package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/oneshot"
	"github.com/countersign/countersign/internal/queue"
	"github.com/countersign/countersign/internal/store"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// Single sign-on users, passkeys and the oneshots (logins and passkey
// prompts under way): the identity half of account.Store and account.Tx.

func (t *txn) UserByIdentity(issuer, subject string) (account.User, error) {
	return sqlq.UserByIdentity(t.ctx, shared{t.tx}, issuer, subject)
}

// UsersNamed compares ignoring ASCII case: account names and short names
// are ASCII by the account name rule.
func (t *txn) UsersNamed(name string) ([]account.User, error) {
	return sqlq.Users(t.ctx, shared{t.tx}, `WHERE lower(name) = lower(?) OR (short_name <> '' AND lower(short_name) = lower(?))`, name, name)
}

func (t *txn) UpdateOIDCUser(u account.User) error {
	groups, err := store.EncodeNames(u.Groups)
	if err != nil {
		return err
	}
	// A user left without a role keeps its last role in the column, which
	// only admits real roles; no_role_since says it has none.
	var noRole *int64
	if u.Role == "" {
		v := ms(u.LastLoginAt)
		noRole = &v
	}
	tag, err := t.tx.Exec(t.ctx, `UPDATE users SET role = CASE WHEN $1 = '' THEN role ELSE $1 END,
		no_role_since = CASE WHEN $2::BIGINT IS NULL THEN NULL ELSE COALESCE(no_role_since, $2::BIGINT) END,
		short_name = $3, display_name = $4, email = $5, groups = $6, last_login_at = $7
		WHERE name = $8 AND kind = 'oidc'`,
		string(u.Role), noRole, u.ShortName, []byte(u.DisplayName), []byte(u.Email), groups, ms(u.LastLoginAt), u.Name)
	if err != nil {
		return fmt.Errorf("pgstore: update user %s: %w", u.Name, err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s", account.ErrUserNotFound, u.Name)
	}
	return nil
}

func (t *txn) SetUserHandle(name string, handle []byte) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE users SET webauthn_handle = $1 WHERE name = $2`, handle, name)
	if err != nil {
		return fmt.Errorf("pgstore: set user handle: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s", account.ErrUserNotFound, name)
	}
	return nil
}

const passkeyColumns = `id, user_name, name, public_key, sign_count, record, created_at, last_used_at`

func scanPasskey(r rowScanner) (account.Passkey, error) {
	var p account.Passkey
	var count, created int64
	var record string
	var used *int64
	if err := r.Scan(&p.ID, &p.User, &p.Name, &p.PublicKey, &count, &record, &created, &used); err != nil {
		return account.Passkey{}, err
	}
	p.SignCount, p.Record = uint32(count), []byte(record)
	p.CreatedAt, p.LastUsedAt = time.UnixMilli(created).UTC(), fromMS(used)
	return p, nil
}

func passkeysOf(ctx context.Context, q querier, user string) ([]account.Passkey, error) {
	rows, err := q.Query(ctx, `SELECT `+passkeyColumns+` FROM passkeys WHERE user_name = $1 ORDER BY created_at, id`, user)
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: list passkeys: %w", err))
	}
	defer rows.Close()
	var out []account.Passkey
	for rows.Next() {
		p, err := scanPasskey(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, p)
	}
	return out, classify(rows.Err())
}

// Passkeys lists a user's passkeys, oldest first.
func (a Accounts) Passkeys(ctx context.Context, user string) ([]account.Passkey, error) {
	return passkeysOf(ctx, a.d.pool, user)
}

func (t *txn) Passkeys(user string) ([]account.Passkey, error) { return passkeysOf(t.ctx, t.tx, user) }

func (t *txn) InsertPasskey(p account.Passkey) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO passkeys (`+passkeyColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7,NULL)`,
		p.ID, p.User, p.Name, p.PublicKey, int64(p.SignCount), string(p.Record), ms(p.CreatedAt))
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "23505" { // unique_violation
			return account.ErrPasskeyTaken
		}
		return fmt.Errorf("pgstore: insert passkey: %w", err)
	}
	return nil
}

func (t *txn) DeletePasskey(user string, id []byte) (account.Passkey, error) {
	p, err := scanPasskey(t.tx.QueryRow(t.ctx, `DELETE FROM passkeys WHERE id = $1 AND user_name = $2 RETURNING `+passkeyColumns, id, user))
	if errors.Is(err, pgx.ErrNoRows) {
		return account.Passkey{}, account.ErrPasskeyNotFound
	}
	if err != nil {
		return account.Passkey{}, fmt.Errorf("pgstore: delete passkey: %w", err)
	}
	return p, nil
}

func (t *txn) UsePasskey(user string, id []byte, from, to uint32, record []byte, at time.Time) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE passkeys SET sign_count = $1, record = $2, last_used_at = $3
		WHERE id = $4 AND user_name = $5 AND sign_count = $6`, int64(to), string(record), ms(at), id, user, int64(from))
	if err != nil {
		return fmt.Errorf("pgstore: use passkey: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return queue.ErrPasskeyChanged
	}
	return nil
}

func (t *txn) InsertOneshot(o account.Oneshot) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO oneshots (kind, key_hash, owner, value, expires_at) VALUES ($1,$2,$3,$4,$5)`,
		o.Kind, o.KeyHash, o.Owner, o.Value, ms(o.Expires))
	if err != nil {
		return fmt.Errorf("pgstore: keep %s under way: %w", o.Kind, err)
	}
	return nil
}

// TakeOneshot deletes the row and returns it in one statement: of two
// replicas taking the same value at once, the second finds it gone.
func (t *txn) TakeOneshot(kind, keyHash string) (account.Oneshot, error) {
	o := account.Oneshot{Kind: kind, KeyHash: keyHash}
	var exp int64
	err := t.tx.QueryRow(t.ctx, `DELETE FROM oneshots WHERE kind = $1 AND key_hash = $2 RETURNING value, expires_at`,
		kind, keyHash).Scan(&o.Value, &exp)
	if errors.Is(err, pgx.ErrNoRows) {
		return account.Oneshot{}, oneshot.ErrNotFound
	}
	if err != nil {
		return account.Oneshot{}, fmt.Errorf("pgstore: take %s under way: %w", kind, err)
	}
	o.Expires = time.UnixMilli(exp).UTC()
	return o, nil
}

func (t *txn) CountOneshots(kind string) (int, error) {
	var n int
	if err := t.tx.QueryRow(t.ctx, `SELECT COUNT(*) FROM oneshots WHERE kind = $1`, kind).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count %s under way: %w", kind, err)
	}
	return n, nil
}

func (t *txn) TrimOneshots(kind, owner string, keep int) error {
	_, err := t.tx.Exec(t.ctx, `DELETE FROM oneshots WHERE kind = $1 AND owner = $2 AND key_hash NOT IN (
		SELECT key_hash FROM oneshots WHERE kind = $1 AND owner = $2 ORDER BY expires_at DESC, key_hash LIMIT $3)`,
		kind, owner, max(keep, 0))
	if err != nil {
		return fmt.Errorf("pgstore: trim %s under way: %w", kind, err)
	}
	return nil
}

func (t *txn) PruneOneshots(kind string, now time.Time) error {
	if _, err := t.tx.Exec(t.ctx, `DELETE FROM oneshots WHERE kind = $1 AND expires_at <= $2`, kind, ms(now)); err != nil {
		return fmt.Errorf("pgstore: prune %s under way: %w", kind, err)
	}
	return nil
}
