package db

import (
	"context"
	"errors"
	"fmt"
	"time"

	sqlite3 "github.com/mattn/go-sqlite3"

	"github.com/countersign/countersign/internal/account"
	"github.com/countersign/countersign/internal/store/sqlq"
)

// Passkeys and the oneshots (logins and passkey prompts under way): the
// identity half of account.Store and account.Tx.

// Passkeys lists a user's passkeys, oldest first.
func (a Accounts) Passkeys(ctx context.Context, user string) ([]account.Passkey, error) {
	return a.d.cached.passkeys.through(a.d.auth, user, clonePasskeys,
		func() ([]account.Passkey, error) { return sqlq.Passkeys(ctx, shared{a.d.sql}, user) }, nil)
}

func (t *storeTx) Passkeys(user string) ([]account.Passkey, error) {
	return sqlq.Passkeys(t.ctx, shared{t.tx}, user)
}

func (t *storeTx) InsertPasskey(p account.Passkey) error {
	_, err := t.tx.ExecContext(t.ctx, `INSERT INTO passkeys (`+sqlq.PasskeyColumns+`) VALUES (?,?,?,?,?,?,?,NULL)`,
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
	return sqlq.DeletePasskey(t.ctx, shared{t.tx}, user, id)
}

func (t *storeTx) UsePasskey(user string, id []byte, from, to uint32, record []byte, at time.Time) error {
	t.db.mustAdvance() // the high-water mark covers it before it is acknowledged
	return sqlq.UsePasskey(t.ctx, shared{t.tx}, user, id, from, to, record, at)
}

func (t *storeTx) InsertOneshot(o account.Oneshot) error {
	return sqlq.InsertOneshot(t.ctx, shared{t.tx}, o)
}

func (t *storeTx) TakeOneshot(kind, keyHash string) (account.Oneshot, error) {
	return sqlq.TakeOneshot(t.ctx, shared{t.tx}, kind, keyHash)
}

func (t *storeTx) CountOneshots(kind string) (int, error) {
	return sqlq.CountOneshots(t.ctx, shared{t.tx}, kind)
}

func (t *storeTx) TrimOneshots(kind, owner string, keep int) error {
	return sqlq.TrimOneshots(t.ctx, shared{t.tx}, kind, owner, keep)
}

func (t *storeTx) PruneOneshots(kind string, now time.Time) error {
	return sqlq.PruneOneshots(t.ctx, shared{t.tx}, kind, now)
}
