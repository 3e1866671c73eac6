package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/oneshot"
	"github.com/countersign/countersign/internal/queue"
)

// Passkeys and the oneshots (logins and passkey prompts under way): the
// identity half of account.Store and account.Tx.

const passkeyColumns = `id, user_name, name, public_key, sign_count, record, created_at, last_used_at`

func scanPasskey(r rowScanner) (account.Passkey, error) {
	var p account.Passkey
	var count, created int64
	var record string
	var used sql.NullInt64
	if err := r.Scan(&p.ID, &p.User, &p.Name, &p.PublicKey, &count, &record, &created, &used); err != nil {
		return account.Passkey{}, err
	}
	p.SignCount, p.Record = uint32(count), []byte(record)
	p.CreatedAt, p.LastUsedAt = time.UnixMilli(created).UTC(), fromMS(used)
	return p, nil
}

func passkeysOf(ctx context.Context, q querier, user string) ([]account.Passkey, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+passkeyColumns+` FROM passkeys WHERE user_name = ? ORDER BY created_at, id`, user)
	if err != nil {
		return nil, classify(fmt.Errorf("db: list passkeys: %w", err))
	}
	defer rows.Close()
	var out []account.Passkey
	for rows.Next() {
		p, err := scanPasskey(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// Passkeys lists a user's passkeys, oldest first.
func (a Accounts) Passkeys(ctx context.Context, user string) ([]account.Passkey, error) {
	return passkeysOf(ctx, a.d.sql, user)
}

func (t *storeTx) Passkeys(user string) ([]account.Passkey, error) {
	return passkeysOf(t.ctx, t.tx, user)
}

func (t *storeTx) InsertPasskey(p account.Passkey) error {
	_, err := t.tx.ExecContext(t.ctx, `INSERT INTO passkeys (`+passkeyColumns+`) VALUES (?,?,?,?,?,?,?,NULL)`,
		p.ID, p.User, p.Name, p.PublicKey, int64(p.SignCount), string(p.Record), ms(p.CreatedAt))
	if err != nil {
		var se sqlite3.Error
		if errors.As(err, &se) && se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey {
			return account.ErrPasskeyTaken
		}
		return fmt.Errorf("db: insert passkey: %w", err)
	}
	return nil
}

func (t *storeTx) DeletePasskey(user string, id []byte) (account.Passkey, error) {
	p, err := scanPasskey(t.tx.QueryRowContext(t.ctx, `SELECT `+passkeyColumns+` FROM passkeys WHERE id = ? AND user_name = ?`, id, user))
	if errors.Is(err, sql.ErrNoRows) {
		return account.Passkey{}, account.ErrPasskeyNotFound
	}
	if err != nil {
		return account.Passkey{}, fmt.Errorf("db: look up passkey: %w", err)
	}
	if _, err := t.tx.ExecContext(t.ctx, `DELETE FROM passkeys WHERE id = ? AND user_name = ?`, id, user); err != nil {
		return account.Passkey{}, fmt.Errorf("db: delete passkey: %w", err)
	}
	return p, nil
}

func (t *storeTx) UsePasskey(user string, id []byte, from, to uint32, record []byte, at time.Time) error {
	res, err := t.tx.ExecContext(t.ctx, `UPDATE passkeys SET sign_count = ?, record = ?, last_used_at = ?
		WHERE id = ? AND user_name = ? AND sign_count = ?`, int64(to), string(record), ms(at), id, user, int64(from))
	if err != nil {
		return fmt.Errorf("db: use passkey: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return queue.ErrPasskeyChanged
	}
	return nil
}

func (t *storeTx) InsertOneshot(o account.Oneshot) error {
	_, err := t.tx.ExecContext(t.ctx, `INSERT INTO oneshots (kind, key_hash, owner, value, expires_at) VALUES (?,?,?,?,?)`,
		o.Kind, o.KeyHash, o.Owner, o.Value, ms(o.Expires))
	if err != nil {
		return fmt.Errorf("db: keep %s under way: %w", o.Kind, err)
	}
	return nil
}

func (t *storeTx) TakeOneshot(kind, keyHash string) (account.Oneshot, error) {
	o := account.Oneshot{Kind: kind, KeyHash: keyHash}
	var exp int64
	err := t.tx.QueryRowContext(t.ctx, `DELETE FROM oneshots WHERE kind = ? AND key_hash = ? RETURNING value, expires_at`,
		kind, keyHash).Scan(&o.Value, &exp)
	if errors.Is(err, sql.ErrNoRows) {
		return account.Oneshot{}, oneshot.ErrNotFound
	}
	if err != nil {
		return account.Oneshot{}, fmt.Errorf("db: take %s under way: %w", kind, err)
	}
	o.Expires = time.UnixMilli(exp).UTC()
	return o, nil
}

func (t *storeTx) CountOneshots(kind string) (int, error) {
	var n int
	if err := t.tx.QueryRowContext(t.ctx, `SELECT COUNT(*) FROM oneshots WHERE kind = ?`, kind).Scan(&n); err != nil {
		return 0, fmt.Errorf("db: count %s under way: %w", kind, err)
	}
	return n, nil
}

func (t *storeTx) TrimOneshots(kind, owner string, keep int) error {
	_, err := t.tx.ExecContext(t.ctx, `DELETE FROM oneshots WHERE kind = ? AND owner = ? AND key_hash NOT IN (
		SELECT key_hash FROM oneshots WHERE kind = ? AND owner = ? ORDER BY expires_at DESC, key_hash LIMIT ?)`,
		kind, owner, kind, owner, max(keep, 0))
	if err != nil {
		return fmt.Errorf("db: trim %s under way: %w", kind, err)
	}
	return nil
}

func (t *storeTx) PruneOneshots(kind string, now time.Time) error {
	if _, err := t.tx.ExecContext(t.ctx, `DELETE FROM oneshots WHERE kind = ? AND expires_at <= ?`, kind, ms(now)); err != nil {
		return fmt.Errorf("db: prune %s under way: %w", kind, err)
	}
	return nil
}
