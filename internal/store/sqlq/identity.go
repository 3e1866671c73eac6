package sqlq

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/oneshot"
	"github.com/countersign/countersign/internal/queue"
)

// Passkeys and the oneshots (logins and passkey prompts under way).

// PasskeyColumns are a passkey's columns, in the order its reads scan them.
const PasskeyColumns = `id, user_name, name, public_key, sign_count, record, created_at, last_used_at`

func scanPasskey(r Row) (account.Passkey, error) {
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

// Passkeys lists a user's passkeys, oldest first.
func Passkeys(ctx context.Context, q Querier, user string) ([]account.Passkey, error) {
	rows, err := q.Query(ctx, `SELECT `+PasskeyColumns+` FROM passkeys WHERE user_name = ? ORDER BY created_at, id`, user)
	if err != nil {
		return nil, fmt.Errorf("store: list passkeys: %w", err)
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
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: list passkeys: %w", err)
	}
	return out, nil
}

// DeletePasskey deletes a user's passkey and returns it, or
// account.ErrPasskeyNotFound.
func DeletePasskey(ctx context.Context, q Querier, user string, id []byte) (account.Passkey, error) {
	p, err := scanPasskey(q.QueryRow(ctx, `DELETE FROM passkeys WHERE id = ? AND user_name = ? RETURNING `+PasskeyColumns, id, user))
	if errors.Is(err, ErrNoRows) {
		return account.Passkey{}, account.ErrPasskeyNotFound
	}
	if err != nil {
		return account.Passkey{}, fmt.Errorf("store: delete passkey: %w", err)
	}
	return p, nil
}

// UsePasskey records a use of a passkey whose signature count is still
// from, or returns queue.ErrPasskeyChanged.
func UsePasskey(ctx context.Context, q Querier, user string, id []byte, from, to uint32, record []byte, at time.Time) error {
	n, err := q.Exec(ctx, `UPDATE passkeys SET sign_count = ?, record = ?, last_used_at = ?
		WHERE id = ? AND user_name = ? AND sign_count = ?`, int64(to), string(record), ms(at), id, user, int64(from))
	if err != nil {
		return fmt.Errorf("store: use passkey: %w", err)
	}
	if n != 1 {
		return queue.ErrPasskeyChanged
	}
	return nil
}

// InsertOneshot keeps a value under way until it is taken or expires.
func InsertOneshot(ctx context.Context, q Querier, o account.Oneshot) error {
	if _, err := q.Exec(ctx, `INSERT INTO oneshots (kind, key_hash, owner, value, expires_at) VALUES (?,?,?,?,?)`,
		o.Kind, o.KeyHash, o.Owner, o.Value, ms(o.Expires)); err != nil {
		return fmt.Errorf("store: keep %s under way: %w", o.Kind, err)
	}
	return nil
}

// TrimOneshots keeps the keep newest of owner's values of kind and deletes
// the others: an owner's bound of ceremonies under way.
func TrimOneshots(ctx context.Context, q Querier, kind, owner string, keep int) error {
	if _, err := q.Exec(ctx, `DELETE FROM oneshots WHERE kind = ? AND owner = ? AND key_hash NOT IN (
		SELECT key_hash FROM oneshots WHERE kind = ? AND owner = ? ORDER BY expires_at DESC, key_hash LIMIT ?)`,
		kind, owner, kind, owner, max(keep, 0)); err != nil {
		return fmt.Errorf("store: trim %s under way: %w", kind, err)
	}
	return nil
}

// TakeOneshot deletes the row and returns it in one statement: of two
// takers of the same value at once, the second finds it gone
// (oneshot.ErrNotFound).
func TakeOneshot(ctx context.Context, q Querier, kind, keyHash string) (account.Oneshot, error) {
	o := account.Oneshot{Kind: kind, KeyHash: keyHash}
	var exp int64
	err := q.QueryRow(ctx, `DELETE FROM oneshots WHERE kind = ? AND key_hash = ? RETURNING value, expires_at`,
		kind, keyHash).Scan(&o.Value, &exp)
	if errors.Is(err, ErrNoRows) {
		return account.Oneshot{}, oneshot.ErrNotFound
	}
	if err != nil {
		return account.Oneshot{}, fmt.Errorf("store: take %s under way: %w", kind, err)
	}
	o.Expires = time.UnixMilli(exp).UTC()
	return o, nil
}

// CountOneshots counts the values of kind under way.
func CountOneshots(ctx context.Context, q Querier, kind string) (int, error) {
	var n int
	if err := q.QueryRow(ctx, `SELECT COUNT(*) FROM oneshots WHERE kind = ?`, kind).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count %s under way: %w", kind, err)
	}
	return n, nil
}

// PruneOneshots deletes the values of kind that expired by now.
func PruneOneshots(ctx context.Context, q Querier, kind string, now time.Time) error {
	if _, err := q.Exec(ctx, `DELETE FROM oneshots WHERE kind = ? AND expires_at <= ?`, kind, ms(now)); err != nil {
		return fmt.Errorf("store: prune %s under way: %w", kind, err)
	}
	return nil
}
