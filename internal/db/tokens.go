package db

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/countersign/countersign/internal/audit"
)

// Token is an agent's API token: its trusted actor and audience.
type Token struct {
	ID        string
	Actor     string
	Audience  string
	Note      string
	CreatedAt time.Time
	RevokedAt time.Time
}

// ErrTokenNotFound is an unknown or revoked token.
var ErrTokenNotFound = errors.New("db: token not found or revoked")

// TokenPrefix starts every API token, so leaked tokens are easy to find.
const TokenPrefix = "cst_"

func hashToken(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// CreateToken stores a new token for (actor, audience) and returns it with
// its secret, which is shown once and stored only as a hash.
func (d *DB) CreateToken(ctx context.Context, actor, audience, note, by, channel string) (Token, string, error) {
	actor, audience = strings.TrimSpace(actor), strings.TrimSpace(audience)
	if actor == "" || audience == "" {
		return Token{}, "", fmt.Errorf("db: a token needs an actor and an audience")
	}
	var raw [32]byte
	var id [6]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Token{}, "", err
	}
	if _, err := rand.Read(id[:]); err != nil {
		return Token{}, "", err
	}
	secret := TokenPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	t := Token{ID: "tok_" + hex.EncodeToString(id[:]), Actor: actor, Audience: audience, Note: note,
		CreatedAt: d.now().UTC().Truncate(time.Millisecond)}
	err := d.update(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, hash, actor, audience, note, created_at) VALUES (?,?,?,?,?,?)`,
			t.ID, hashToken(secret), t.Actor, t.Audience, t.Note, ms(t.CreatedAt)); err != nil {
			return fmt.Errorf("db: insert token: %w", err)
		}
		return appendAudit(ctx, tx, &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindTokenCreated,
			Principal: by, Channel: channel, Details: map[string]any{"token": t.ID, "actor": actor, "audience": audience, "note": note}})
	})
	if err != nil {
		return Token{}, "", err
	}
	return t, secret, nil
}

// TokenBySecret authenticates a bearer token.
func (d *DB) TokenBySecret(ctx context.Context, secret string) (Token, error) {
	var t Token
	var created int64
	err := d.sql.QueryRowContext(ctx, `SELECT id, actor, audience, note, created_at FROM tokens WHERE hash = ? AND revoked_at IS NULL`,
		hashToken(secret)).Scan(&t.ID, &t.Actor, &t.Audience, &t.Note, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Token{}, ErrTokenNotFound
	}
	if err != nil {
		return Token{}, classify(fmt.Errorf("db: look up token: %w", err))
	}
	t.CreatedAt = time.UnixMilli(created).UTC()
	return t, nil
}

// Tokens lists every token, newest first, revoked ones included.
func (d *DB) Tokens(ctx context.Context) ([]Token, error) {
	rows, err := d.sql.QueryContext(ctx, `SELECT id, actor, audience, note, created_at, revoked_at FROM tokens ORDER BY created_at DESC, id`)
	if err != nil {
		return nil, classify(fmt.Errorf("db: list tokens: %w", err))
	}
	defer rows.Close()
	var out []Token
	for rows.Next() {
		var t Token
		var created int64
		var revoked sql.NullInt64
		if err := rows.Scan(&t.ID, &t.Actor, &t.Audience, &t.Note, &created, &revoked); err != nil {
			return nil, err
		}
		t.CreatedAt, t.RevokedAt = time.UnixMilli(created).UTC(), fromMS(revoked)
		out = append(out, t)
	}
	return out, rows.Err()
}

// RevokeToken stops a token from authenticating.
func (d *DB) RevokeToken(ctx context.Context, id, by, channel string) error {
	return d.update(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL`, ms(d.now()), id)
		if err != nil {
			return fmt.Errorf("db: revoke token: %w", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			return fmt.Errorf("%w: %s", ErrTokenNotFound, id)
		}
		return appendAudit(ctx, tx, &audit.Entry{Time: audit.FormatTime(d.now()), Kind: audit.KindTokenRevoked,
			Principal: by, Channel: channel, Details: map[string]any{"token": id}})
	})
}

// AppendAudit records an entry that has no other change with it (for
// example a key rotation performed on files).
func (d *DB) AppendAudit(ctx context.Context, e *audit.Entry) error {
	return d.update(ctx, func(tx *sql.Tx) error { return appendAudit(ctx, tx, e) })
}
