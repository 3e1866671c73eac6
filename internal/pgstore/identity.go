package pgstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/countersign/countersign/internal/account"
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

// Passkeys lists a user's passkeys, oldest first.
func (a Accounts) Passkeys(ctx context.Context, user string) ([]account.Passkey, error) {
	return sqlq.Passkeys(ctx, shared{a.d.pool}, user)
}

func (t *txn) Passkeys(user string) ([]account.Passkey, error) {
	return sqlq.Passkeys(t.ctx, shared{t.tx}, user)
}

func (t *txn) InsertPasskey(p account.Passkey) error {
	_, err := t.tx.Exec(t.ctx, `INSERT INTO passkeys (`+sqlq.PasskeyColumns+`) VALUES ($1,$2,$3,$4,$5,$6,$7,NULL)`,
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
	return sqlq.DeletePasskey(t.ctx, shared{t.tx}, user, id)
}

func (t *txn) UsePasskey(user string, id []byte, from, to uint32, record []byte, at time.Time) error {
	t.advance = true // the high-water mark covers it before it is acknowledged
	return sqlq.UsePasskey(t.ctx, shared{t.tx}, user, id, from, to, record, at)
}

func (t *txn) InsertOneshot(o account.Oneshot) error {
	return sqlq.InsertOneshot(t.ctx, shared{t.tx}, o)
}

// TakeOneshot deletes the row and returns it in one statement: of two
// replicas taking the same value at once, the second finds it gone.
func (t *txn) TakeOneshot(kind, keyHash string) (account.Oneshot, error) {
	return sqlq.TakeOneshot(t.ctx, shared{t.tx}, kind, keyHash)
}

func (t *txn) CountOneshots(kind string) (int, error) {
	return sqlq.CountOneshots(t.ctx, shared{t.tx}, kind)
}

func (t *txn) TrimOneshots(kind, owner string, keep int) error {
	return sqlq.TrimOneshots(t.ctx, shared{t.tx}, kind, owner, keep)
}

func (t *txn) PruneOneshots(kind string, now time.Time) error {
	return sqlq.PruneOneshots(t.ctx, shared{t.tx}, kind, now)
}
