package db

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/countersign/countersign/internal/account"
)

const operatorTokenColumns = `id, person, scope, note, created_at, expires_at, revoked_at`

func scanOperatorToken(r rowScanner) (account.OperatorToken, error) {
	var t account.OperatorToken
	var created, expires int64
	var revoked sql.NullInt64
	if err := r.Scan(&t.ID, &t.Person, &t.Scope, &t.Note, &created, &expires, &revoked); err != nil {
		return account.OperatorToken{}, err
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC(), fromMS(revoked)
	return t, nil
}

// OperatorTokenByHash finds an operator token by its secret's hash.
func (a Accounts) OperatorTokenByHash(ctx context.Context, hash string) (account.OperatorToken, error) {
	t, err := scanOperatorToken(a.d.sql.QueryRowContext(ctx, `SELECT `+operatorTokenColumns+` FROM operator_tokens WHERE hash = ?`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return account.OperatorToken{}, account.ErrOperatorTokenNotFound
	}
	if err != nil {
		return account.OperatorToken{}, classify(fmt.Errorf("db: look up operator token: %w", err))
	}
	return t, nil
}

// OperatorTokens lists person's newest 100 operator tokens, the live
// ones first.
func (a Accounts) OperatorTokens(ctx context.Context, person string, now time.Time) ([]account.OperatorToken, error) {
	rows, err := a.d.sql.QueryContext(ctx, `SELECT `+operatorTokenColumns+` FROM operator_tokens WHERE person = ?
		ORDER BY (revoked_at IS NULL AND expires_at > ?) DESC, created_at DESC, id LIMIT 100`, person, ms(now))
	if err != nil {
		return nil, classify(fmt.Errorf("db: list operator tokens: %w", err))
	}
	defer rows.Close()
	var out []account.OperatorToken
	for rows.Next() {
		t, err := scanOperatorToken(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, rows.Err()
}

func (t *storeTx) InsertOperatorToken(tok account.OperatorToken, hash string) error {
	if _, err := t.tx.ExecContext(t.ctx, `DELETE FROM operator_tokens WHERE person = ? AND (revoked_at IS NOT NULL OR expires_at <= ?)
		AND id NOT IN (SELECT id FROM operator_tokens WHERE person = ? AND (revoked_at IS NOT NULL OR expires_at <= ?)
			ORDER BY created_at DESC, id DESC LIMIT ?)`,
		tok.Person, ms(tok.CreatedAt), tok.Person, ms(tok.CreatedAt), account.MaxEndedOperatorTokensKept); err != nil {
		return fmt.Errorf("db: drop ended operator tokens: %w", err)
	}
	if _, err := t.tx.ExecContext(t.ctx, `INSERT INTO operator_tokens (id, hash, person, scope, note, created_at, expires_at) VALUES (?,?,?,?,?,?,?)`,
		tok.ID, hash, tok.Person, tok.Scope, tok.Note, ms(tok.CreatedAt), ms(tok.ExpiresAt)); err != nil {
		return fmt.Errorf("db: insert operator token: %w", err)
	}
	return nil
}

func (t *storeTx) LiveOperatorTokens(person string, now time.Time) (int, error) {
	var n int
	if err := t.tx.QueryRowContext(t.ctx, `SELECT count(*) FROM operator_tokens WHERE person = ? AND revoked_at IS NULL AND expires_at > ?`,
		person, ms(now)).Scan(&n); err != nil {
		return 0, fmt.Errorf("db: count operator tokens: %w", err)
	}
	return n, nil
}

func (t *storeTx) RevokeOperatorToken(person, id string, at time.Time) error {
	res, err := t.tx.ExecContext(t.ctx, `UPDATE operator_tokens SET revoked_at = ? WHERE id = ? AND person = ? AND revoked_at IS NULL`, ms(at), id, person)
	if err != nil {
		return fmt.Errorf("db: revoke operator token: %w", err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return fmt.Errorf("%w: %s", account.ErrOperatorTokenNotFound, id)
	}
	return nil
}
