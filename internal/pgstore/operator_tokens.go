package pgstore

import (
	"context"
	"errors"
	"fmt"
	"github.com/jackc/pgx/v5"
	"time"

	"github.com/countersign/countersign/internal/account"
)

const operatorTokenColumns = `id, person, scope, note, created_at, expires_at, revoked_at`

func scanOperatorToken(r rowScanner) (account.OperatorToken, error) {
	var t account.OperatorToken
	var created, expires int64
	var revoked *int64
	if err := r.Scan(&t.ID, &t.Person, &t.Scope, &t.Note, &created, &expires, &revoked); err != nil {
		return account.OperatorToken{}, err
	}
	t.CreatedAt, t.ExpiresAt, t.RevokedAt = time.UnixMilli(created).UTC(), time.UnixMilli(expires).UTC(), fromMS(revoked)
	return t, nil
}

// OperatorTokenByHash finds an operator token by its secret's hash.
func (a Accounts) OperatorTokenByHash(ctx context.Context, hash string) (account.OperatorToken, error) {
	t, err := scanOperatorToken(a.d.pool.QueryRow(ctx, `SELECT `+operatorTokenColumns+` FROM operator_tokens WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		return account.OperatorToken{}, account.ErrOperatorTokenNotFound
	}
	if err != nil {
		return account.OperatorToken{}, classify(fmt.Errorf("pgstore: look up operator token: %w", err))
	}
	return t, nil
}

// OperatorTokens lists person's newest 100 operator tokens, the live
// ones first.
func (a Accounts) OperatorTokens(ctx context.Context, person string, now time.Time) ([]account.OperatorToken, error) {
	rows, err := a.d.pool.Query(ctx, `SELECT `+operatorTokenColumns+` FROM operator_tokens WHERE person = $1
		ORDER BY (revoked_at IS NULL AND expires_at > $2) DESC, created_at DESC, id LIMIT 100`, person, ms(now))
	if err != nil {
		return nil, classify(fmt.Errorf("pgstore: list operator tokens: %w", err))
	}
	defer rows.Close()
	var out []account.OperatorToken
	for rows.Next() {
		t, err := scanOperatorToken(rows)
		if err != nil {
			return nil, classify(err)
		}
		out = append(out, t)
	}
	return out, classify(rows.Err())
}

func (t *txn) InsertOperatorToken(tok account.OperatorToken, hash string) error {
	if _, err := t.tx.Exec(t.ctx, `DELETE FROM operator_tokens WHERE person = $1 AND (revoked_at IS NOT NULL OR expires_at <= $2)
		AND id NOT IN (SELECT id FROM operator_tokens WHERE person = $1 AND (revoked_at IS NOT NULL OR expires_at <= $2)
			ORDER BY created_at DESC, id DESC LIMIT $3)`,
		tok.Person, ms(tok.CreatedAt), account.MaxEndedOperatorTokensKept); err != nil {
		return fmt.Errorf("pgstore: drop ended operator tokens: %w", err)
	}
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO operator_tokens (id, hash, person, scope, note, created_at, expires_at) VALUES ($1,$2,$3,$4,$5,$6,$7)`,
		tok.ID, hash, tok.Person, tok.Scope, tok.Note, ms(tok.CreatedAt), ms(tok.ExpiresAt)); err != nil {
		return fmt.Errorf("pgstore: insert operator token: %w", err)
	}
	return nil
}

func (t *txn) LiveOperatorTokens(person string, now time.Time) (int, error) {
	var n int
	if err := t.tx.QueryRow(t.ctx, `SELECT count(*) FROM operator_tokens WHERE person = $1 AND revoked_at IS NULL AND expires_at > $2`,
		person, ms(now)).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgstore: count operator tokens: %w", err)
	}
	return n, nil
}

func (t *txn) RevokeOperatorToken(person, id string, at time.Time) error {
	tag, err := t.tx.Exec(t.ctx, `UPDATE operator_tokens SET revoked_at = $1 WHERE id = $2 AND person = $3 AND revoked_at IS NULL`, ms(at), id, person)
	if err != nil {
		return fmt.Errorf("pgstore: revoke operator token: %w", err)
	}
	if tag.RowsAffected() != 1 {
		return fmt.Errorf("%w: %s", account.ErrOperatorTokenNotFound, id)
	}
	return nil
}
